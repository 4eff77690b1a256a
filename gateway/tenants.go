package gateway

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/internal/ratebucket"
)

// Plans and tenants in memory (docs/gateway.md, "Plans and tenants").
//
// The catalog (package gateway/catalog) is the truth; each gateway keeps a
// copy, read by the loops without a lock, and reloads it when the
// catalog's revision moves (every PollInterval, and at once after its own
// admin write). So a plan changed through any gateway sharing the database
// applies everywhere within PollInterval, without a restart.

// catalogView is one loaded copy of the catalog.
type catalogView struct {
	plans   map[string]*catalog.Plan
	tenants map[string]string // tenant → plan name
}

// tenantState is one tenant as the gateway sees it: its plan (resolved at
// each reload) and its meters, shared by every loop (atomics and the
// bucket's own lock).
type tenantState struct {
	name string
	plan atomic.Pointer[catalog.Plan] // nil: no plan, every feature off

	// The current period's usage (meter.go).
	period  atomic.Int64 // the period the counters below count, as unix seconds / periodSeconds
	msgs    atomic.Int64 // messages metered in the period (pushed items)
	delivs  atomic.Int64 // deliveries metered in the period (popped messages)
	pending atomic.Int64 // items of pushes forwarded and not yet answered: held against the allowance
	parked  atomic.Int64 // waiting pops holding a slot now

	// Counts not yet written to the store (meter.go, flush).
	unflushedMsgs   atomic.Int64
	unflushedDelivs atomic.Int64

	bucket ratebucket.Bucket
}

// tenant returns the state of name, making it (with its plan resolved) at
// its first request.
func (g *Gateway) tenant(name string) *tenantState {
	if ts, ok := g.tenants.Load(name); ok {
		return ts
	}
	ts, _ := g.tenants.LoadOrCompute(name, func() (*tenantState, bool) {
		ts := &tenantState{name: name}
		ts.plan.Store(g.view.Load().planOf(name))
		return ts, false
	})
	return ts
}

// planOf is the plan of tenant in the view, nil when it has none (or the
// plan it names is gone).
func (v *catalogView) planOf(tenant string) *catalog.Plan {
	if v == nil {
		return nil
	}
	return v.plans[v.tenants[tenant]]
}

// reload reads the catalog whole and points every tenant at its plan.
func (g *Gateway) reload(ctx context.Context) error {
	rev, err := g.cfg.Catalog.Revision(ctx)
	if err != nil {
		return err
	}
	plans, tenants, err := g.cfg.Catalog.Snapshot(ctx)
	if err != nil {
		return err
	}
	v := &catalogView{plans: make(map[string]*catalog.Plan, len(plans)), tenants: make(map[string]string, len(tenants))}
	for i := range plans {
		p := plans[i]
		v.plans[p.Name] = &p
	}
	for _, t := range tenants {
		v.tenants[t.Name] = t.Plan
	}
	g.view.Store(v)
	g.revision.Store(rev)
	g.tenants.Range(func(name string, ts *tenantState) bool {
		ts.plan.Store(v.planOf(name))
		return true
	})
	// Every tenant of the catalog has a state, so that the usage writer
	// reads back its period's usage (refreshUsage) even before its first
	// request here: a tenant put through another gateway sharing the
	// catalog is counted from what that gateway wrote, and its usage is
	// answered here too.
	for name := range v.tenants {
		g.tenant(name)
	}
	return nil
}

// watchCatalog reloads the catalog whenever its revision moves, until the
// gateway stops.
func (g *Gateway) watchCatalog() {
	defer g.bg.Done()
	t := time.NewTicker(g.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-g.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rev, err := g.cfg.Catalog.Revision(ctx)
		if err == nil && (rev != g.revision.Load() || g.view.Load() == nil) {
			err = g.reload(ctx)
		}
		cancel()
		if err != nil {
			g.cfg.Logger.Warn("gateway: reading the catalog failed; serving the last copy", "err", err)
		}
	}
}

// tenantsMap is the type of Gateway.tenants.
type tenantsMap = xsync.Map[string, *tenantState]
