package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// reqreply: C requesters, W responders. Each requester owns a private inbox
// (never declared), or with -inbox request mints a fresh one per request;
// it sends a request carrying the inbox name and a Size payload and waits
// for the reply on that inbox; responders take requests
// (up to RespBatch at a time) and send each payload back to the inbox it
// names. Measured: round trips per second and their latency.

// rrDriver is what a target provides for reqreply.
type rrDriver interface {
	// rrServe answers requests until ctx ends, taking up to batch at a time.
	// It calls ready once requests sent from then on will reach it.
	rrServe(ctx context.Context, id, batch int, ready func()) error
	// rrRequester opens requester id with its own inbox, or, when fresh,
	// one that sends each request with a reply address of its own.
	rrRequester(id int, fresh bool) (requester, error)
}

type requester interface {
	// roundTrip sends one request with payload and waits for its reply.
	roundTrip(payload []byte) error
	close()
}

func runReqReply(ctx context.Context, cfg *Config, t target, m *meter, res *Result) error {
	d, ok := t.(rrDriver)
	if !ok {
		return fmt.Errorf("%s has no reqreply driver", cfg.Target)
	}
	res.Unit = "round trips"
	res.Params = map[string]any{"requesters": cfg.Requesters, "responders": cfg.Responders, "respBatch": cfg.RespBatch, "size": cfg.Size, "inbox": cfg.Inbox, "services": cfg.Services}

	reqs := make([]requester, cfg.Requesters)
	defer func() {
		for _, r := range reqs {
			if r != nil {
				r.close()
			}
		}
	}()
	for i := range reqs {
		r, err := d.rrRequester(i, cfg.freshInbox())
		if err != nil {
			return err
		}
		reqs[i] = r
	}

	srvCtx, stopServers := context.WithCancel(ctx)
	defer stopServers()
	var srvWG sync.WaitGroup
	var srvErr atomic.Pointer[error]
	var ready sync.WaitGroup
	for i := range cfg.Responders {
		srvWG.Add(1)
		ready.Add(1)
		go func() {
			defer srvWG.Done()
			var once sync.Once
			readyOnce := func() { once.Do(ready.Done) }
			defer readyOnce()
			if err := d.rrServe(srvCtx, i, cfg.RespBatch, readyOnce); err != nil && srvCtx.Err() == nil {
				srvErr.CompareAndSwap(nil, &err)
			}
		}()
	}
	ready.Wait()
	if p := srvErr.Load(); p != nil {
		return fmt.Errorf("responder: %w", *p)
	}

	w := newWindow(cfg)
	cpu := cpuOver(ctx, cfg, w)
	m.setPhase("warmup")
	go func() { sleepUntil(ctx, w.start); m.setPhase("measure") }()

	hists := make([]*histT, len(reqs))
	counts := make([]int64, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		hists[i] = newHist()
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := stamp(nil, cfg.Size, 0)
			for ctx.Err() == nil {
				t0 := now()
				if t0 >= w.end {
					return
				}
				if err := r.roundTrip(payload); err != nil {
					errs[i] = err
					return
				}
				t1 := now()
				m.ops.Add(1)
				if w.in(t1) {
					counts[i]++
					record(hists[i], t1-t0)
				}
			}
		}()
	}
	wg.Wait()
	res.CPU = cpu()
	m.setPhase("stopping")
	stopServers()
	for _, r := range reqs {
		r.close()
	}
	reqs = nil
	srvWG.Wait()

	total := newHist()
	for i := range hists {
		total.Merge(hists[i])
		res.Ops += counts[i]
		if errs[i] != nil {
			res.Errors++
		}
	}
	res.Seconds = w.seconds()
	res.Latency = summarize("round trip", total)
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("requester: %w", err)
		}
	}
	if p := srvErr.Load(); p != nil {
		return fmt.Errorf("responder: %w", *p)
	}
	return ctx.Err()
}
