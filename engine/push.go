package engine

import "strings"

// Push appends payloads to one partition of a queue, all or nothing (D7),
// and returns how many were appended. Bounds are checked from the narrowest
// outwards: the queue's maxLength and maxBytes (429 queue_full under reject;
// dropOldest admits and drops from the head), the tenant's byte allowance,
// the broker's total. Reclaimable messages make room before any of them
// refuses (D3). Payload bytes are copied once, into the arena (P2).
func (e *Engine) Push(tenant, queue, partition string, payloads [][]byte) (int, error) {
	return e.PushBy(nil, tenant, queue, partition, payloads)
}

// PushBy is Push made by origin by, which the parked pops it completes
// receive in Consumer.Complete.
func (e *Engine) PushBy(by Origin, tenant, queue, partition string, payloads [][]byte) (int, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if err := CheckName("queue", queue); err != nil {
		return 0, err
	}
	if err := checkOptionalName("partition", partition); err != nil {
		return 0, err
	}
	if len(payloads) > MaxBatch {
		return 0, badRequest("messages holds %d items; at most %d are allowed per call", len(payloads), MaxBatch)
	}
	if partition == "" {
		partition = DefaultPartition
	}
	var nb, largest int64
	for _, pl := range payloads {
		nb += int64(len(pl))
		largest = max(largest, int64(len(pl)))
	}
	var tried reclaimScope
	for {
		tgt := e.pushTarget(tenant, queue, partition)
		if tgt.p == nil {
			// The queue or the partition does not exist: admit the push
			// before building them, so a refused push allocates nothing.
			scope, err := tgt.admit(queue, partition, payloads, nb, largest, tried)
			if err != nil {
				return 0, err
			}
			if scope != reclaimNone {
				tried |= scope
				e.reclaimIn(scope, tgt.q, tgt.t)
				continue
			}
			tgt.build(queue, partition)
		}
		p := tgt.p
		p.mu.Lock()
		if tgt.q.dead.Load() {
			p.mu.Unlock()
			continue
		}
		if len(payloads) == 0 && !tgt.fresh() {
			p.mu.Unlock()
			return 0, nil // an empty push passes no bound; it names the queue
		}
		scope, err := p.push(&tgt, payloads, nb, largest, tried, by)
		switch scope { // p.push unlocked p.mu
		case reclaimNone:
			if err != nil {
				return 0, err
			}
			return len(payloads), nil
		case retryPush:
			continue // another push created the queue or partition first
		}
		// Reclaimable bytes elsewhere could make the room: free them with no
		// partition lock held, then try once more.
		tried |= scope
		e.reclaimIn(scope, tgt.q, tgt.t)
	}
}

// reclaimScope names where reclaimable messages could make room for a push.
type reclaimScope uint8

const (
	reclaimNone   reclaimScope = 0
	reclaimQueue  reclaimScope = 1
	reclaimTenant reclaimScope = 2
	reclaimBroker reclaimScope = 4
	// retryPush is not a scope: the push lost the race to publish a queue
	// or partition and starts again, with nothing freed.
	retryPush reclaimScope = 8
)

// pushTarget is the queue and partition a push goes to. Either may be fresh:
// made for this push and seen by nobody yet. A fresh object is built only
// once admit has admitted the push, and published only once partition.push
// admits it again with its bounds reserved, so a refused push allocates
// nothing and leaves no queue and no partition behind (docs/engine.md, "A
// refused push changes nothing").
type pushTarget struct {
	t          *tenant
	q          *Queue     // nil until built when the queue does not exist
	p          *partition // nil until built when the partition does not exist
	freshQueue bool
	freshPart  bool
}

func (t *pushTarget) fresh() bool { return t.freshPart }

// pushTarget finds the queue and partition; what does not exist is left nil
// for admit to weigh and build to make.
func (e *Engine) pushTarget(tenant, queue, partition string) pushTarget {
	q := e.lookup(tenant, queue)
	if q == nil {
		return pushTarget{t: e.tenant(tenant)}
	}
	return pushTarget{t: q.t, q: q, p: q.findPartition(partition)}
}

// build makes the fresh queue (when there is none) and partition of an
// admitted push.
func (t *pushTarget) build(queue, partition string) {
	if t.q == nil {
		t.q = newQueue(t.t.e, t.t, strings.Clone(queue))
		t.freshQueue = true
	}
	t.p = newPartition(t.q, strings.Clone(partition))
	t.freshPart = true
}

// admit asks, before a fresh queue or partition is built, what
// partition.push asks of a push that creates them, in the same order (D7):
// a message that can never fit, the queue's bounds (a fresh partition holds
// nothing to drop, so under dropOldest only the push's own oldest messages
// make room), the tenant's queue allowance, then its byte allowance and the
// broker's total on the payload, the charges of the objects and the ring the
// push would create. It reserves nothing: partition.push reserves for good
// once the objects exist (a push that loses a race to the last room there is
// refused after building them, and publishes nothing). Like partition.push,
// it returns the scope to reclaim in when reclaimable messages could make
// the room (D3).
func (t *pushTarget) admit(queue, partition string, payloads [][]byte, nb, largest int64, tried reclaimScope) (reclaimScope, error) {
	e := t.t.e
	opts := e.defaultOpts // what newQueue gives an implicit queue
	var length, bytes int64
	if t.q != nil {
		opts = t.q.options()
		length, bytes = t.q.length.Load(), t.q.bytes.Load()
	}
	if err := neverFits(queue, opts, largest); err != nil {
		return reclaimNone, err
	}
	n := int64(len(payloads))
	var overN, overB int64
	if n > 0 {
		overN = length + n - opts.MaxLength
		overB = bytes + nb - opts.MaxBytes
	}
	if overN > 0 || overB > 0 {
		if t.q != nil && t.q.reclaimableMsgs.Load() > 0 && tried&reclaimQueue == 0 {
			return reclaimQueue, nil
		}
		if opts.Policy == PolicyReject {
			return reclaimNone, ErrQueueFull
		}
	}
	var dropNewB int64 // the push's own oldest messages dropOldest drops
	for i := 0; i < len(payloads) && (overN > 0 || overB > 0); i++ {
		l := int64(len(payloads[i]))
		overN, overB = overN-1, overB-l
		dropNewB += l
	}
	objects := e.charge.ofPartition(partition)
	if t.q == nil {
		if t.t.atQueueAllowance(false) {
			return reclaimNone, ErrTenantQueues
		}
		objects += e.charge.ofQueue(queue)
	}
	ring := int64(ringSizeFor(0, uint64(len(payloads)))) * e.charge.slot
	scope, err := t.t.tryReserve(nb+objects, dropNewB, ring, tried)
	if scope == reclaimNone && err == nil {
		t.t.force(-(nb + objects)) // admitted: partition.push reserves for good
	}
	return scope, err
}

// charge is the footprint the fresh objects add.
func (t *pushTarget) charge() int64 {
	var n int64
	if t.freshQueue {
		n += t.q.e.charge.ofQueue(t.q.name)
	}
	if t.freshPart {
		n += t.q.e.charge.ofPartition(t.p.name)
	}
	return n
}

// publish makes the fresh objects visible, queue first; t.p.mu is held (a
// fresh partition's lock, which nobody else can be waiting for, so taking
// Queue.mu under it cannot deadlock). It fails with ErrTenantQueues past the
// queue allowance, or with retryPush when another push published the same
// queue or partition first; a queue it published stays (and keeps its
// charge) even when the partition then fails.
func (t *pushTarget) publish() (reclaimScope, error) {
	if t.freshQueue {
		_, created, err := t.q.t.publishQueue(t.q)
		if err != nil {
			return reclaimNone, err
		}
		if !created {
			return retryPush, nil
		}
		t.freshQueue = false
	}
	if !t.freshPart {
		return reclaimNone, nil
	}
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead.Load() || q.findPartition(t.p.name) != nil {
		return retryPush, nil
	}
	q.addPartition(t.p)
	t.freshPart = false
	return reclaimNone, nil
}

// neverFits refuses a push holding a message larger than the queue's
// maxBytes, under either policy: no state of the queue could admit it, and
// it cannot be split. A batch that passes a bound only as a whole stays a
// 429 under reject: a client's buffered push splits a batch refused with
// queue_full until its parts fit (docs/engine.md, "A push that can never
// fit").
func neverFits(queue string, opts *Options, largest int64) error {
	if largest > opts.MaxBytes {
		return badRequest("a message of %d bytes can never fit queue %s's maxBytes %d", largest, queue, opts.MaxBytes)
	}
	return nil
}

// push admits and appends under p.mu, and unlocks it. It returns a reclaim
// scope (with p.mu already unlocked) when the caller should free reclaimable
// messages there and call again; tried says which scopes were freed already.
// A refused push changes nothing: fresh objects of tgt are published only
// once every bound has admitted the push.
func (p *partition) push(tgt *pushTarget, payloads [][]byte, nb, largest int64, tried reclaimScope, by Origin) (reclaimScope, error) {
	q, t := p.q, p.q.t
	n := int64(len(payloads))
	opts := q.options()
	if err := neverFits(q.name, opts, largest); err != nil {
		p.mu.Unlock()
		return reclaimNone, err
	}

	// The queue's own bounds. Reserve first, so concurrent pushes to other
	// partitions of the queue cannot both pass the check. An empty push
	// passes no bound.
	q.length.Add(n)
	q.bytes.Add(nb)
	var overN, overB int64
	if n > 0 {
		overN = q.length.Load() - opts.MaxLength
		overB = q.bytes.Load() - opts.MaxBytes
	}
	if overN > 0 || overB > 0 {
		p.freeReclaimableFor(overN, overB)
		overN = q.length.Load() - opts.MaxLength
		overB = q.bytes.Load() - opts.MaxBytes
	}
	unreserveQueue := func() {
		q.length.Add(-n)
		q.bytes.Add(-nb)
	}
	if (overN > 0 || overB > 0) && q.reclaimableMsgs.Load() > 0 && tried&reclaimQueue == 0 {
		unreserveQueue()
		p.mu.Unlock()
		return reclaimQueue, nil
	}
	var dropOld uint64 // held messages of p to drop from the head
	var dropOldB int64
	dropNew := 0 // the push's own oldest messages to drop
	var dropNewB int64
	if overN > 0 || overB > 0 {
		if opts.Policy == PolicyReject {
			unreserveQueue()
			p.mu.Unlock()
			return reclaimNone, ErrQueueFull
		}
		for s := p.head; s < p.tail && (overN > 0 || overB > 0); s++ {
			l := int64(p.slotOf(s).h.Len)
			overN, overB = overN-1, overB-l
			dropOld++
			dropOldB += l
		}
		for dropNew < len(payloads) && (overN > 0 || overB > 0) {
			l := int64(len(payloads[dropNew]))
			overN, overB = overN-1, overB-l
			dropNew++
			dropNewB += l
		}
	}

	// The tenant's allowances (queues, then bytes), then the broker's total,
	// on what the push adds (payload, the charges of fresh objects, ring
	// growth) net of what it drops. The queue allowance is looked at here so
	// that it answers before the broker total (D7); publish admits the queue
	// for good.
	if tgt.freshQueue && t.atQueueAllowance(false) {
		unreserveQueue()
		p.mu.Unlock()
		return reclaimNone, ErrTenantQueues
	}
	objects := tgt.charge()
	reserved := nb + objects
	scope, err := t.tryReserve(reserved, dropOldB+dropNewB, p.ringGrowth(len(payloads)), tried)
	if scope != reclaimNone || err != nil {
		unreserveQueue()
		p.mu.Unlock()
		return scope, err
	}
	if scope, err := tgt.publish(); scope != reclaimNone || err != nil {
		t.force(-(nb + tgt.charge())) // what publish did not keep
		unreserveQueue()
		p.mu.Unlock()
		return scope, err
	}
	if n == 0 {
		p.mu.Unlock()
		return reclaimNone, nil
	}

	// Admitted: append, then drop from the head what the policy drops (the
	// push's own oldest messages too when the partition alone could not
	// make the room). freeHead counts the drops and the groups' skips.
	e := q.e
	now := e.nowNanos()
	p.append(payloads, nb, now)
	p.freeHead(dropOld+uint64(dropNew), CauseBounds)
	q.lastActive.Store(now)
	p.armTTL()
	done := doneList{by: by}
	p.wakeLocked(&done)
	p.mu.Unlock()
	done.finish()
	q.trimOthers(p, opts)
	return reclaimNone, nil
}

// freeReclaimableFor frees reclaimable messages of p from the head until the
// queue is no longer over by overN messages and overB bytes, or none is left.
func (p *partition) freeReclaimableFor(overN, overB int64) {
	var k uint64
	for s := p.head; s < min(p.reclaim, p.tail) && (overN > 0 || overB > 0); s++ {
		overN--
		overB -= int64(p.slotOf(s).h.Len)
		k++
	}
	p.freeHead(k, causeNone)
}

// trimOthers drops from the heads of q's other partitions while the queue is
// still over a bound after a dropOldest push filled its own partition (a
// queue within its bounds returns at once, before any lock). It
// goes round the partitions from where the previous trim stopped and stops
// as soon as the queue fits, so a push does not walk every partition of a
// queue that has many (docs/engine.md, "Push cost does not grow"). Best
// effort: concurrent pushes may each see the excess for a moment.
func (q *Queue) trimOthers(skip *partition, opts *Options) {
	over := func() bool { return q.length.Load() > opts.MaxLength || q.bytes.Load() > opts.MaxBytes }
	if !over() {
		// Every push comes here: one that left the queue within its bounds
		// (nearly all) pays two loads, not the walk's setup and division.
		return
	}
	parts := q.partitions()
	start := int(q.trimAt.Load() % uint64(len(parts)))
	for i := 0; i < len(parts) && over(); i++ {
		k := (start + i) % len(parts)
		p := parts[k]
		if p == skip {
			continue
		}
		p.mu.Lock()
		for p.held() > 0 && over() {
			p.freeHead(1, CauseBounds)
		}
		p.mu.Unlock()
		q.trimAt.Store(uint64(k))
	}
}
