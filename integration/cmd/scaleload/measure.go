package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"
)

// result is one configuration's measurement.
type result struct {
	name      string
	requests  int
	elapsed   time.Duration
	latencies []time.Duration
	other     map[int]int // answers other than 201, by status (0: transport error)
}

func (r *result) add(o result) {
	r.requests += o.requests
	r.elapsed += o.elapsed
	r.latencies = append(r.latencies, o.latencies...)
	for s, c := range o.other {
		r.other[s] += c
	}
}

func (r result) rate() float64 { return float64(r.requests) / r.elapsed.Seconds() }

func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	slices.Sort(r.latencies)
	return r.latencies[int(p*float64(len(r.latencies)-1))]
}

// loop runs clients workers for d; each call of op is one request, retry
// saying whether it should repeat an earlier one. It returns the
// measurement.
func loop(ctx context.Context, clients int, d time.Duration, share float64, op func(ctx context.Context, worker int, retry bool) (int, error)) result {
	r := result{other: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			n, other := 0, map[int]int{}
			for ctx.Err() == nil {
				t0 := time.Now()
				status, err := op(ctx, w, share > 0 && rand.Float64() < share)
				if ctx.Err() != nil {
					break // cut off by the end of the run: not counted
				}
				if err != nil {
					status = 0
				}
				if status != http.StatusCreated {
					other[status]++
					continue
				}
				n++
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			r.requests += n
			r.latencies = append(r.latencies, lat...)
			for s, c := range other {
				r.other[s] += c
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	return r
}
