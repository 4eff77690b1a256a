package engine

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/arena"
	"github.com/queenmq/ephemeral/engine/wheel"
)

// Cause is why messages were dropped; the spec publishes one counter each.
type Cause uint8

const (
	CauseBounds Cause = iota // a queue bound under dropOldest
	CauseTTL                 // older than ttlSeconds
	CauseRetry               // attempts reached retryLimit
	numCauses
	causeNone Cause = 255 // freed without being a drop (reclaim, reset, delete)
)

func (c Cause) String() string {
	switch c {
	case CauseBounds:
		return "bounds"
	case CauseTTL:
		return "ttl"
	case CauseRetry:
		return "retry"
	}
	return "none"
}

// Engine is the in-memory broker for one process incarnation.
type Engine struct {
	cfg         Config
	inc         uint64
	incHex      string
	idPrefix    string // "e:<incHex>:", what every id of this incarnation starts with
	arena       *arena.Arena
	wheels      *wheel.Sharded
	manual      Clock // non-nil when the caller drives time
	now         atomic.Int64
	defaultOpts *Options // shared by every implicit queue
	charge      charges  // what each object costs the budgets

	tenants *xsync.Map[string, *tenant]

	// footprint is what the broker total counts (cellBytes): payload bytes
	// held plus the charges of every object, every tenant, and the bytes
	// taken with Charge (docs/engine.md, "What the budgets count").
	footprint   atomic.Int64
	reclaimable atomic.Int64 // payload bytes of reclaimable messages (D3)
	drops       [numCauses]atomic.Int64

	// seqFloor is at least every seq a removed partition ever issued, so a
	// partition created later with the same name starts above them (D6).
	seqFloor atomic.Uint64
	// moveFloor is at least every seq issued by a queue that an ownership
	// move dropped (DropForMove), and never above seqFloor. An id of ours
	// for a queue that is not here, below it, is stale (docs/engine.md,
	// "Ownership moves"). It stays 0 in a broker that never lost a queue.
	moveFloor atomic.Uint64

	nextHint  atomic.Uint64 // spreads partitions over arena and wheel shards
	sweep     sweeper
	reclaimMu sync.Mutex // one broker-wide reclaim pass at a time

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

// New starts an engine. With cfg.Clock nil it reads the real clock and ticks
// its timing wheel from one goroutine; otherwise the caller calls Tick.
func New(cfg Config) *Engine {
	cfg.fillDefaults()
	e := &Engine{
		cfg:     cfg,
		inc:     cfg.Incarnation,
		manual:  cfg.Clock,
		tenants: xsync.NewMap[string, *tenant](),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if e.inc == 0 {
		e.inc = newIncarnation()
	}
	e.charge = measuredCharges
	if cfg.payloadOnly {
		e.charge = charges{}
	}
	e.incHex = fmt.Sprintf("%x", e.inc)
	e.idPrefix = "e:" + e.incHex + ":"
	e.now.Store(e.readClock())
	shards := runtime.GOMAXPROCS(0) * 4
	e.arena = arena.New(cfg.SegmentSize, shards)
	e.arena.SetMaxFree(spareSegments(cfg.MaxBytes, cfg.SegmentSize))
	e.wheels = wheel.NewSharded(shards, cfg.Tick, 4096, e.now.Load())
	d := e.Resolve(OptionSet{})
	e.defaultOpts = &d
	e.sweep.e = e
	e.wheels.Shard(0).Schedule(&e.sweep.timer, e.now.Load()+int64(cfg.SweepEvery), &e.sweep)
	if e.manual == nil {
		go e.run()
	} else {
		close(e.done)
	}
	return e
}

func (e *Engine) readClock() int64 {
	if e.manual != nil {
		return e.manual.Now()
	}
	return time.Now().UnixNano()
}

func (e *Engine) run() {
	defer close(e.done)
	t := time.NewTicker(e.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.Tick()
		}
	}
}

// Tick reads the clock and fires every timer that is due: lease expiry, ttl,
// parked-pop timeouts and window buffers, idle collection (P5).
func (e *Engine) Tick() {
	now := e.readClock()
	e.now.Store(now)
	e.wheels.Advance(now)
}

// nowNanos is engine time as of the last tick (coarse, cheap to read).
func (e *Engine) nowNanos() int64 { return e.now.Load() }

// Incarnation is this engine's random incarnation, as it appears in ids.
func (e *Engine) Incarnation() string { return e.incHex }

// CellBytes is the broker's whole ephemeral footprint: payload bytes held,
// every tenant included, plus the charge of every queue, partition, group,
// cursor and parked pop, plus what Charge took (docs/engine.md, "What the
// budgets count"). It is what QUEEN_EPHEMERAL_MAX_BYTES bounds.
func (e *Engine) CellBytes() int64 { return e.footprint.Load() }

// Drops is the number of messages dropped for cause since start.
func (e *Engine) Drops(c Cause) int64 { return e.drops[c].Load() }

// Close answers every parked pop with an empty batch and stops the clock.
// Verbs called after Close refuse with ErrClosed.
func (e *Engine) Close() {
	if e.closed.Swap(true) {
		return
	}
	if e.manual == nil {
		close(e.stop)
	}
	<-e.done
	e.ReleaseWaiters()
}

// tenant holds one tenant's queues and its allowance.
type tenant struct {
	e           *Engine
	name        string
	queues      *xsync.Map[string, *Queue]
	footprint   atomic.Int64 // payload bytes plus charges: what maxBytes bounds
	reclaimable atomic.Int64 // payload bytes of reclaimable messages
	nqueues     atomic.Int64 // every queue, declared and implicit
	ndeclared   atomic.Int64 // the declared ones among them
	maxBytes    atomic.Int64 // 0 = unlimited
	maxQueues   atomic.Int64 // 0 = unlimited
	// queueShare is the member count the implicit queues' part of maxQueues
	// is divided by (D17; docs/engine.md, "The queue allowance"); 1 (or
	// less): undivided, one count for both kinds, as in a cell of one.
	queueShare atomic.Int64
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
		t.e.sweep.index.file(q, t.e.tickOf(q.nextDue(now)))
	}
	return q, created, nil
}

// The queue allowance (docs/engine.md, "The queue allowance"). Undivided
// (queueShare <= 1: a cell of one, or a tenant on the broker's defaults),
// declared and implicit queues share one count bounded by maxQueues, as
// they always have. Divided among members (queueShare = k > 1), the
// declared queues, which every member holds, are bounded by the whole
// maxQueues, and this member's implicit queues by implicitShare: a k-th of
// what the declared ones leave. Declared queues never wait for implicit
// ones there, so that a configure is not refused, and a member's reconcile
// does not fail to apply a declaration, for what one member happens to
// hold. Counts change only when a queue is created, declared, undeclared
// or removed, never on a push or pop of a queue that is there.

// implicitShare is how many implicit queues one of members members may hold
// when maxQueues (> 0) allows declared of them to be declared: the rest
// divided by members, rounded down as the byte share is, but at least 1
// while there is a rest (a grant of 2 queues in a cell of 3 is not a grant
// of none); 0 when the declared queues take it all.
func implicitShare(maxQueues, declared, members int64) int64 {
	rest := maxQueues - declared
	if rest <= 0 {
		return 0
	}
	return max(1, rest/max(1, members))
}

// atQueueAllowance reports whether one more queue, declared or implicit,
// would pass the tenant's queue allowance now (admitQueue decides for
// good).
func (t *tenant) atQueueAllowance(declared bool) bool {
	m := t.maxQueues.Load()
	if m <= 0 {
		return false
	}
	k := t.queueShare.Load()
	switch {
	case k <= 1:
		return t.nqueues.Load() >= m
	case declared:
		return t.ndeclared.Load() >= m
	default:
		d := t.ndeclared.Load()
		return t.nqueues.Load()-d >= implicitShare(m, d, k)
	}
}

// admitQueue counts one more queue of the kind unless that passes the
// allowance. Each path adds first and checks second, so that concurrent
// creations cannot all pass on the same last slot.
func (t *tenant) admitQueue(declared bool) bool {
	m, k := t.maxQueues.Load(), t.queueShare.Load()
	switch {
	case k <= 1:
		if n := t.nqueues.Add(1); m > 0 && n > m {
			t.nqueues.Add(-1)
			return false
		}
		if declared {
			t.ndeclared.Add(1)
		}
	case declared:
		if d := t.ndeclared.Add(1); m > 0 && d > m {
			t.ndeclared.Add(-1)
			return false
		}
		t.nqueues.Add(1)
	default:
		n := t.nqueues.Add(1)
		if d := t.ndeclared.Load(); m > 0 && n-d > implicitShare(m, d, k) {
			t.nqueues.Add(-1)
			return false
		}
	}
	return true
}

// promoteQueue counts an implicit queue that configure declares as declared
// from now on, unless, divided among members, the declared queues are at
// the allowance. Undivided, the queue is counted already (one count): it is
// always admitted, as it always was. The caller holds the queue's mu.
func (t *tenant) promoteQueue() bool {
	d := t.ndeclared.Add(1)
	if m := t.maxQueues.Load(); m > 0 && d > m && t.queueShare.Load() > 1 {
		t.ndeclared.Add(-1)
		return false
	}
	return true
}

// forgetQueue uncounts a removed queue, declared or not as it died.
func (t *tenant) forgetQueue(declared bool) {
	if declared {
		t.ndeclared.Add(-1)
	}
	t.nqueues.Add(-1)
}

// accountBytes moves the payload gauges of a queue, and the footprint of
// its tenant and the broker.
func (q *Queue) accountBytes(held, reclaimable int64) {
	if held != 0 {
		q.bytes.Add(held)
		q.t.force(held)
	}
	if reclaimable != 0 {
		q.reclaimBytes.Add(reclaimable)
		q.t.reclaimable.Add(reclaimable)
		q.e.reclaimable.Add(reclaimable)
	}
}

// spareSegments is how many free segments the arena keeps for reuse: a
// sixteenth of the broker total, between 2 and arena.DefaultMaxFree (64), so
// that what the pool holds beyond the budget stays small next to it (4 MiB
// of 1 MiB segments for a 64 MiB total, 16 for the default 256 MiB) and a
// fallen load has little to give back (docs/engine.md, "Memory goes back
// when the load falls").
func spareSegments(maxBytes int64, segmentSize int) int {
	if segmentSize <= 0 {
		segmentSize = arena.DefaultSegmentSize
	}
	return int(min(arena.DefaultMaxFree, max(2, maxBytes/int64(segmentSize)/16)))
}

// MaxBytes is the broker's total budget in force (QUEEN_EPHEMERAL_MAX_BYTES
// or its default), the bound CellBytes is held to: exported so a metrics
// scrape can show how near the broker is to it.
func (e *Engine) MaxBytes() int64 { return e.cfg.MaxBytes }
