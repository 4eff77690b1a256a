package server

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// The listing written as it is produced (docs/server.md, "The listing").
// A tenant with more than listWholeMax queues gets its listing as a
// chunked answer, made by a goroutine that walks the tenant's queues
// (engine.EachQueue) and hands the loop one chunk at a time: the next chunk
// is made only once the previous one has left gnet's outbound buffer, so
// what the broker holds for the connection stays under one chunk however
// many queues there are, and the loop never blocks or walks the queues
// itself (P1). The connection is busy meanwhile: requests pipelined behind
// the listing wait and are served after it, in order.

const (
	// listWholeMax is the most queues answered whole, on the loop, sorted
	// by name, with a Content-Length: about 64 KiB of answer at the usual
	// 250 bytes a queue.
	listWholeMax = 256
	// listChunk is the size at which a chunk is handed to the loop; a chunk
	// is at most this plus one queue's entry (under 4 KiB).
	listChunk = 32 << 10
	// listPollMax bounds the wait between two looks at whether a chunk has
	// left, when the client reads slower than the broker writes (gnet has
	// no callback for a drained outbound buffer).
	listPollMax = 50 * time.Millisecond
)

// What the loop tells the producer after a chunk was written.
const (
	listNext = iota // the chunk has left: make the next
	listWait        // it is still in the outbound buffer: look again later
	listStop        // the connection is gone
)

// listStream is one streamed listing; the producer goroutine owns it, the
// loop only sends on verdict.
type listStream struct {
	cs      *conn
	tenant  string
	head    wire.Head
	chunked bool     // HTTP/1.1; an HTTP/1.0 client gets a body ended by closing
	verdict chan int // buffered: the loop never waits on it
	body    []byte   // JSON made since the last chunk
	frame   []byte   // the chunk being written (gnet reads it until its callback)
	count   int64
}

// streamQueues starts a streamed listing of the tenant's queues.
func (cs *conn) streamQueues(req *wire.Request) {
	st := &listStream{
		cs:      cs,
		tenant:  cs.tenant,
		head:    cs.head(req, 200),
		chunked: req.Minor > 0,
		verdict: make(chan int, 1),
	}
	if !st.chunked {
		cs.closeAfter = true // the body ends with the connection
	}
	cs.goBusy()
	cs.s.listStreams.Add(1)
	go st.run()
}

// run makes the answer and hands it to the loop chunk by chunk.
func (st *listStream) run() {
	s := st.cs.s
	defer s.listStreams.Add(-1)
	st.frame = wire.AppendStreamHead(make([]byte, 0, listChunk+8<<10), st.head, st.chunked)
	st.body = wire.AppendQueuesStart(make([]byte, 0, listChunk+8<<10))
	live := true
	s.e.EachQueue(st.tenant, func(q engine.QueueInfo) bool {
		qs := queueStatus(&q)
		st.body = wire.AppendQueueStatus(st.body, int(st.count), &qs)
		st.count++
		if len(st.body) >= listChunk {
			live = st.send(false)
		}
		return live
	})
	if !live {
		return
	}
	st.body = wire.AppendQueuesEnd(st.body, st.count, s.e.CellBytes())
	st.send(true)
}

// send writes the body made so far as one chunk (the last one when last)
// and waits until it has left the outbound buffer. It reports whether the
// listing goes on.
func (st *listStream) send(last bool) bool {
	cs := st.cs
	if st.chunked {
		st.frame = wire.AppendChunk(st.frame, st.body)
		if last {
			st.frame = append(st.frame, wire.LastChunk...)
		}
	} else {
		st.frame = append(st.frame, st.body...)
	}
	st.body = st.body[:0]
	if last {
		// The last chunk ends the busy spell like any answer made off the
		// loop: the connection serves what queued behind the listing.
		cs.answerAsync(st.frame)
		return true
	}
	if cs.c.AsyncWrite(st.frame, st.written) != nil {
		return false // the connection or the loops are gone
	}
	wait := time.Millisecond
	var waited time.Duration
	for {
		var v int
		select {
		case v = <-st.verdict:
		case <-cs.s.quit:
			return false
		}
		switch v {
		case listNext:
			st.frame = st.frame[:0] // gnet is done with it
			return true
		case listStop:
			return false
		}
		// The client has not read the last chunk yet: look again later,
		// and give up on a client that reads nothing for the idle timeout.
		if waited > cs.s.cfg.IdleTimeout {
			_ = cs.c.Close()
			return false
		}
		time.Sleep(wait)
		waited += wait
		wait = min(2*wait, listPollMax)
		if cs.loop.Execute(context.Background(), gnet.RunnableFunc(st.check)) != nil {
			return false
		}
	}
}

// written runs on the loop once a chunk was written to the socket or
// buffered behind it.
func (st *listStream) written(c gnet.Conn, err error) error {
	if err != nil || st.cs.isClosed {
		st.cs.state.Store(stIdle)
		st.verdict <- listStop
		return nil
	}
	st.cs.s.notePeak(c.OutboundBuffered())
	return st.check(context.Background())
}

// check tells the producer, on the loop, whether the last chunk has left.
func (st *listStream) check(context.Context) error {
	switch {
	case st.cs.isClosed:
		st.verdict <- listStop
	case st.cs.c.OutboundBuffered() > 0:
		st.verdict <- listWait
	default:
		st.verdict <- listNext
	}
	return nil
}

// notePeak keeps the largest outbound buffer a streamed listing left
// behind a write (read by tests).
func (s *Server) notePeak(n int) {
	for {
		old := s.listPeak.Load()
		if int64(n) <= old || s.listPeak.CompareAndSwap(old, int64(n)) {
			return
		}
	}
}

// listCounters are the server's gauges of streamed listings (tests).
type listCounters struct {
	listStreams atomic.Int64 // streamed listings under way
	listPeak    atomic.Int64 // the largest outbound buffer one left after a write
}

// listQueuesLater answers a long listing asked for on a link (a stand-in
// has no socket to stream to): the listing is made off the loop, as a
// streamed one is, and answered whole on the frame's stream. One over the
// frame limit is refused RefuseTooLarge there (docs/link.md).
func (cs *conn) listQueuesLater(req *wire.Request) {
	s, tenant, head := cs.s, cs.tenant, req.Head(200)
	cs.goBusy()
	s.listStreams.Add(1)
	go func() {
		defer s.listStreams.Add(-1)
		body := wire.AppendQueuesStart(nil)
		var n int64
		s.e.EachQueue(tenant, func(q engine.QueueInfo) bool {
			qs := queueStatus(&q)
			body = wire.AppendQueueStatus(body, int(n), &qs)
			n++
			return len(body) <= link.MaxFrame // past it the answer is refused: stop making it
		})
		body = wire.AppendQueuesEnd(body, n, s.e.CellBytes())
		cs.answerAsync(wire.AppendResponse(nil, head, body))
	}()
}
