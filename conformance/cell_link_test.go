package conformance

import (
	"bytes"
	"strings"
	"testing"
)

// TestCellLinkRelays: on a cell member, a client link's push, pop and ack
// of a queue another member owns are relayed to the owner, and answered on
// their streams as the same requests over HTTP to the same member are
// (byte for byte, the queue's name aside); a pop parked on the owner for a
// link is woken by a push on the owner.
func TestCellLinkRelays(t *testing.T) {
	t.Parallel()
	c := newSteadyTestCell(t)
	a, b := c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b)
	c.waitLive(all...)
	ql := queueOwnedBy(t, "viaLink", a.id, all...)
	qh := queueOwnedBy(t, "viaHTTP", a.id, all...)
	l := b.openLink(t)
	hc := b.dial(t)
	same := func(method, target, body string) rawReply {
		t.Helper()
		hc.send(httpReq(method, strings.ReplaceAll(target, "{Q}", qh), strings.ReplaceAll(body, "{Q}", qh)))
		h := hc.read()
		lr := l.do(method, strings.ReplaceAll(target, "{Q}", ql), strings.ReplaceAll(body, "{Q}", ql))
		hb := bytes.ReplaceAll(h.body, []byte(qh), []byte("{Q}"))
		lb := bytes.ReplaceAll(lr.body, []byte(ql), []byte("{Q}"))
		if h.status != lr.status || !bytes.Equal(hb, lb) {
			t.Fatalf("%s %s:\n  HTTP %d %s\n  link %d %s", method, target, h.status, hb, lr.status, lb)
		}
		return h
	}
	same("POST", "/api/v1/ephemeral/push", `{"queue":"{Q}","messages":[{"payload":1},{"payload":{"n":2}}]}`).want(t, 201, nil)
	var p popResp
	same("GET", "/api/v1/ephemeral/pop?queue={Q}&batch=10", "").want(t, 200, &p)
	if len(p.Messages) != 2 {
		t.Fatalf("popped %d messages through B, want 2", len(p.Messages))
	}
	same("POST", "/api/v1/ephemeral/ack", `{"queue":"{Q}","acks":[{"id":"`+p.Messages[0].ID+`"},{"id":"`+p.Messages[1].ID+`","status":"failed"}]}`).want(t, 200, nil)
	same("GET", "/api/v1/ephemeral/queues/{Q}/depth", "") // B's own copy: as HTTP answers it
	same("POST", "/api/v1/ephemeral/push", `{"queue":"{Q}","messages":[]}`)
	if got := a.gauge(t, "queen_ephemeral_relay_served_total"); got < 4 {
		t.Fatalf("the owner served %v relayed requests, want at least the link's and HTTP's", got)
	}

	// A pop parked on the owner for the link, woken by a push on the owner.
	qp := queueOwnedBy(t, "parked", a.id, all...)
	pop := l.request("GET", "/api/v1/ephemeral/pop?queue="+qp+"&autoAck=true&wait=true&timeout=10000", "")
	waitParked(t, a.broker, 1)
	a.push(t, qp, "", `"wake"`)
	id, r := l.answer()
	var woke popResp
	r.want(t, 200, &woke)
	if id != pop || len(woke.Messages) != 1 || string(woke.Messages[0].Payload) != `"wake"` {
		t.Fatalf("the parked pop: stream %d (want %d), %s", id, pop, r)
	}
}
