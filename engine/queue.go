package engine

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"
)

// Queue is one (tenant, queue): its declaration, partitions and groups.
type Queue struct {
	e    *Engine
	t    *tenant
	name string
	// base is the move floor when this instance was made: every seq it
	// issues is at or above it, and an id of this incarnation below it was
	// minted before an ownership move of the queue, so it is stale (D17,
	// docs/engine.md "Ownership moves"). Set before the queue is published,
	// never changed.
	base uint64

	mu       sync.Mutex // declaration changes, partition and group creation
	declared atomic.Bool
	opts     atomic.Pointer[Options] // in force; replaced whole, never mutated

	// parts lists partitions in creation order, read without a lock. It is
	// append-only (see addPartition); indexP finds one by name once there
	// are many.
	parts  atomic.Pointer[[]*partition]
	indexP atomic.Pointer[xsync.Map[string, *partition]]

	// groups lists the live groups, read without a lock: appended to like
	// parts, copied on removal; indexG finds one by name once there are many.
	groups atomic.Pointer[[]*group]
	indexG atomic.Pointer[xsync.Map[string, *group]]

	waitMu  sync.Mutex // guards waiters: parked pops without a partition
	waiters waitList

	length           atomic.Int64 // messages held, reclaimable included
	bytes            atomic.Int64 // payload bytes held, reclaimable included
	reclaimableMsgs  atomic.Int64 // reclaimable messages held (D3)
	reclaimableBytes atomic.Int64 // payload bytes of the reclaimable messages
	reclaimer        atomic.Bool  // in the tenant's reclaimers set (reclaim.go)
	drops            [numCauses]atomic.Int64

	lastActive atomic.Int64 // last push or pop (D8)
	parked     atomic.Int32 // parked pops on this queue
	rr         atomic.Uint32
	trimAt     atomic.Uint64 // where trimOthers resumes
	dead       atomic.Bool   // collected or deleted; lookups retry

	// Where the sweeper's dueIndex files the queue; guarded by its mutex.
	dueTick int64
	dueSlot int32

	// The queue's place on its tenant's reclaimers list; guarded by the
	// list's mutex (reclaimset.go).
	reclaimPrev, reclaimNext *Queue
	reclaimLinked            bool
}

// indexAt is the partition count from which lookups use the index map.
const indexAt = 8

// groupIndexAt is the same for groups, looked up on every pop and ack: a
// scan of a few dozen names is as fast as hashing one, and the index cost
// a fan-out of 8 groups 6 % (BENCHMARKS.md, engine).
const groupIndexAt = 32

func newQueue(e *Engine, t *tenant, name string) *Queue {
	q := &Queue{e: e, t: t, name: name, base: e.moveFloor.Load()}
	q.opts.Store(e.defaultOpts)
	q.lastActive.Store(e.nowNanos())
	return q
}

func (q *Queue) options() *Options { return q.opts.Load() }

// live returns q, or, when q died, what holds its name now: the instance
// an ownership move put in its place, or nil. A walk of the tenant's map
// (Range: one entry per name) that found q dead uses it, so a declared
// queue does not drop out of a listing while it moves.
func (q *Queue) live() *Queue {
	if !q.dead.Load() {
		return q
	}
	return q.e.lookup(q.t.name, q.name)
}

func (q *Queue) partitions() []*partition {
	if p := q.parts.Load(); p != nil {
		return *p
	}
	return nil
}

// partitionFor returns the named partition, creating it when its charge
// fits the tenant's allowance and the broker's total. It returns nil and no
// error when the queue died meanwhile: the caller looks the queue up again.
func (q *Queue) partitionFor(name string) (*partition, error) {
	if p := q.findPartition(name); p != nil {
		return p, nil
	}
	charge := q.e.charge.ofPartition(name)
	if err := q.t.reserve(charge); err != nil {
		return nil, err
	}
	q.mu.Lock()
	p := q.findPartition(name)
	if p == nil && !q.dead.Load() {
		p = newPartition(q, strings.Clone(name))
		q.addPartition(p)
		q.mu.Unlock()
		return p, nil
	}
	q.mu.Unlock()
	q.t.force(-charge) // found after all, or the queue died
	return p, nil
}

// addPartition appends p to the partition list; q.mu is held. The list is
// append-only: while its backing array has room, p is written past the end
// that published readers see (they never look there) and a longer view is
// published; when it has none, append doubles it. Adding a partition is
// O(1) amortized instead of a copy of the whole list each time
// (docs/engine.md, "Push cost does not grow").
func (q *Queue) addPartition(p *partition) {
	next := append(q.partitions(), p)
	if idx := q.indexP.Load(); idx != nil {
		idx.Store(p.name, p)
	} else if len(next) >= indexAt {
		idx := xsync.NewMap[string, *partition]()
		for _, x := range next {
			idx.Store(x.name, x)
		}
		q.indexP.Store(idx)
	}
	q.parts.Store(&next)
}

func (q *Queue) findPartition(name string) *partition {
	if idx := q.indexP.Load(); idx != nil {
		p, _ := idx.Load(name)
		return p
	}
	for _, p := range q.partitions() {
		if p.name == name {
			return p
		}
	}
	return nil
}

// group is a consumer group of a queue; "" is queue mode (D4).
type group struct {
	name       string
	lastActive atomic.Int64 // last pop or ack
	parked     atomic.Int32 // parked pops of this group
	skipped    atomic.Int64 // messages freed before ever delivered (D5)
	dead       atomic.Bool  // forgotten; its cursors are being removed
}

func (q *Queue) findGroup(name string) *group {
	if idx := q.indexG.Load(); idx != nil {
		g, _ := idx.Load(name)
		return g
	}
	for _, g := range q.groupList() {
		if g.name == name {
			return g
		}
	}
	return nil
}

// groupFor returns the named group, creating it at its first pop (D4) when
// its charge fits the tenant's allowance and the broker's total. It returns
// nil and no error when the queue died meanwhile.
func (q *Queue) groupFor(name string) (*group, error) {
	if g := q.findGroup(name); g != nil {
		return g, nil
	}
	charge := q.e.charge.ofGroup(name)
	if err := q.t.reserve(charge); err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if g := q.findGroup(name); g != nil || q.dead.Load() {
		q.t.force(-charge)
		return g, nil
	}
	g := &group{name: strings.Clone(name)}
	g.lastActive.Store(q.e.nowNanos())
	next := append(q.groupList(), g) // written past what readers see, as in addPartition
	if idx := q.indexG.Load(); idx != nil {
		idx.Store(g.name, g)
	} else if len(next) >= groupIndexAt {
		idx := xsync.NewMap[string, *group]()
		for _, x := range next {
			idx.Store(x.name, x)
		}
		q.indexG.Store(idx)
	}
	q.groups.Store(&next)
	return g, nil
}

// dropGroupsLocked removes gone, groups just marked dead, from the group
// list and gives back their charges; q.mu is held.
func (q *Queue) dropGroupsLocked(gone []*group) {
	if len(gone) == 0 {
		return
	}
	idx := q.indexG.Load()
	for _, g := range gone {
		q.t.force(-q.e.charge.ofGroup(g.name))
		if idx != nil {
			idx.Delete(g.name)
		}
	}
	gs := q.groupList()
	next := make([]*group, 0, len(gs)-len(gone)) // a copy: readers keep the old list
	for _, x := range gs {
		if !x.dead.Load() {
			next = append(next, x)
		}
	}
	q.groups.Store(&next)
}

func (q *Queue) groupList() []*group {
	if gs := q.groups.Load(); gs != nil {
		return *gs
	}
	return nil
}

// countDrops adds n drops for cause, one of the causes (never causeNone), to
// the queue's and the broker's counters.
func (q *Queue) countDrops(c Cause, n int64) {
	if n == 0 {
		return
	}
	q.drops[c].Add(n)
	q.e.drops[c].Add(n)
}
