package server

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/identity"
)

// movingView is a membership whose view the test moves by hand, calling
// the server's BeforeChange and OnChange around each move as
// cell.Membership does.
type movingView struct{ v atomic.Pointer[cell.View] }

func (m *movingView) View() *cell.View { return m.v.Load() }

func (m *movingView) move(s *Server, next *cell.View) {
	prev := m.v.Load()
	s.CellChanging(prev, next)
	m.v.Store(next)
	s.CellChanged(prev, next)
}

// A queue this member lost and then owns again starts empty, even when a
// request checked under the old view acted after the loss's drop (the
// check and the act are not one step): what it left behind is emptied
// before the view that gives the queue back is published, and an id
// minted before the moves answers stale.
func TestLeftoversOfALostQueueDoNotComeBack(t *testing.T) {
	const self, peer = selfAddr, "127.0.0.1:2"
	mv := &movingView{}
	mv.v.Store(cell.StaticView(1, self, []cell.Member{{ID: self}}, false))
	ts := startLanding(t, mv, RelayOptions{})
	both := cell.StaticView(2, self, []cell.Member{{ID: self}, {ID: peer}}, false)
	q := queueOf(t, both, peer)

	if code, body := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"`+q+`","messages":[{"payload":"first"}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	code, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue="+q, "")
	var popped struct {
		Messages []struct{ ID string } `json:"messages"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &popped) != nil || len(popped.Messages) != 1 {
		t.Fatalf("pop: %d %s", code, body)
	}
	id := popped.Messages[0].ID

	mv.move(ts.s, both) // the peer owns q now: this member drops it
	// A push checked under the old view acts only now.
	if _, err := ts.e.Push(identity.DefaultTenant, q, "", [][]byte{[]byte(`"late"`)}); err != nil {
		t.Fatal(err)
	}
	mv.move(ts.s, cell.StaticView(3, self, []cell.Member{{ID: self}}, false)) // q comes back

	if code, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue="+q, ""); code != 200 || strings.Contains(body, "late") {
		t.Fatalf("pop after the queue came back: %d %s; want nothing", code, body)
	}
	code, body = ts.do(t, "POST", "/api/v1/ephemeral/ack", `{"queue":"`+q+`","acks":[{"id":"`+id+`","status":"completed"}]}`)
	if code != 200 || !strings.Contains(body, `"outcome":"stale"`) {
		t.Fatalf("ack of an id minted before the moves: %d %s; want stale", code, body)
	}
}

// A member coming back from fencing empties everything it will own before
// its new view is published: a push accepted under the new view is kept
// (it is never dropped after the fact).
func TestRejoinEmptiesBeforeServing(t *testing.T) {
	const self = selfAddr
	mv := &movingView{}
	mv.v.Store(cell.StaticView(1, self, []cell.Member{{ID: self}}, false))
	ts := startLanding(t, mv, RelayOptions{})
	fenced := cell.StaticView(2, self, nil, true)
	mv.move(ts.s, fenced)
	// Checked before the fence, acting after its drop.
	if _, err := ts.e.Push(identity.DefaultTenant, "q", "", [][]byte{[]byte(`"before the fence"`)}); err != nil {
		t.Fatal(err)
	}
	rejoined := cell.StaticView(3, self, []cell.Member{{ID: self}}, false)
	ts.s.CellChanging(fenced, rejoined)
	mv.v.Store(rejoined)
	// A push served under the new view, before OnChange has run.
	if code, body := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"after"}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	ts.s.CellChanged(fenced, rejoined)
	code, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue=q&batch=10", "")
	if code != 200 || strings.Contains(body, "before the fence") || !strings.Contains(body, `"after"`) {
		t.Fatalf("pop after the rejoin: %d %s; want only the push accepted after it", code, body)
	}
}
