package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store"
)

// A member's share of a cell-wide allowance (D17; docs/cell.md, "Tenant
// allowances across members").
func TestShare(t *testing.T) {
	cases := []struct{ allowance, members, want int64 }{
		{0, 3, 0},    // unlimited stays unlimited
		{90, 0, 90},  // a member that sees nobody keeps it whole
		{90, 1, 90},  // a cell of one
		{90, 3, 30},  // divided
		{100, 3, 33}, // rounded down: the shares add up to at most the allowance
		{2, 3, 1},    // never 0, which would mean unlimited
		{1 << 20, 2, 1 << 19},
	}
	for _, c := range cases {
		if got := share(c.allowance, c.members); got != c.want {
			t.Errorf("share(%d, %d) = %d, want %d", c.allowance, c.members, got, c.want)
		}
	}
}

// Grants are divided by the live member count of the current view, and
// re-divided on every change of it; the grant as stored is kept whole.
func TestGrantsRedividedOnViewChange(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st, TenantMsgsPerSecond: 7})
	g := store.Grant{Tenant: "t", MaxBytes: 3000, MaxQueues: 5, MessagesPerSecond: 90}
	s.grantMu.Lock()
	s.setGrantLocked("t", &g)
	s.grantMu.Unlock()
	rate := func() int64 { return s.tenantState("t").rate.Load() }
	if r := rate(); r != 90 {
		t.Fatalf("before any view: rate %d, want 90", r)
	}
	m := []cell.Member{{ID: "a:1"}, {ID: "b:1"}, {ID: "c:1"}}
	steps := []struct {
		v    *cell.View
		want int64
	}{
		{cell.StaticView(1, "a:1", m, false), 30},
		{cell.StaticView(2, "a:1", m[:2], false), 45},
		{cell.StaticView(3, "a:1", m[:2], false), 45}, // same count: nothing to do
		{cell.StaticView(4, "a:1", nil, true), 90},    // fenced and alone: whole (it owns nothing)
		{cell.StaticView(5, "a:1", m, false), 30},
	}
	for i, st := range steps {
		s.redivide(st.v)
		if r := rate(); r != st.want {
			t.Fatalf("step %d (%d members): rate %d, want %d", i, len(st.v.Members), r, st.want)
		}
	}
	if s.sy.grants["t"] != g {
		t.Fatalf("stored grant changed: %+v", s.sy.grants["t"])
	}
	// A tenant without a grant keeps the broker's default rate, undivided.
	if ts := s.tenantState("u"); ts.rate.Load() != 7 {
		t.Fatalf("default rate %d, want 7", ts.rate.Load())
	}
}

// The queue allowance of a grant is divided for implicit queues only, and
// re-divided on every change of the view: declared queues (every member
// holds them) are bounded by the whole grant, this member's implicit queues
// by max(1, (maxQueues - declared) / members); a member alone counts both
// kinds together against the whole grant, as a cell of one always has. A
// tenant without a grant keeps the broker's default allowance, undivided.
func TestQueueShareRedividedOnViewChange(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30, TenantMaxQueues: 2})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	g := store.Grant{Tenant: "t", MaxQueues: 9}
	s.grantMu.Lock()
	s.setGrantLocked("t", &g)
	s.grantMu.Unlock()
	n := 0
	push := func(tenant string) error { // an implicit queue more
		n++
		_, err := e.Push(tenant, fmt.Sprintf("i%d", n), "", [][]byte{[]byte("1")})
		return err
	}
	refused := func(step string, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrTenantQueues) {
			t.Fatalf("%s: %v, want the queue allowance", step, err)
		}
		if we := refusal(err); we.Status != 403 || we.Code != "ephemeral_quota_exceeded" {
			t.Fatalf("%s: answered %d %s, want 403 ephemeral_quota_exceeded", step, we.Status, we.Code)
		}
	}
	if err := e.Configure("t", "d1", engine.OptionSet{}); err != nil {
		t.Fatal(err)
	}
	m := []cell.Member{{ID: "a:1"}, {ID: "b:1"}, {ID: "c:1"}}
	// Three members: (9 - 1) / 3 = 2 implicit queues here.
	s.redivide(cell.StaticView(1, "a:1", m, false))
	for range 2 {
		if err := push("t"); err != nil {
			t.Fatalf("three members, implicit queue %d: %v", n, err)
		}
	}
	refused("three members, a third implicit queue", push("t"))
	// Two: (9 - 1) / 2 = 4.
	s.redivide(cell.StaticView(2, "a:1", m[:2], false))
	for range 2 {
		if err := push("t"); err != nil {
			t.Fatalf("two members, implicit queue %d: %v", n, err)
		}
	}
	refused("two members, a fifth implicit queue", push("t"))
	// Fenced and alone: one count, the whole grant (1 declared + 8).
	s.redivide(cell.StaticView(3, "a:1", nil, true))
	for range 4 {
		if err := push("t"); err != nil {
			t.Fatalf("alone, implicit queue %d: %v", n, err)
		}
	}
	refused("alone, a tenth queue", push("t"))
	refused("alone, declaring a tenth queue", e.CheckDeclare("t", "d2"))
	// Three again: the 8 implicit queues are past the share (they stay),
	// but a declaration is bounded by the whole grant only.
	s.redivide(cell.StaticView(4, "a:1", m, false))
	refused("three members again, an implicit queue", push("t"))
	if err := e.CheckDeclare("t", "d2"); err != nil {
		t.Fatalf("three members, declaring a second queue with 8 implicit ones here: %v", err)
	}
	if err := e.Configure("t", "d2", engine.OptionSet{}); err != nil {
		t.Fatalf("three members, configure d2: %v", err)
	}
	if d, i := e.QueueCounts("t"); d != 2 || i != 8 {
		t.Fatalf("counts: declared %d implicit %d, want 2 and 8", d, i)
	}
	if s.sy.grants["t"] != g {
		t.Fatalf("stored grant changed: %+v", s.sy.grants["t"])
	}
	// Without a grant: the default allowance of 2, whole on this member.
	for range 2 {
		if err := push("u"); err != nil {
			t.Fatalf("tenant without a grant, queue %d: %v", n, err)
		}
	}
	refused("tenant without a grant, a third queue", push("u"))
}

// redivide runs on the membership goroutine, whose next heartbeat waits
// for it: it must not wait for grantMu, which a grant verb or a reconcile
// holds across a store call (up to the store's timeouts, as long as a
// member timeout), or a slow database would fence the member. It applies
// the new shares while a grant verb is in its store call.
func TestRedivideDoesNotWaitForGrantStoreCalls(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	g := store.Grant{Tenant: "t", MessagesPerSecond: 90}
	s.grantMu.Lock()
	s.setGrantLocked("t", &g)
	// Still held: a grant verb waiting for the store.
	done := make(chan struct{})
	m := []cell.Member{{ID: "a:1"}, {ID: "b:1"}, {ID: "c:1"}}
	go func() {
		s.redivide(cell.StaticView(1, "a:1", m, false))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		s.grantMu.Unlock()
		<-done
		t.Fatal("redivide waited for grantMu, held across a grant verb's store call")
	}
	s.grantMu.Unlock()
	ts := s.tenantState("t")
	if ts.rate.Load() != 30 {
		t.Fatalf("rate %d after the view of three, want 30", ts.rate.Load())
	}
}
