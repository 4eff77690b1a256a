package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/queenmq/ephemeral/gateway/catalog"
)

// memCatalog is a catalog.Store in memory, for the in-process tests of the
// proxy (the catalog's own tests run both real backends).
type memCatalog struct {
	mu      sync.Mutex
	rev     int64
	plans   map[string]catalog.Plan
	tenants map[string]catalog.Tenant
	usage   map[catalog.Usage]int64 // Count zero in the key
	// snapshots and revisions count the reads of each kind.
	snapshots, revisions atomic.Int64
}

func newMemCatalog() *memCatalog {
	return &memCatalog{plans: map[string]catalog.Plan{}, tenants: map[string]catalog.Tenant{}, usage: map[catalog.Usage]int64{}}
}

func (m *memCatalog) PutPlan(_ context.Context, p catalog.Plan) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.plans[p.Name] = p
	m.rev++
	return nil
}

func (m *memCatalog) GetPlan(_ context.Context, name string) (catalog.Plan, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.plans[name]
	return p, ok, nil
}

func (m *memCatalog) DeletePlan(_ context.Context, name string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.plans[name]
	delete(m.plans, name)
	m.rev++
	return ok, nil
}

func (m *memCatalog) PutTenant(_ context.Context, t catalog.Tenant) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tenants[t.Name] = t
	m.rev++
	return nil
}

func (m *memCatalog) GetTenant(_ context.Context, name string) (catalog.Tenant, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tenants[name]
	return t, ok, nil
}

func (m *memCatalog) Snapshot(context.Context) ([]catalog.Plan, []catalog.Tenant, error) {
	m.snapshots.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []catalog.Plan
	var ts []catalog.Tenant
	for _, p := range m.plans {
		ps = append(ps, p)
	}
	for _, t := range m.tenants {
		ts = append(ts, t)
	}
	return ps, ts, nil
}

func (m *memCatalog) Revision(context.Context) (int64, error) {
	m.revisions.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev, nil
}

func (m *memCatalog) AddUsage(_ context.Context, rows []catalog.Usage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		n := r.Count
		r.Count = 0
		m.usage[r] += n
	}
	return nil
}

func (m *memCatalog) UsageSince(_ context.Context, since int64) (map[string]map[catalog.Class]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[catalog.Class]int64{}
	for k, n := range m.usage {
		if k.Minute < since {
			continue
		}
		if out[k.Tenant] == nil {
			out[k.Tenant] = map[catalog.Class]int64{}
		}
		out[k.Tenant][k.Class] += n
	}
	return out, nil
}

func (m *memCatalog) Close() error { return nil }
