package engine

// Declarations applied from elsewhere (D17): in a cell, a configure or a
// delete made on one member reaches the others through the store, and each
// member brings its engine in line with the stored declarations (the
// server's reconcile, docs/cell.md "Declarations, grants and the kill
// switch across members"). Configure declares; these read what is declared
// and take a declaration back without touching contents.

// EachDeclared calls f with every live declared queue and its options in
// force, in no particular order, until f returns false. No lock is held
// while f runs. Like EachQueueName, it may miss a queue created or removed
// during the walk.
func (e *Engine) EachDeclared(f func(tenant, queue string, o Options) bool) {
	e.EachQueueName(func(tenant, queue string) bool {
		q := e.lookup(tenant, queue)
		if q == nil || !q.declared.Load() {
			return true
		}
		return f(tenant, queue, *q.options())
	})
}

// Declared reports whether the queue is declared here, and its options in
// force.
func (e *Engine) Declared(tenant, queue string) (Options, bool) {
	q := e.lookup(tenant, queue)
	if q == nil || !q.declared.Load() {
		return Options{}, false
	}
	return *q.options(), true
}

// Undeclare takes back a queue's declaration, as a delete made on another
// member does to this member's copy: the queue becomes implicit, on the
// default options, and keeps what it holds (the contents live on the owner,
// and a delete's removal of contents is its own step; a push accepted after
// the delete must not be lost to it). A queue that holds nothing (never had
// a partition, a group or a parked pop: a declared queue this member never
// owned) is removed at once, as the idle collector would later. It reports
// whether the queue was declared.
func (e *Engine) Undeclare(tenant, queue string) bool {
	if CheckName("queue", queue) != nil {
		return false
	}
	for {
		q := e.lookup(tenant, queue)
		if q == nil {
			return false
		}
		q.mu.Lock()
		if q.dead.Load() {
			q.mu.Unlock()
			continue
		}
		if !q.declared.Load() {
			q.mu.Unlock()
			return false
		}
		q.declared.Store(false)
		q.t.ndeclared.Add(-1) // implicit from here on, until removed
		q.opts.Store(e.defaultOpts)
		parts := q.partitions()
		pristine := len(parts) == 0 && len(q.groupList()) == 0 && q.parked.Load() == 0
		q.mu.Unlock()
		if pristine {
			// remove(0) checks again under every lock that the queue is
			// implicit and holds nothing pending: a push that came in
			// meanwhile keeps it.
			q.remove(0)
			return true
		}
		for _, p := range parts {
			p.mu.Lock()
			p.armTTL() // the default ttl now
			p.mu.Unlock()
		}
		return true
	}
}
