package server

import (
	"testing"

	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
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
	call := func(target string, access Access, queue string) (string, bool) {
		var got string
		ok := s.serveLocal(&relay.Request{Tenant: []byte("t"), Access: uint8(access), Method: []byte("POST"), Target: []byte(target), Body: []byte(queue)},
			func(r relay.Response) { got = string(r.Raw) })
		return got, ok
	}
	if _, ok := call("/api/v1/ephemeral/push", accReadWrite, "q"); ok {
		t.Fatal("a public route was taken for a member-local request")
	}
	if got, _ := call(localReset, accRead, "q"); got[0] != '!' {
		t.Fatalf("reset at read level: %q, want a refusal", got)
	}
	if got, _ := call(localReset, accReadWrite, "q"); got != "2" {
		t.Fatalf("reset: %q, want 2", got)
	}
	if got, _ := call(localReset, accReadWrite, ""); got[0] != '!' {
		t.Fatalf("reset of an empty name: %q, want a refusal", got)
	}
	if _, err := e.Push("t", "q", "", [][]byte{[]byte("3")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := call(localDelete, accReadWrite, "q"); got != "1" {
		t.Fatalf("delete: %q, want 1", got)
	}
	if got, _ := call(localDelete, accReadWrite, "q"); got != "0" {
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
