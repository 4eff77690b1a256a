package storetest

import (
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store"
)

// testRevision: every committed write of a declaration, grant or setting
// changes the revision, including a delete of nothing (a statement that ran
// may as well count: a spurious reload costs a reload); reads do not; a
// write refused as invalid does not.
func testRevision(t *testing.T, open func() store.Store) {
	s := open()
	waitReady(t, s)
	c := ctx(t)
	rev := func() int64 {
		t.Helper()
		r, err := s.Revision(c)
		must(t, err)
		return r
	}
	last := rev()
	if again := rev(); again != last {
		t.Fatalf("revision moved with no write: %d then %d", last, again)
	}
	for _, w := range []struct {
		what string
		fn   func() error
	}{
		{"PutDeclaration", func() error { return s.PutDeclaration(c, decl("t", "q", `{}`)) }},
		{"PutDeclaration again", func() error { return s.PutDeclaration(c, decl("t", "q", `{"maxLength":2}`)) }},
		{"DeleteDeclaration", func() error { _, err := s.DeleteDeclaration(c, "t", "q"); return err }},
		{"PutGrant", func() error { return s.PutGrant(c, store.Grant{Tenant: "t", MaxQueues: 3}) }},
		{"DeleteGrant", func() error { _, err := s.DeleteGrant(c, "t"); return err }},
		{"PutSetting", func() error { return s.PutSetting(c, "k", []byte("v")) }},
		{"SaveKillSwitch", func() error { return store.SaveKillSwitch(c, s, store.KillSwitch{Enabled: false}) }},
	} {
		must(t, w.fn())
		now := rev()
		if now == last {
			t.Fatalf("%s: the revision stayed %d", w.what, now)
		}
		last = now
	}
	// Reads leave it alone.
	load(t, s)
	_, _ = s.LoadGrants(c)
	_, _, _ = s.GetGrant(c, "t")
	_, _, _ = s.GetSetting(c, "k")
	if now := rev(); now != last {
		t.Fatalf("reads moved the revision: %d then %d", last, now)
	}
	// A refused write changes nothing.
	if err := s.PutDeclaration(c, decl("", "q", `{}`)); err == nil {
		t.Fatal("a declaration without a tenant was stored")
	}
	if now := rev(); now != last {
		t.Fatalf("a refused write moved the revision: %d then %d", last, now)
	}
}

// testChangesFromAnotherWriter: a store that others can write (Changes is
// not nil) is told of a write made through another store on the same
// storage within a couple of seconds, and its revision differs after it.
// The embedded store's file admits one writer: Changes is nil, and a
// second open of the same storage is refused (testSurvivesReopen closes
// first), so there is no other writer to hear.
func testChangesFromAnotherWriter(t *testing.T, open func() store.Store) {
	a := open()
	waitReady(t, a)
	ch := a.Changes()
	if ch == nil {
		t.Skip("this store has no other writer: Changes is nil by contract")
	}
	c := ctx(t)
	b := open()
	waitReady(t, b)
	// The first value may be the one sent when the listener connected.
	drain := func() {
		for {
			select {
			case <-ch:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	drain()
	before, err := a.Revision(c)
	must(t, err)
	for _, w := range []struct {
		what string
		fn   func() error
	}{
		{"PutDeclaration", func() error { return b.PutDeclaration(c, decl("t", "q", `{}`)) }},
		{"PutGrant", func() error { return b.PutGrant(c, store.Grant{Tenant: "t"}) }},
		{"SaveKillSwitch", func() error { return store.SaveKillSwitch(c, b, store.KillSwitch{Enabled: true}) }},
		{"DeleteDeclaration", func() error { _, err := b.DeleteDeclaration(c, "t", "q"); return err }},
	} {
		start := time.Now()
		must(t, w.fn())
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s by another store: not told within 2 s", w.what)
		}
		now, err := a.Revision(c)
		must(t, err)
		if now == before {
			t.Fatalf("%s by another store: revision still %d", w.what, now)
		}
		t.Logf("%s by another store: told after %v", w.what, time.Since(start))
		before = now
		drain()
	}
}
