package link

// Streams is the calls in flight on a link, on the side that opened it,
// for a caller that runs on one event loop (no lock: every method runs
// there): the broker's links to other members, the gateway's links to its
// brokers. Mux is the same for callers on many goroutines.
//
// Ids are handed out in order, so one number says which calls' frames the
// socket has: those below the point of the last Flushed. That is the rule
// for a failed link (lost.go): a call whose frame was handed to the socket
// may have been served; one still in the output was not.
type Streams[T any] struct {
	calls     map[uint64]T
	next      uint64
	sentBelow uint64
}

// Add registers v and returns its stream id, the next in order. The caller
// appends v's frame to the link's output under that id.
func (s *Streams[T]) Add(v T) uint64 {
	if s.calls == nil {
		s.calls = map[uint64]T{}
	}
	id := s.next
	s.next++
	s.calls[id] = v
	return id
}

// Next is the id Add hands out next.
func (s *Streams[T]) Next() uint64 { return s.next }

// Take removes and returns the call of stream id (its answer came, or its
// caller let it go); ok is false when there is none.
func (s *Streams[T]) Take(id uint64) (v T, ok bool) {
	v, ok = s.calls[id]
	if ok {
		delete(s.calls, id)
	}
	return v, ok
}

// Flushed records that the output, with every frame added so far, was
// handed to the socket.
func (s *Streams[T]) Flushed() { s.sentBelow = s.next }

// Len is the number of calls in flight.
func (s *Streams[T]) Len() int { return len(s.calls) }

// Each calls fn with each call in flight, in no order; fn may Take the
// one it is given.
func (s *Streams[T]) Each(fn func(id uint64, v T)) {
	for id, v := range s.calls {
		fn(id, v)
	}
}

// Fail ends every call in flight on a failed link: lost for each whose
// frame was handed to the socket (it may have been served), unsent for
// each whose frame never left (it was not).
func (s *Streams[T]) Fail(lost, unsent func(T)) {
	for id, v := range s.calls {
		delete(s.calls, id)
		if id < s.sentBelow {
			lost(v)
		} else {
			unsent(v)
		}
	}
}
