package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The machinery shared by throughput and fanout: producers push batches of
// stamped payloads, takers take them in groups, and a credit window keeps
// the producers at most Window messages ahead of the slowest group, so a
// run measures a steady state rather than a backlog growing until a bound
// (the broker's maxLength, Redis's memory, a NATS slow-consumer cut) ends it.

type flowKind int

const (
	kindThroughput flowKind = iota // P producers, K takers in one group, explicit acks
	kindFanout                     // one producer, one taker in each of G groups
)

// flowDriver is what a target provides for throughput and fanout.
type flowDriver interface {
	flowSetup(kind flowKind, producers, groups int) error
	flowPusher(kind flowKind, id int) (pusher, error)
	flowTaker(kind flowKind, id, group int) (taker, error)
	flowTeardown(kind flowKind)
}

type pusher interface {
	// push appends the payloads as one batch. refused reports backpressure
	// (the broker's 429 queue_full): nothing was appended, try again.
	push(payloads [][]byte) (refused bool, err error)
	close()
}

type taker interface {
	// take waits briefly (at most about half a second) for up to max
	// messages, calls fn with each payload, settles them (acks where the
	// target has acks) and returns how many it took.
	take(max int, fn func(payload []byte)) (int, error)
	close()
}

// credit is the producers' window.
type credit struct {
	window int64
	sent   atomic.Int64
	got    []atomic.Int64 // per group
	wake   chan struct{}
}

func newCredit(window, groups int) *credit {
	return &credit{window: int64(window), got: make([]atomic.Int64, groups), wake: make(chan struct{}, 1)}
}

func (c *credit) minGot() int64 {
	m := c.got[0].Load()
	for i := 1; i < len(c.got); i++ {
		m = min(m, c.got[i].Load())
	}
	return m
}

// acquire waits until n more messages fit in the window; false when the
// deadline passed or ctx ended first.
func (c *credit) acquire(ctx context.Context, n int, deadline int64) bool {
	for c.sent.Load()+int64(n)-c.minGot() > c.window {
		if now() >= deadline || ctx.Err() != nil {
			return false
		}
		select {
		case <-c.wake:
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
	}
	c.sent.Add(int64(n))
	return true
}

func (c *credit) took(group, n int) {
	c.got[group].Add(int64(n))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

type flowLayout struct {
	kind      flowKind
	producers int
	groups    int
	takerOf   []int // the group of each taker
	rate      float64
}

func runFlow(ctx context.Context, cfg *Config, t target, m *meter, res *Result, l flowLayout) error {
	d, ok := t.(flowDriver)
	if !ok {
		return fmt.Errorf("%s has no %s driver", cfg.Target, cfg.Scenario)
	}
	if err := d.flowSetup(l.kind, l.producers, l.groups); err != nil {
		return err
	}
	defer d.flowTeardown(l.kind)
	pushers := make([]pusher, l.producers)
	takers := make([]taker, len(l.takerOf))
	defer func() {
		for _, p := range pushers {
			if p != nil {
				p.close()
			}
		}
		for _, tk := range takers {
			if tk != nil {
				tk.close()
			}
		}
	}()
	var err error
	for i := range pushers {
		if pushers[i], err = d.flowPusher(l.kind, i); err != nil {
			return err
		}
	}
	for i, g := range l.takerOf {
		if takers[i], err = d.flowTaker(l.kind, i, g); err != nil {
			return err
		}
	}

	w := newWindow(cfg)
	cpu := cpuOver(ctx, cfg, w)
	m.setPhase("warmup")
	go func() { sleepUntil(ctx, w.start); m.setPhase("measure") }()
	cr := newCredit(cfg.Window, l.groups)
	var (
		wg              sync.WaitGroup
		pushed, refused atomic.Int64
		firstErr        atomic.Pointer[error]
		hists           = make([]*histT, len(takers))
		delivered       = make([]int64, len(takers))
		interval        float64 // nanoseconds between one producer's batches at -rate
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	if l.rate > 0 {
		interval = float64(cfg.Batch) / (l.rate / float64(l.producers)) * 1e9
	}
	for _, p := range pushers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, cfg.Batch*cfg.Size)
			batch := make([][]byte, cfg.Batch)
			start := now()
			for k := 0; ctx.Err() == nil && firstErr.Load() == nil; k++ {
				ts := now()
				if interval > 0 {
					ts = start + int64(float64(k)*interval)
					sleepUntil(ctx, ts)
				}
				if ts >= w.end || !cr.acquire(ctx, cfg.Batch, w.end) {
					return
				}
				if interval == 0 {
					ts = now()
				}
				buf = buf[:0]
				for i := range batch {
					n := len(buf)
					buf = stamp(buf, cfg.Size, ts)
					batch[i] = buf[n:len(buf):len(buf)]
				}
				for {
					ref, err := p.push(batch)
					if err != nil {
						fail(fmt.Errorf("push: %w", err))
						return
					}
					if !ref {
						break
					}
					refused.Add(1)
					if now() >= w.end {
						return
					}
					time.Sleep(time.Millisecond)
				}
				if w.in(now()) {
					pushed.Add(int64(cfg.Batch))
				}
			}
		}()
	}
	for i, tk := range takers {
		hists[i] = newHist()
		group := l.takerOf[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hists[i]
			fn := func(p []byte) {
				t1 := now()
				if !w.in(t1) {
					return
				}
				delivered[i]++
				if ts, ok := readStamp(p); ok {
					record(h, t1-ts)
				}
			}
			for ctx.Err() == nil && firstErr.Load() == nil && now() < w.end {
				n, err := tk.take(cfg.Batch, fn)
				if err != nil {
					fail(fmt.Errorf("take: %w", err))
					return
				}
				m.ops.Add(int64(n))
				cr.took(group, n)
			}
		}()
	}
	wg.Wait()
	res.CPU = cpu()
	m.setPhase("stopping")

	total := newHist()
	for i := range hists {
		total.Merge(hists[i])
		res.Ops += delivered[i]
	}
	res.Seconds = w.seconds()
	res.InRate = float64(pushed.Load()) / res.Seconds
	res.Refused = refused.Load()
	res.Latency = summarize("end to end, from the timestamp in the payload to its delivery", total)
	if p := firstErr.Load(); p != nil {
		res.Errors++
		return *p
	}
	return ctx.Err()
}
