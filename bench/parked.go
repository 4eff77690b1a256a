package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// parked: hold N waiting pops on N distinct inboxes, then wake them all
// with one message each. Measured: wake latency (from the push that wakes
// a pop to the pop's answer), wakes per second, and the target's RSS per
// parked pop. On the broker and Redis every waiting pop needs a connection
// of its own (HTTP/1.1 answers in order; BLPOP blocks its client), so N is
// capped by the open-file limits of this process and of the target; on
// NATS a waiter is a subscription and shares a connection.

// parkDriver is what a target provides for parked.
type parkDriver interface {
	// parkNeedsConns reports whether each waiter holds a connection.
	parkNeedsConns() bool
	// park makes n waiters, on inboxes 0..n-1, and returns once the target
	// holds all of them; woke(i) is called when waiter i gets its message.
	// release drops whatever is left.
	park(ctx context.Context, n int, woke func(i int)) (release func(), err error)
	waker(id int) (waker, error)
}

type waker interface {
	// wake sends one message to each inbox.
	wake(ids []int) error
	close()
}

const wakeChunk = 256

func runParked(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error {
	d, ok := t.(parkDriver)
	if !ok {
		return fmt.Errorf("%s has no parked driver", cfg.Target)
	}
	res.Unit = "wakes"
	n := cfg.Parked
	if room, err := openFileRoom(os.Getpid()); err == nil && d.parkNeedsConns() && room-64 < n {
		n = room - 64
		res.Notes = append(res.Notes, fmt.Sprintf("%d of %d parked pops: capped by this process's open-file limit", n, cfg.Parked))
	}
	if cfg.PID > 0 && d.parkNeedsConns() {
		if room, err := openFileRoom(cfg.PID); err == nil && room-64 < n {
			n = room - 64
			res.Notes = append(res.Notes, fmt.Sprintf("%d of %d parked pops: capped by the target's open-file limit", n, cfg.Parked))
		}
	}
	if n < 1 {
		return fmt.Errorf("no room for a parked pop under the open-file limits")
	}
	res.Params = map[string]any{"parked": cfg.Parked, "held": n, "wakers": cfg.Wakers}

	wakers := make([]waker, cfg.Wakers)
	defer func() {
		for _, w := range wakers {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range wakers {
		w, err := d.waker(i)
		if err != nil {
			return err
		}
		wakers[i] = w
	}

	mem := &Memory{PID: cfg.PID, Units: int64(n)}
	res.Memory = mem
	mem.Before = rssOr0(cfg.PID)

	var (
		wakeAt  = make([]atomic.Int64, n)
		got     atomic.Int64
		lastGot atomic.Int64
		mu      sync.Mutex
		h       = newHist()
		all     = make(chan struct{})
	)
	woke := func(i int) {
		t1 := now()
		if t0 := wakeAt[i].Load(); t0 > 0 {
			mu.Lock()
			record(h, t1-t0)
			mu.Unlock()
		}
		lastGot.Store(t1)
		m.ops.Add(1)
		if got.Add(1) == int64(n) {
			close(all)
		}
	}
	m.setPhase("parking")
	release, err := d.park(ctx, n, woke)
	if err != nil {
		return err
	}
	defer release()
	sleepCtx(ctx, time.Second)
	mem.During = rssOr0(cfg.PID)
	mem.PerUnit = float64(mem.During-mem.Before) / float64(n)

	m.setPhase("waking")
	mark := markCPU(targetPIDs(cfg), cfg.BehindPID)
	start := now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for _, w := range wakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int, 0, wakeChunk)
			for ctx.Err() == nil {
				from := int(next.Add(wakeChunk)) - wakeChunk
				if from >= n {
					return
				}
				ids = ids[:0]
				t0 := now()
				for i := from; i < min(from+wakeChunk, n); i++ {
					ids = append(ids, i)
					wakeAt[i].Store(t0)
				}
				if err := w.wake(ids); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		res.Errors++
		return *p
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		res.Notes = append(res.Notes, fmt.Sprintf("only %d of %d parked pops woke within 30 s", got.Load(), n))
	case <-ctx.Done():
	}
	end := lastGot.Load()
	res.CPU = mark.since()
	res.Ops = got.Load()
	res.Seconds = float64(end-start) / 1e9
	mu.Lock()
	res.Latency = summarize("wake: from the push that wakes a parked pop to its answer", h)
	mu.Unlock()
	mem.After = rssOr0(cfg.PID)
	return ctx.Err()
}
