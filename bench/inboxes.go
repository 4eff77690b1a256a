package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// inboxes: create and use N short-lived inboxes (one message in, one out,
// each), let them go idle, then let them be collected. Measured: inboxes
// per second, and the target's RSS before, during (every inbox idle) and
// after collection, with bytes per idle inbox. What an idle inbox is
// differs: on the broker an empty implicit queue waiting for the idle
// collector (QUEEN_EPHEMERAL_IMPLICIT_IDLE_S); on Redis nothing (an empty
// list is deleted at once); on NATS a subscription to the inbox subject,
// held until the client lets it go. -d bounds the creation phase too.

// inboxDriver is what a target provides for inboxes.
type inboxDriver interface {
	inboxer(id int) (inboxer, error)
	// inboxGone reports whether inbox i no longer exists on the target.
	inboxGone(i int) (bool, error)
}

type inboxer interface {
	// use creates each inbox, sends it one message and takes it.
	use(ids []int) error
	// release lets the inboxes this inboxer used go (NATS: unsubscribe).
	release() error
	close()
}

const inboxChunk = 100

func runInboxes(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error {
	d, ok := t.(inboxDriver)
	if !ok {
		return fmt.Errorf("%s has no inboxes driver", cfg.Target)
	}
	res.Unit = "inboxes"
	res.Params = map[string]any{"inboxes": cfg.Inboxes, "connections": cfg.Wakers, "collect": cfg.Collect.String()}
	workers := make([]inboxer, cfg.Wakers)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.close()
			}
		}
	}()
	for i := range workers {
		w, err := d.inboxer(i)
		if err != nil {
			return err
		}
		workers[i] = w
	}
	mem := &Memory{PID: cfg.PID}
	res.Memory = mem
	mem.Before = rssOr0(cfg.PID)

	m.setPhase("creating")
	mark := markCPU(targetPIDs(cfg), cfg.BehindPID)
	start := now()
	deadline := start + int64(cfg.Duration)
	var (
		next     atomic.Int64
		used     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int, 0, inboxChunk)
			for ctx.Err() == nil && firstErr.Load() == nil && now() < deadline {
				from := int(next.Add(inboxChunk)) - inboxChunk
				if from >= cfg.Inboxes {
					return
				}
				ids = ids[:0]
				for i := from; i < min(from+inboxChunk, cfg.Inboxes); i++ {
					ids = append(ids, i)
				}
				if err := w.use(ids); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				used.Add(int64(len(ids)))
				m.ops.Add(int64(len(ids)))
			}
		}()
	}
	wg.Wait()
	res.Seconds = float64(now()-start) / 1e9
	res.CPU = mark.since()
	res.Ops = used.Load()
	if p := firstErr.Load(); p != nil {
		res.Errors++
		return *p
	}
	// Every id below next was handed out and used (workers stop on error).
	n := min(int(next.Load()), cfg.Inboxes)
	mem.Units = res.Ops
	if res.Ops < int64(cfg.Inboxes) {
		res.Notes = append(res.Notes, fmt.Sprintf("-d ended the creation phase after %d of %d inboxes", res.Ops, cfg.Inboxes))
	}

	m.setPhase("idle")
	sleepCtx(ctx, time.Second)
	mem.During = rssOr0(cfg.PID)
	if res.Ops > 0 {
		mem.PerUnit = float64(mem.During-mem.Before) / float64(res.Ops)
	}

	m.setPhase("collect")
	for _, w := range workers {
		if err := w.release(); err != nil {
			return err
		}
	}
	until := time.Now().Add(cfg.Collect)
	for ctx.Err() == nil {
		g1, err1 := d.inboxGone(0)
		g2, err2 := d.inboxGone(n - 1)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("is the inbox gone: %v %v", err1, err2)
		}
		if g1 && g2 {
			mem.Collected = true
			break
		}
		if time.Now().After(until) {
			res.Notes = append(res.Notes, fmt.Sprintf("inboxes not collected within -collect %s (the broker collects idle implicit queues after QUEEN_EPHEMERAL_IMPLICIT_IDLE_S)", cfg.Collect))
			break
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
	sleepCtx(ctx, time.Second)
	mem.After = rssOr0(cfg.PID)
	return ctx.Err()
}

func rssOr0(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	v, err := rss(pid)
	if err != nil {
		return 0
	}
	return v
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
