package engine

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"
)

// tenant holds one tenant's queues and its allowance.
type tenant struct {
	e                *Engine
	name             string
	queues           *xsync.Map[string, *Queue]
	footprint        atomic.Int64 // payload bytes plus charges: what maxBytes bounds
	reclaimableBytes atomic.Int64 // payload bytes of reclaimable messages
	reclaimableMsgs  atomic.Int64 // reclaimable messages, empty ones too
	// reclaimers are the queues that may hold reclaimable messages, what a
	// reclaim pass visits (reclaim.go); reclaimMu: one pass at a time, and
	// reclaimScratch, the queues a pass took, is its own.
	reclaimers     reclaimSet
	reclaimMu      sync.Mutex
	reclaimScratch []*Queue
	nqueues        atomic.Int64 // every queue, declared and implicit
	ndeclared      atomic.Int64 // the declared ones among them
	maxBytes       atomic.Int64 // 0 = unlimited
	maxQueues      atomic.Int64 // 0 = unlimited
	// queueShare is the member count the implicit queues' part of maxQueues
	// is divided by (D17; docs/engine.md, "The queue allowance"); 1 (or
	// less): undivided, one count for both kinds, as in a cell of one.
	queueShare atomic.Int64
	// spare: a sweep found the tenant under memory pressure within the last
	// spareHold, so its empty implicit queues are collected after spareIdle
	// (sweep.go); written by the sweep, read by publishQueue to file a new
	// implicit queue for an early visit. pressedAt: engine time of the last sweep
	// that found the tenant under pressure (the sweep's own).
	spare     atomic.Bool
	pressedAt int64
}

func (e *Engine) tenant(name string) *tenant {
	if t, ok := e.tenants.Load(name); ok {
		return t
	}
	name = strings.Clone(name) // callers may pass views of request buffers
	t, _ := e.tenants.LoadOrCompute(name, func() (*tenant, bool) {
		t := &tenant{e: e, name: name, queues: xsync.NewMap[string, *Queue]()}
		t.maxBytes.Store(e.cfg.TenantMaxBytes)
		t.maxQueues.Store(e.cfg.TenantMaxQueues)
		return t, false
	})
	return t
}

// SetTenantLimits sets a tenant's byte and queue allowance (0 = unlimited),
// as a grant does, undivided (a cell of one).
func (e *Engine) SetTenantLimits(tenant string, maxBytes, maxQueues int64) {
	e.SetTenantLimitsShared(tenant, maxBytes, maxQueues, 1)
}

// SetTenantLimitsShared is SetTenantLimits for a member of a cell of
// members: maxQueues is the whole, cell-wide queue allowance, of which the
// declared queues (held by every member) take what they need and this
// member's implicit queues a members-th of the rest (docs/engine.md, "The
// queue allowance"). maxBytes is already this member's share: the engine
// does not divide it.
func (e *Engine) SetTenantLimitsShared(tenant string, maxBytes, maxQueues, members int64) {
	t := e.tenant(tenant)
	t.maxBytes.Store(maxBytes)
	t.maxQueues.Store(maxQueues)
	t.queueShare.Store(members)
}

// ClearTenantLimits puts a tenant back on the default allowance (a broker
// setting, per member: undivided).
func (e *Engine) ClearTenantLimits(tenant string) {
	e.SetTenantLimits(tenant, e.cfg.TenantMaxBytes, e.cfg.TenantMaxQueues)
}

// QueueCounts returns how many declared and how many implicit queues the
// tenant holds here, as its queue allowance counts them.
func (e *Engine) QueueCounts(tenant string) (declared, implicit int64) {
	t, ok := e.tenants.Load(tenant)
	if !ok {
		return 0, 0
	}
	d := t.ndeclared.Load()
	return d, t.nqueues.Load() - d
}

// lookup returns a live queue, or nil.
func (e *Engine) lookup(tenant, name string) *Queue {
	t, ok := e.tenants.Load(tenant)
	if !ok {
		return nil
	}
	q, ok := t.queues.Load(name)
	for ok && q.dead.Load() {
		// Dead: being removed, or replaced by an ownership move, which
		// publishes the replacement before it marks q dead (Queue.retire).
		// Look again: the replacement, or nothing.
		var again *Queue
		if again, ok = t.queues.Load(name); again == q {
			return nil
		}
		q = again
	}
	if !ok {
		return nil
	}
	return q
}

// queueFor returns the live queue, creating one when it is not there: a
// declared one (on the default options until the caller sets its own) for
// configure, else an implicit one. Creation is refused past the tenant's
// queue allowance for that kind, and past its byte allowance or the broker's
// total once the queue's charge is counted.
func (e *Engine) queueFor(tenant, name string, declare bool) (*Queue, error) {
	if q := e.lookup(tenant, name); q != nil {
		return q, nil
	}
	t := e.tenant(tenant)
	if t.atQueueAllowance(declare) {
		return nil, ErrTenantQueues // before the bytes and the broker total (D7)
	}
	if err := t.reserve(e.charge.ofQueue(name)); err != nil {
		return nil, err
	}
	fresh := newQueue(e, t, strings.Clone(name))
	fresh.declared.Store(declare)
	q, created, err := t.publishQueue(fresh)
	if !created {
		t.force(-e.charge.ofQueue(name))
	}
	return q, err
}

// publishQueue puts fresh, a queue nobody else has seen, in the tenant's
// map, unless a live queue of that name is there already (then that one is
// returned) or the queue allowance has no room for its kind (fresh.declared).
// The caller reserved its charge.
func (t *tenant) publishQueue(fresh *Queue) (q *Queue, created bool, err error) {
	q, _ = t.queues.Compute(fresh.name, func(old *Queue, loaded bool) (*Queue, xsync.ComputeOp) {
		if loaded && !old.dead.Load() {
			return old, xsync.CancelOp
		}
		if !t.admitQueue(fresh.declared.Load()) {
			err = ErrTenantQueues
			return old, xsync.CancelOp
		}
		created = true
		return fresh, xsync.UpdateOp
	})
	if err != nil {
		return nil, false, err
	}
	if created {
		now := t.e.nowNanos()
		due := q.nextDue(now)
		if t.spare.Load() && !q.declared.Load() {
			due = min(due, now+t.e.spareIdle())
		}
		t.e.sweep.index.file(q, t.e.tickOf(due))
	}
	return q, created, nil
}
