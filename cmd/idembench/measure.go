package main

// Measurement: the workers that drive a mode, the slices each mode is
// measured in, latency percentiles, allocations and profiles.

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// result is one measured mode.
type result struct {
	mode        string
	ops         int64
	errors      int64
	firstErr    error
	elapsed     time.Duration
	p50, p99    time.Duration
	allocsPerOp float64
	bytesPerOp  float64
}

func (r result) throughput() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// worker is one client goroutine's state.
type worker struct {
	id     int
	seq    uint64
	rng    *mrand.Rand
	recent []string // mixed: keys this worker completed, most recent last
	lat    []time.Duration
}

// op is one request of a mode; it reports an error for any unexpected
// answer.
type op func(ctx context.Context, w *worker) error

// measurement accumulates one mode's measured slices.
type measurement struct {
	mode    string
	op      op
	workers []*worker
	total   result
	allocs  uint64
	bytes   uint64
}

// prepare sets mode up (replay completes its keys) and runs it for the
// warm-up.
func (b *bench) prepare(ctx context.Context, mode string) (*measurement, error) {
	o, err := b.opFor(ctx, mode)
	if err != nil {
		return nil, err
	}
	m := &measurement{mode: mode, op: o, workers: make([]*worker, b.cfg.concurrency)}
	for i := range m.workers {
		m.workers[i] = &worker{id: i, rng: mrand.New(mrand.NewPCG(uint64(i), 0x1de3)), lat: make([]time.Duration, 0, 1<<14)}
	}
	if b.cfg.warmup > 0 {
		if r := drive(ctx, m.workers, o, b.cfg.warmup); r.errors > 0 {
			return nil, fmt.Errorf("warm-up: %d requests failed; first: %w", r.errors, r.firstErr)
		}
	}
	for _, w := range m.workers {
		w.lat = w.lat[:0]
	}
	return m, nil
}

// measureSlice runs m's mode for d and adds what it measured.
func (b *bench) measureSlice(ctx context.Context, m *measurement, d time.Duration) error {
	runtime.GC()
	stopCPU, err := startCPUProfile(b.cfg, m.mode)
	if err != nil {
		return err
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := drive(ctx, m.workers, m.op, d)
	runtime.ReadMemStats(&after)
	stopCPU()
	if err := writeMemProfile(b.cfg, m.mode); err != nil {
		return err
	}
	m.total.ops += r.ops
	m.total.errors += r.errors
	m.total.elapsed += r.elapsed
	if m.total.firstErr == nil {
		m.total.firstErr = r.firstErr
	}
	m.allocs += after.Mallocs - before.Mallocs
	m.bytes += after.TotalAlloc - before.TotalAlloc
	return nil
}

func (m *measurement) result() result {
	r := m.total
	r.mode = m.mode
	if r.ops > 0 {
		r.allocsPerOp = float64(m.allocs) / float64(r.ops)
		r.bytesPerOp = float64(m.bytes) / float64(r.ops)
	}
	var lat []time.Duration
	for _, w := range m.workers {
		lat = append(lat, w.lat...)
	}
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return r
}

// drive runs o on every worker until d has passed (or ctx ends) and counts.
func drive(ctx context.Context, workers []*worker, o op, d time.Duration) result {
	var (
		ops, errs atomic.Int64
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				if err := o(ctx, w); err != nil {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				w.lat = append(w.lat, time.Since(t0))
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return result{ops: ops.Load(), errors: errs.Load(), firstErr: firstErr, elapsed: time.Since(start)}
}

// percentile returns the q-quantile of lat (nearest rank); it sorts lat.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	i := int(math.Ceil(q*float64(len(lat)))) - 1
	return lat[min(max(i, 0), len(lat)-1)]
}

func profilePath(path string, cfg config, mode string) string {
	if len(cfg.modes) == 1 {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "." + mode + ext
}

func startCPUProfile(cfg config, mode string) (stop func(), err error) {
	if cfg.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(profilePath(cfg.cpuProfile, cfg, mode))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func writeMemProfile(cfg config, mode string) error {
	if cfg.memProfile == "" {
		return nil
	}
	f, err := os.Create(profilePath(cfg.memProfile, cfg, mode))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
