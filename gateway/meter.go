package gateway

import (
	"context"
	"time"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/wire"
)

// Metering (docs/gateway.md, "Metering").
//
// A push meters its item count as messages and a pop the messages it
// delivered as deliveries, both through the plan's one message allowance
// per period (messages + deliveries ≤ messagesPerPeriod) and its one rate
// (messagesPerSecond). A push is refused when its items would pass the
// allowance (its items are held against the allowance while it is in
// flight, so concurrent pushes cannot pass it together) and admitted by
// the rate while the tenant's bucket is not empty; a pop is admitted while
// the allowance is not spent and the bucket not empty, and its deliveries,
// known from its answer, are charged after the fact. So the allowance is
// exact for pushes and may be passed by at most one batch of pops.
//
// Counts are kept per tenant in memory and written to the catalog every
// FlushInterval as one row per tenant, class and minute (the minute of the
// write). After each write the gateway reads back the period's totals, so
// gateways sharing a database share each allowance, within a FlushInterval.
// A gateway that stops writes what it holds; one that crashes loses at most
// the counts since its last write (one batch).

// periodOf is the period a plan's counters count at now (unix seconds):
// its index and its first second. A plan without a period has one period
// that never ends (index 0, from the epoch).
func periodOf(p *catalog.Plan, now int64) (index, start int64) {
	if p == nil || p.PeriodSeconds <= 0 {
		return 0, 0
	}
	index = now / p.PeriodSeconds
	return index, index * p.PeriodSeconds
}

// roll starts a new period's counters when the tenant's period ended.
func (ts *tenantState) roll(p *catalog.Plan, now int64) {
	idx, _ := periodOf(p, now)
	if old := ts.period.Load(); old != idx && ts.period.CompareAndSwap(old, idx) {
		ts.msgs.Store(0)
		ts.delivs.Store(0)
	}
}

// used is what the period's allowance has counted, in-flight pushes
// included.
func (ts *tenantState) used() int64 {
	return ts.msgs.Load() + ts.delivs.Load() + ts.pending.Load()
}

// untilPeriodEnd is the whole seconds to the end of the plan's period.
func untilPeriodEnd(p *catalog.Plan, now int64) int {
	_, start := periodOf(p, now)
	return int(max(1, start+p.PeriodSeconds-now))
}

// admitPush applies the allowance, then the rate, to a push of items
// messages; admitted, the items are held as pending until pushAnswered.
// The refusal's second value is its Retry-After in seconds.
func admitPush(ts *tenantState, p *catalog.Plan, items int, now int64) (*wire.Error, int) {
	ts.roll(p, now)
	n := int64(items)
	if held := ts.pending.Add(n); p.MessagesPerPeriod > 0 && ts.msgs.Load()+ts.delivs.Load()+held > p.MessagesPerPeriod {
		ts.pending.Add(-n)
		return errAllowance, untilPeriodEnd(p, now)
	}
	if wait := ts.bucket.Take(p.MessagesPerSecond, items); wait > 0 {
		ts.pending.Add(-n)
		return errRate, wait
	}
	return nil, 0
}

// pushAnswered settles a push admitted by admitPush: a 201 meters its
// items, anything else gives back what it held.
func pushAnswered(ts *tenantState, p *catalog.Plan, items int, status int) {
	n := int64(items)
	ts.pending.Add(-n)
	if status != 201 {
		if p != nil {
			ts.bucket.Refund(p.MessagesPerSecond, items)
		}
		return
	}
	ts.msgs.Add(n)
	ts.unflushedMsgs.Add(n)
}

// admitPop applies the allowance and the rate to a pop: it is admitted
// while neither is spent.
func admitPop(ts *tenantState, p *catalog.Plan, now int64) (*wire.Error, int) {
	ts.roll(p, now)
	if p.MessagesPerPeriod > 0 && ts.used() >= p.MessagesPerPeriod {
		return errAllowance, untilPeriodEnd(p, now)
	}
	if wait := ts.bucket.Take(p.MessagesPerSecond, 0); wait > 0 {
		return errRate, wait
	}
	return nil, 0
}

// popAnswered meters a pop's deliveries.
func popAnswered(ts *tenantState, p *catalog.Plan, delivered int) {
	if delivered <= 0 {
		return
	}
	ts.delivs.Add(int64(delivered))
	ts.unflushedDelivs.Add(int64(delivered))
	if p != nil {
		ts.bucket.Charge(p.MessagesPerSecond, delivered)
	}
}

// takeSlot holds one of the plan's parked-consumer slots for a waiting pop.
func takeSlot(ts *tenantState, p *catalog.Plan) bool {
	n := ts.parked.Add(1)
	if p.ParkedSlots > 0 && n > p.ParkedSlots {
		ts.parked.Add(-1)
		return false
	}
	return true
}

// flushEvery writes the meters every FlushInterval until the gateway
// stops, and once more then.
func (g *Gateway) flushEvery() {
	defer g.bg.Done()
	t := time.NewTicker(g.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.quit:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := g.flushUsage(ctx); err != nil {
				g.cfg.Logger.Warn("gateway: writing the last usage failed; it is lost", "err", err)
			}
			cancel()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := g.flushUsage(ctx)
		if err == nil {
			err = g.refreshUsage(ctx)
		}
		cancel()
		if err != nil {
			g.cfg.Logger.Warn("gateway: writing usage failed; kept for the next write", "err", err)
		}
	}
}

// flushUsage writes every tenant's unwritten counts as one row per class,
// in the minute of the write. Counts whose write failed are kept.
func (g *Gateway) flushUsage(ctx context.Context) error {
	minute := time.Now().Unix() / 60 * 60
	type taken struct {
		ts     *tenantState
		m, d   int64
		before int
	}
	var rows []catalog.Usage
	var took []taken
	g.tenants.Range(func(name string, ts *tenantState) bool {
		m, d := ts.unflushedMsgs.Swap(0), ts.unflushedDelivs.Swap(0)
		if m == 0 && d == 0 {
			return true
		}
		took = append(took, taken{ts, m, d, len(rows)})
		if m > 0 {
			rows = append(rows, catalog.Usage{Tenant: name, Class: catalog.Messages, Minute: minute, Count: m})
		}
		if d > 0 {
			rows = append(rows, catalog.Usage{Tenant: name, Class: catalog.Deliveries, Minute: minute, Count: d})
		}
		return true
	})
	if len(rows) == 0 {
		return nil
	}
	if err := g.cfg.Catalog.AddUsage(ctx, rows); err != nil {
		for _, t := range took {
			t.ts.unflushedMsgs.Add(t.m)
			t.ts.unflushedDelivs.Add(t.d)
		}
		return err
	}
	g.flushes.Add(1)
	return nil
}

// refreshUsage reads back each tenant's period totals from the catalog
// (what every gateway sharing it wrote), plus what this one has not
// written yet. loadOnly counts also tenants not seen yet (at start).
func (g *Gateway) refreshUsage(ctx context.Context) error {
	now := time.Now().Unix()
	sums := map[int64]map[string]map[catalog.Class]int64{}
	read := func(since int64) (map[string]map[catalog.Class]int64, error) {
		if s, ok := sums[since]; ok {
			return s, nil
		}
		s, err := g.cfg.Catalog.UsageSince(ctx, since/60*60)
		if err == nil {
			sums[since] = s
		}
		return s, err
	}
	var err error
	g.tenants.Range(func(name string, ts *tenantState) bool {
		p := ts.plan.Load()
		idx, start := periodOf(p, now)
		if start%60 != 0 {
			// The catalog counts whole minutes: the period's first minute
			// holds the end of the last period too. A period that is not
			// a whole number of minutes is counted by this gateway alone.
			ts.roll(p, now)
			return true
		}
		var s map[string]map[catalog.Class]int64
		if s, err = read(start); err != nil {
			return false
		}
		ts.roll(p, now)
		if ts.period.Load() == idx {
			ts.msgs.Store(s[name][catalog.Messages] + ts.unflushedMsgs.Load())
			ts.delivs.Store(s[name][catalog.Deliveries] + ts.unflushedDelivs.Load())
		}
		return true
	})
	return err
}

// loadUsage, at start, reads the period's usage of every tenant of the
// catalog (reload made their states), so a restart keeps counting where
// the last write left it.
func (g *Gateway) loadUsage(ctx context.Context) error {
	return g.refreshUsage(ctx)
}
