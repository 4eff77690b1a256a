package server

// The message routes, served by a queue's owner (servedByOwner in
// routes.go): push and ack here, pop and its parked sink in pop.go.

import (
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// push serves POST /api/v1/ephemeral/push: all or nothing, 201
// {"pushed": n} (docs/routes.md, push; D7, D10).
func (cs *conn) push(req *wire.Request) {
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

// ack serves POST /api/v1/ephemeral/ack: one outcome per id (D2).
func (cs *conn) ack(req *wire.Request) {
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
