package server

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// popSink receives a pop's messages and writes them as the answer's JSON
// while the engine holds the partition lock: payload bytes go from the
// arena into the answer, once (P2).
type popSink struct {
	cs     *conn
	e      *engine.Engine
	ts     *tenantState // whose deliveries the answer meters
	head   wire.Head
	body   []byte
	resp   []byte // a parked pop's whole answer, until it is written (directly or by AsyncWrite)
	id     []byte
	extra  []byte // the X-Queen-Delivered line of a gateway-mode answer (end)
	n      int
	parked engine.Parked
}

// deliveredHeader names the count of messages a pop answer carries, sent in
// gateway mode only (docs/routes.md, "Through a gateway"): the gateway
// meters a pop as deliveries without parsing the body.
const deliveredHeader = "X-Queen-Delivered: "

// start prepares the sink for a pop of queue; everything Complete needs is
// set before the engine sees the sink, because a parked pop may complete on
// another goroutine before Pop returns.
func (k *popSink) start(head wire.Head, queue []byte) {
	k.head = head
	k.n = 0
	k.body = wire.AppendPopStart(k.body[:0], bytesString(queue))
}

// end closes the answer's body and, in gateway mode, sets the head's
// X-Queen-Delivered line to the number of messages in it, written into the
// sink's own scratch (no allocation in the steady state, P3). Every 200
// pop answer goes through it: answered at once (pop), after parking
// (Complete), and on a cell's owner for a relayed pop, whose answer the
// landing member passes on unchanged but for the connection fields.
func (k *popSink) end() {
	k.body = wire.AppendPopEnd(k.body)
	k.head.Extra = nil
	if k.cs.s.gatewayMode {
		k.extra = append(k.extra[:0], deliveredHeader...)
		k.extra = strconv.AppendInt(k.extra, int64(k.n), 10)
		k.extra = append(k.extra, "\r\n"...)
		k.head.Extra = k.extra
	}
}

func (k *popSink) Deliver(m engine.Message) {
	k.id = k.e.AppendID(k.id[:0], m.Partition, m.Seq)
	k.body = wire.AppendPopMessage(k.body, k.n, k.id, m.Partition, m.Attempts, m.Payload)
	k.n++
}

// Complete answers a pop that parked: called once, off the loop.
//
// The sink is the connection's own and its buffers are reused once the
// answer has been written (resume), so a steady request/reply loop does not
// allocate them again.
//
// When the push or ack that completed the pop was served on this pop's own
// event loop (by is that request's connection), we are on that loop's
// goroutine: the answer joins the connection's output and the connection
// resumes at the end of the pusher's round, with no cross-loop AsyncWrite.
// Otherwise (another loop, the timing wheel, the kill switch) the completer
// writes the answer itself when the loop has handed the connection over
// (writeDirect), else through AsyncWrite.
func (k *popSink) Complete(_ int, by engine.Origin) {
	k.end()
	k.ts.delivered.Add(k.n) // metering: a pop meters as deliveries
	tc := k.cs
	if tc.isStandIn {
		tc.answerParkedOnLink(by)
		return
	}
	if pc, ok := by.(*conn); ok && pc.loop == tc.loop && tc.loop != nil {
		tc.s.m.observe(tc.reqRoute, tc.reqStart)
		tc.out = wire.AppendResponse(tc.out, k.head, k.body)
		pc.deferred = append(pc.deferred, tc)
		return
	}
	k.resp = wire.AppendResponse(k.resp[:0], k.head, k.body)
	if s := tc.state.Load(); s == stDirect || s == stDirectInput {
		tc.writeDirect(k.resp)
		return
	}
	tc.answerAsync(k.resp)
}

// pop serves GET /api/v1/ephemeral/pop (docs/routes.md, pop; D11).
func (cs *conn) pop(req *wire.Request) {
	pp, err := wire.ParsePop(req.Query(), int(cs.s.cfg.PopTimeout/time.Millisecond))
	if err != nil {
		cs.refuse(req, err)
		return
	}
	var wait time.Duration
	if pp.Wait {
		wait = time.Duration(pp.TimeoutMs) * time.Millisecond
	}
	if cs.elsewhere(req, pp.Queue, wait) {
		return
	}
	k := &cs.sink
	k.ts = cs.ts
	k.start(req.Head(200), pp.Queue)
	r := engine.PopRequest{
		Tenant:    cs.tenant,
		Queue:     bytesString(pp.Queue),
		Partition: bytesString(pp.Partition),
		Group:     bytesString(pp.Group),
		Batch:     pp.Batch,
		AutoAck:   pp.AutoAck,
		Wait:      pp.Wait,
		Timeout:   time.Duration(pp.TimeoutMs) * time.Millisecond,
	}
	_, parked, err := cs.s.e.Pop(&r, k)
	if err != nil {
		cs.refuse(req, err)
		return
	}
	if parked.IsZero() {
		k.ts.delivered.Add(k.n)
		k.end()
		cs.out = wire.AppendResponse(cs.out, k.head, k.body)
		if cap(k.body) > 1<<20 {
			k.body = nil
		}
		return
	}
	// Parked: the engine owns k until Complete, and the connection reads no
	// further request until the answer has been written (resume), so no
	// other pop of this connection can need the sink meanwhile.
	k.parked = parked
	cs.goBusy()
	if cs.s.paused.Load() {
		// The kill switch closed between admit and the park: its
		// ReleaseWaiters may have run before this pop parked (D15).
		cs.s.e.ReleaseWaiters()
	}
}

// bytesString views b as a string for a call that does not keep it (the
// engine copies the names it keeps).
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
