package engine

import "sync"

// reclaimSet is a tenant's reclaimers: the queues that may hold reclaimable
// messages (reclaim.go). It is a list threaded through the queues
// themselves, so that joining and leaving allocate nothing: a request/reply
// load joins every inbox once, when its reply is consumed, and leaves it
// when the inbox is collected, which with a hash set cost an entry
// allocated and a cold bucket locked twice per round trip (5 % of the
// broker's CPU under a fresh-inbox-per-request load).
//
// Its lock is innermost: add runs under a partition lock (updateReclaim).
// Invariant (mu): q.reclaimLinked iff q is on the list from head.
type reclaimSet struct {
	mu   sync.Mutex
	head *Queue
}

// add puts q on the list unless it is there.
func (s *reclaimSet) add(q *Queue) {
	s.mu.Lock()
	if !q.reclaimLinked {
		q.reclaimPrev, q.reclaimNext = nil, s.head
		if s.head != nil {
			s.head.reclaimPrev = q
		}
		s.head, q.reclaimLinked = q, true
	}
	s.mu.Unlock()
}

// remove takes q off the list if it is there.
func (s *reclaimSet) remove(q *Queue) {
	s.mu.Lock()
	if q.reclaimLinked {
		if q.reclaimPrev != nil {
			q.reclaimPrev.reclaimNext = q.reclaimNext
		} else {
			s.head = q.reclaimNext
		}
		if q.reclaimNext != nil {
			q.reclaimNext.reclaimPrev = q.reclaimPrev
		}
		q.reclaimPrev, q.reclaimNext, q.reclaimLinked = nil, nil, false
	}
	s.mu.Unlock()
}

// takeAll empties the list, appending its queues to dst.
func (s *reclaimSet) takeAll(dst []*Queue) []*Queue {
	s.mu.Lock()
	for q := s.head; q != nil; {
		next := q.reclaimNext
		q.reclaimPrev, q.reclaimNext, q.reclaimLinked = nil, nil, false
		dst = append(dst, q)
		q = next
	}
	s.head = nil
	s.mu.Unlock()
	return dst
}

// each calls f for every queue on the list, under its lock (tests).
func (s *reclaimSet) each(f func(*Queue)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for q := s.head; q != nil; q = q.reclaimNext {
		f(q)
	}
}
