package server

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// A member fenced by its own clock must not serve as owner (docs/cell.md,
// "Fencing" and "Which requests are relayed, and where the checks
// happen"). Between the moment its last renewal lapses (a pause past the
// member timeout) and the moment its membership loop publishes the fenced
// view, the view it holds still names it the rendezvous owner; only
// View.Fenced, read against the clock, says it must not act. These tests
// hold such a view (cell.StaticViewUntil with a deadline already passed)
// and call no BeforeChange or OnChange, as a loop that has not run yet
// would not, so that the server's own check is all that decides.

// wantRefusal sends a request and checks its exact status and code.
func (ts *testServer) wantRefusal(t *testing.T, method, path, body string, status int, code string) {
	t.Helper()
	got, raw := ts.do(t, method, path, body)
	var e struct{ Error, Code string }
	if err := json.Unmarshal([]byte(raw), &e); got != status || err != nil || e.Code != code || e.Error == "" {
		t.Fatalf("%s %s %s = %d %s; want %d with code %s", method, path, body, got, raw, status, code)
	}
}

// popOne pops one message of q and returns its id and payload.
func popOne(t *testing.T, ts *testServer, q string) (id, payload string) {
	t.Helper()
	code, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue="+q, "")
	var popped struct {
		Messages []struct {
			ID      string
			Payload json.RawMessage
		}
	}
	if code != 200 || json.Unmarshal([]byte(body), &popped) != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop of %s: %d %s; want one message", q, code, body)
	}
	return popped.Messages[0].ID, string(popped.Messages[0].Payload)
}

// pending is how many messages e holds unconsumed in q.
func pending(t *testing.T, e *engine.Engine, q string) int64 {
	t.Helper()
	var d engine.DepthInfo
	if err := e.Depth(identity.DefaultTenant, q, "", &d); err != nil {
		t.Fatalf("depth of %s: %v", q, err)
	}
	return d.Pending
}

// A push, pop or ack landing on the member that its view names as owner,
// once its renewal has lapsed: 503 owner_moved, and nothing is done (no
// message added, none leased, no lease settled). Renewed, it serves the
// queue as it was.
func TestOwnerFencedByItsClockRefusesWhatLandsOnIt(t *testing.T) {
	members := []cell.Member{{ID: selfAddr}, {ID: "127.0.0.1:2"}}
	valid := cell.StaticView(1, selfAddr, members, false)
	mv := &movingView{}
	mv.v.Store(valid)
	ts := startLanding(t, mv, RelayOptions{})
	q := queueOf(t, valid, selfAddr)
	push := func(payload string) string { return `{"queue":"` + q + `","messages":[{"payload":"` + payload + `"}]}` }

	ts.want(t, "POST", "/api/v1/ephemeral/push", push("first"), 201, `"pushed":1`)
	ts.want(t, "POST", "/api/v1/ephemeral/push", push("second"), 201, `"pushed":1`)
	id, _ := popOne(t, ts, q)
	ack := `{"queue":"` + q + `","acks":[{"id":"` + id + `","status":"completed"}]}`

	lapsed := cell.StaticViewUntil(1, selfAddr, members, time.Now())
	if m, ok := lapsed.Owner(identity.DefaultTenant, q); !ok || m.ID != selfAddr || !lapsed.Fenced() {
		t.Fatalf("the lapsed view: owner %v, fenced %v; want this member, fenced", m, lapsed.Fenced())
	}
	mv.v.Store(lapsed)
	ts.wantRefusal(t, "POST", "/api/v1/ephemeral/push", push("while fenced"), 503, codeOwnerMoved)
	ts.wantRefusal(t, "GET", "/api/v1/ephemeral/pop?queue="+q, "", 503, codeOwnerMoved)
	ts.wantRefusal(t, "POST", "/api/v1/ephemeral/ack", ack, 503, codeOwnerMoved)
	if n := pending(t, ts.e, q); n != 2 {
		t.Fatalf("%d messages pending after the refusals; want 2 (one leased, one not)", n)
	}

	mv.v.Store(cell.StaticView(2, selfAddr, members, false)) // renewed: the same set
	ts.want(t, "POST", "/api/v1/ephemeral/ack", ack, 200, `"outcome":"acked"`)
	if _, data := popOne(t, ts, q); data != `"second"` {
		t.Fatalf("popped %s after renewal; want the second push's message", data)
	}
}

// A push or pop relayed to the member that its view names as owner, once
// its renewal has lapsed: the owner answers 503 owner_moved (which the
// landing member passes on byte for byte) and does nothing.
func TestOwnerFencedByItsClockRefusesWhatIsRelayedToIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ownerAddr := ln.Addr().String()
	members := []cell.Member{{ID: selfAddr}, {ID: ownerAddr}}
	valid := cell.StaticView(1, ownerAddr, members, false)
	mv := &movingView{}
	mv.v.Store(valid)
	owner := startLanding(t, mv, RelayOptions{})
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: owner.s.AdoptRelayConn})
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	landing := startLanding(t, twoMembers(ownerAddr), RelayOptions{})
	q := queueOf(t, valid, ownerAddr)
	push := func(payload string) string { return `{"queue":"` + q + `","messages":[{"payload":"` + payload + `"}]}` }

	landing.want(t, "POST", "/api/v1/ephemeral/push", push("first"), 201, `"pushed":1`)
	mv.v.Store(cell.StaticViewUntil(1, ownerAddr, members, time.Now()))
	landing.wantRefusal(t, "POST", "/api/v1/ephemeral/push", push("while fenced"), 503, codeOwnerMoved)
	landing.wantRefusal(t, "GET", "/api/v1/ephemeral/pop?queue="+q, "", 503, codeOwnerMoved)
	if n := pending(t, owner.e, q); n != 1 {
		t.Fatalf("the owner holds %d messages pending after the refusals; want 1", n)
	}

	mv.v.Store(cell.StaticView(2, ownerAddr, members, false))
	if _, data := popOne(t, landing, q); data != `"first"` {
		t.Fatalf("popped %q through the relay after renewal; want the first push's message", data)
	}
}
