package engine

// Push appends payloads to one partition of a queue, all or nothing (D7),
// and returns how many were appended. Bounds are checked from the narrowest
// outwards: the queue's maxLength and maxBytes (429 queue_full under reject;
// dropOldest admits and drops from the head), the tenant's byte allowance,
// the broker's total. Reclaimable messages make room before any of them
// refuses (D3). Payload bytes are copied once, into the arena (P2).
func (e *Engine) Push(tenant, queue, partition string, payloads [][]byte) (int, error) {
	return e.PushBy(nil, tenant, queue, partition, payloads)
}

// PushBy is Push carrying a token that the parked pops it completes receive
// in Consumer.Complete.
func (e *Engine) PushBy(by any, tenant, queue, partition string, payloads [][]byte) (int, error) {
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
	var nb int64
	for _, pl := range payloads {
		nb += int64(len(pl))
	}
	var tried reclaimScope
	for {
		q, err := e.queueFor(tenant, queue)
		if err != nil {
			return 0, err
		}
		p := q.partitionFor(partition)
		p.mu.Lock()
		if q.dead.Load() {
			p.mu.Unlock()
			continue
		}
		if len(payloads) == 0 {
			p.mu.Unlock()
			return 0, nil // an empty push passes no bound; it names the queue
		}
		scope, err := p.push(payloads, nb, tried, by)
		if scope == reclaimNone { // p.push unlocked p.mu
			if err != nil {
				return 0, err
			}
			return len(payloads), nil
		}
		// Reclaimable bytes elsewhere could make the room: free them with no
		// partition lock held, then try once more.
		tried |= scope
		switch scope {
		case reclaimQueue:
			q.reclaimAll()
		case reclaimTenant:
			q.t.reclaimAll()
		case reclaimBroker:
			e.reclaimAll()
		}
	}
}

// reclaimScope names where reclaimable messages could make room for a push.
type reclaimScope uint8

const (
	reclaimNone   reclaimScope = 0
	reclaimQueue  reclaimScope = 1
	reclaimTenant reclaimScope = 2
	reclaimBroker reclaimScope = 4
)

// push admits and appends under p.mu, and unlocks it. It returns a reclaim
// scope (with p.mu already unlocked) when the caller should free reclaimable
// messages there and call again; tried says which scopes were freed already.
func (p *partition) push(payloads [][]byte, nb int64, tried reclaimScope, by any) (reclaimScope, error) {
	q, t, e := p.q, p.q.t, p.q.e
	n := int64(len(payloads))
	opts := q.options()

	// The queue's own bounds. Reserve first, so concurrent pushes to other
	// partitions of the queue cannot both pass the check.
	q.length.Add(n)
	q.bytes.Add(nb)
	overN := q.length.Load() - opts.MaxLength
	overB := q.bytes.Load() - opts.MaxBytes
	if overN > 0 || overB > 0 {
		p.freeReclaimableFor(overN, overB)
		overN = q.length.Load() - opts.MaxLength
		overB = q.bytes.Load() - opts.MaxBytes
	}
	unreserveQueue := func() {
		q.length.Add(-n)
		q.bytes.Add(-nb)
	}
	if (overN > 0 || overB > 0) && q.reclaimN.Load() > 0 && tried&reclaimQueue == 0 {
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
	net := nb - dropOldB - dropNewB

	// The tenant's allowance, then the broker's total, on what the push adds.
	tb := t.bytes.Add(nb)
	if m := t.maxBytes.Load(); m > 0 && net > 0 && tb-dropOldB-dropNewB > m {
		t.bytes.Add(-nb)
		unreserveQueue()
		p.mu.Unlock()
		if t.reclaimable.Load() > 0 && tried&reclaimTenant == 0 {
			return reclaimTenant, nil
		}
		return reclaimNone, ErrTenantBytes
	}
	eb := e.bytes.Add(nb)
	if net > 0 && eb-dropOldB-dropNewB > e.cfg.MaxBytes {
		e.bytes.Add(-nb)
		t.bytes.Add(-nb)
		unreserveQueue()
		p.mu.Unlock()
		if e.reclaimable.Load() > 0 && tried&reclaimBroker == 0 {
			return reclaimBroker, nil
		}
		return reclaimNone, ErrBrokerFull
	}

	// Admitted: append, then drop from the head what the policy drops (the
	// push's own oldest messages too when the partition alone could not
	// make the room). freeHead counts the drops and the groups' skips.
	now := e.nowNanos()
	p.append(payloads, nb, now)
	p.freeHead(dropOld+uint64(dropNew), CauseBounds)
	q.lastActive.Store(now)
	p.armTTL()
	done := doneList{by: by}
	p.wakeLocked(&done)
	excess := q.length.Load() > opts.MaxLength || q.bytes.Load() > opts.MaxBytes
	p.mu.Unlock()
	done.finish()
	if excess {
		q.trimOthers(p, opts)
	}
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
// still over a bound after a dropOldest push filled its own partition. Best
// effort: concurrent pushes may each see the excess for a moment.
func (q *Queue) trimOthers(skip *partition, opts *Options) {
	for _, p := range q.partitions() {
		if p == skip {
			continue
		}
		p.mu.Lock()
		for p.held() > 0 && (q.length.Load() > opts.MaxLength || q.bytes.Load() > opts.MaxBytes) {
			p.freeHead(1, CauseBounds)
		}
		p.mu.Unlock()
	}
}

// reclaimAll frees every reclaimable message of the queue.
func (q *Queue) reclaimAll() {
	for _, p := range q.partitions() {
		p.mu.Lock()
		if p.reclaim > p.head {
			p.freeHead(p.reclaim-p.head, causeNone)
		}
		p.mu.Unlock()
	}
}

func (t *tenant) reclaimAll() {
	t.queues.Range(func(_ string, q *Queue) bool {
		if q.reclaimN.Load() > 0 {
			q.reclaimAll()
		}
		return true
	})
}

// reclaimAll frees every reclaimable message of the broker (D3: the broker
// never refuses while reclaimable bytes could make the room).
func (e *Engine) reclaimAll() {
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	e.tenants.Range(func(_ string, t *tenant) bool {
		if t.reclaimable.Load() > 0 {
			t.reclaimAll()
		}
		return true
	})
}
