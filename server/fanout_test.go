package server

import (
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// A member-local reset or delete (another member's fan-out) applies to
// this member's copy only and answers in the fan-out's own format
// (fanout.go); other targets are left to the relayed routes.
func TestServeLocal(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	if _, err := e.Push("t", "q", "", [][]byte{[]byte("1"), []byte("2")}); err != nil {
		t.Fatal(err)
	}
	// The answer may come from another goroutine (a delete's).
	call := func(target string, access identity.Level, queue string) (string, bool) {
		got := make(chan string, 1)
		ok := s.serveLocal(&link.Request{Tenant: []byte("t"), Access: uint8(access), Method: []byte("POST"), Target: []byte(target), Body: []byte(queue)},
			func(r link.Response) { got <- string(r.Raw) })
		if !ok {
			return "", false
		}
		select {
		case r := <-got:
			return r, true
		case <-time.After(5 * time.Second):
			t.Fatalf("%s %q: no answer", target, queue)
			return "", true
		}
	}
	if _, ok := call("/api/v1/ephemeral/push", identity.ReadWrite, "q"); ok {
		t.Fatal("a public route was taken for a member-local request")
	}
	if got, _ := call(localReset, identity.Read, "q"); got[0] != '!' {
		t.Fatalf("reset at read level: %q, want a refusal", got)
	}
	if got, _ := call(localReset, identity.ReadWrite, "q"); got != "2" {
		t.Fatalf("reset: %q, want 2", got)
	}
	if got, _ := call(localReset, identity.ReadWrite, ""); got[0] != '!' {
		t.Fatalf("reset of an empty name: %q, want a refusal", got)
	}
	if _, err := e.Push("t", "q", "", [][]byte{[]byte("3")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := call(localDelete, identity.ReadWrite, "q"); got != "1" {
		t.Fatalf("delete: %q, want 1", got)
	}
	if got, _ := call(localDelete, identity.ReadWrite, "q"); got != "0" {
		t.Fatalf("delete again: %q, want 0", got)
	}
	for raw, want := range map[string]int64{"0": 0, "412": 412} {
		if n, err := parseLocalAnswer([]byte(raw)); err != nil || n != want {
			t.Errorf("parseLocalAnswer(%q) = %d, %v", raw, n, err)
		}
	}
	if _, err := parseLocalAnswer([]byte("!no")); err == nil || err.Error() != "no" {
		t.Errorf("parseLocalAnswer of a refusal: %v", err)
	}
}

// The owner serves relayed requests on its event loop, which must not
// block: a member-local delete waiting for a reconcile (which holds declMu
// across its store reads) must not hold up the other requests multiplexed
// on that link, nor the loop's other connections. It answers once the
// reconcile is done.
func TestServeLocalDeleteDoesNotBlockTheRelay(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	if _, err := e.Push("t", "q", "", [][]byte{[]byte("1")}); err != nil {
		t.Fatal(err)
	}
	s.sy.declMu.Lock() // a reconcile loading declarations
	got := make(chan string, 1)
	returned := make(chan struct{})
	go func() {
		s.serveLocal(&link.Request{Tenant: []byte("t"), Access: uint8(identity.ReadWrite), Method: []byte("POST"), Target: []byte(localDelete), Body: []byte("q")},
			func(r link.Response) { got <- string(r.Raw) })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(2 * time.Second):
		s.sy.declMu.Unlock()
		t.Fatal("serveLocal blocked its event loop while a reconcile held declMu")
	}
	select {
	case r := <-got:
		t.Fatalf("answered %q while the reconcile still held declMu", r)
	default:
	}
	s.sy.declMu.Unlock()
	select {
	case r := <-got:
		if r != "1" {
			t.Fatalf("delete: %q, want 1", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer after the reconcile")
	}
}
