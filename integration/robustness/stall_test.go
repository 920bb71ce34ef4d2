package robustness

import (
	"context"
	"sort"
	"sync"
	"time"
)

// faultStall is a fault nobody injected: the whole machine stopped (a
// virtual machine's snapshot, the host reclaiming its memory), which the
// harness sees as its own clock jumping. To the service it is a pause of
// every instance and of PostgreSQL at once, so it explains the windows a
// pause explains, on every instance; it is never scheduled, and a run
// prints how many it saw.
const faultStall = "stall"

// stallThreshold is the gap between two of the watcher's ticks that counts
// as a stall: half the shortest lease a run uses (1 s), the least that,
// beside the scheduling delays of a loaded two-core machine, can make a
// renewal miss its lease.
const stallThreshold = 500 * time.Millisecond

// stallWatcher records the gaps in the harness's own progress: a goroutine
// that should wake every stallTick and, when it wakes stallThreshold or
// more later, records a stall over the gap.
type stallWatcher struct {
	mu     sync.Mutex
	stalls []appliedFault
	done   chan struct{}
}

const stallTick = 10 * time.Millisecond

// watchStalls watches the clock now (the run's, which began at start)
// until ctx ends; stop, after that, returns what it saw.
func watchStalls(ctx context.Context, start int64, now func() int64) *stallWatcher {
	w := &stallWatcher{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		last := now()
		tick := time.NewTicker(stallTick)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t := now()
			if gap := time.Duration(t - last); gap >= stallThreshold {
				w.mu.Lock()
				w.stalls = append(w.stalls, appliedFault{
					fault: fault{Kind: faultStall, Target: -1, At: time.Duration(last - start), For: gap, targetNm: "machine"},
					Begin: last, End: t,
				})
				w.mu.Unlock()
			}
			last = t
		}
	}()
	return w
}

// stop waits for the watcher to end (its ctx must be done) and returns the
// stalls it saw.
func (w *stallWatcher) stop() []appliedFault {
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]appliedFault(nil), w.stalls...)
}

// withStalls returns the applied faults and the stalls, in the order they
// began.
func withStalls(applied, stalls []appliedFault) []appliedFault {
	out := append(append([]appliedFault(nil), applied...), stalls...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Begin < out[j].Begin })
	return out
}

// faultTarget names what f hit: an instance, PostgreSQL, or, for a stall,
// the whole machine.
func (h *history) faultTarget(f appliedFault) string {
	if f.Kind == faultStall {
		return "machine"
	}
	return h.instName(f.Target)
}
