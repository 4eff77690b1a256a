package server

import (
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// pushVerb serves POST /api/v1/ephemeral/push: all or nothing, 201
// {"pushed": n} (spec, push; D7, D10).
func (cs *conn) pushVerb(req *wire.Request) {
	if err := cs.ls.push.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	b := &cs.ls.push
	if cs.elsewhere(req, b.Queue, 0) {
		return
	}
	if cs.rateLimited(req, len(b.Payloads)) {
		return
	}
	n, err := cs.s.e.PushBy(cs, cs.tenant, bytesString(b.Queue), bytesString(b.Partition), b.Payloads)
	if err != nil {
		cs.ts.refund(len(b.Payloads)) // a refused push spends nothing
		cs.refuse(req, err)
		return
	}
	cs.ts.pushed.Add(n) // metering: a push meters as messages
	cs.ls.scratch = wire.AppendPushed(cs.ls.scratch[:0], n)
	cs.answer(req, 201, cs.ls.scratch)
}

// ackVerb serves POST /api/v1/ephemeral/ack: one outcome per id (D2).
func (cs *conn) ackVerb(req *wire.Request) {
	if err := cs.ls.ack.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	b := &cs.ls.ack
	if cs.elsewhere(req, b.Queue, 0) {
		return
	}
	cs.ls.ackItems = cs.ls.ackItems[:0]
	for _, a := range b.Acks {
		cs.ls.ackItems = append(cs.ls.ackItems, engine.AckItem{ID: a.ID, Status: engine.AckStatus(a.Status)})
	}
	out, err := cs.s.e.AckBy(cs, cs.tenant, bytesString(b.Queue), bytesString(b.Group), cs.ls.ackItems, cs.ls.outcomes[:0])
	cs.ls.outcomes = out
	if err != nil {
		cs.refuse(req, err)
		return
	}
	cs.s.m.ackOutcomes(out)
	body := wire.AppendAckStart(cs.ls.scratch[:0])
	for i, o := range out {
		body = wire.AppendAckResult(body, i, b.Acks[i].ID, o.String())
	}
	cs.ls.scratch = wire.AppendAckEnd(body)
	cs.answer(req, 200, cs.ls.scratch)
}

// reset serves POST /api/v1/ephemeral/reset: 200 {"queue","dropped"}, and
// dropped 0 for a queue that is not there (spec, reset and delete).
func (cs *conn) reset(req *wire.Request) {
	var b wire.QueueBody
	if err := b.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	if cs.s.cell != nil {
		cs.resetCell(req, string(b.Queue))
		return
	}
	dropped, err := cs.s.e.Reset(cs.tenant, bytesString(b.Queue))
	if err != nil {
		cs.refuse(req, err)
		return
	}
	cs.ls.scratch = wire.AppendReset(cs.ls.scratch[:0], bytesString(b.Queue), dropped)
	cs.answer(req, 200, cs.ls.scratch)
}

// resetCell is reset in a cell (D17): this member's copy and, off the
// loop, every other live member's (fanout.go); dropped sums what the
// members that answered dropped. The owner not reached: 503
// ephemeral_forward_failed.
func (cs *conn) resetCell(req *wire.Request, queue string) {
	if err := wire.CheckName("queue", []byte(queue)); err != nil {
		cs.refuse(req, err)
		return
	}
	tenant, access, head := cs.tenant, cs.access, req.Head(200)
	cs.goBusy()
	go func() {
		s := cs.s
		dropped, err := s.e.Reset(tenant, queue)
		if err != nil {
			cs.answerAsync(s.appendError(nil, head, refusal(err)))
			return
		}
		res := s.fanOut(tenant, access, localReset, queue)
		if !res.ownerDone {
			cs.answerAsync(s.appendError(nil, head, errOwnerNotReached))
			return
		}
		cs.answerAsync(wire.AppendResponse(nil, head, wire.AppendReset(nil, queue, dropped+res.sum)))
	}()
}
