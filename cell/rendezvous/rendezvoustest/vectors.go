// Package rendezvoustest reads the ownership vectors every implementation
// of the rendezvous function is held to (cell/testdata/owners.json,
// docs/cell.md "Ownership"): the members, the server, the gateway and the
// Go SDK read them through Vectors, the JavaScript SDK through its own
// test, so none can disagree about an owner silently.
package rendezvoustest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Member is a member of a vector's live set.
type Member struct {
	ID          string `json:"id"`
	Incarnation string `json:"incarnation"`
}

// Vector is one case: the live set (in the file's order, not always
// sorted), the tenant and queue, the key hash in hex and the owner's id.
type Vector struct {
	Members       []Member `json:"members"`
	Tenant, Queue string
	Key, Owner    string
}

// IDs are the members' ids in the vector's order.
func (v Vector) IDs() []string {
	ids := make([]string, len(v.Members))
	for i, m := range v.Members {
		ids[i] = m.ID
	}
	return ids
}

// minVectors: fewer cases than this means the file was cut.
const minVectors = 32

// Vectors reads every case of cell/testdata/owners.json, found beside this
// package's source so that any package's test may call it.
func Vectors(t testing.TB) []Vector {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("rendezvoustest: cannot locate cell/testdata/owners.json")
	}
	path := filepath.Join(filepath.Dir(here), "..", "..", "testdata", "owners.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Cases []Vector }
	if err := json.Unmarshal(b, &f); err != nil || len(f.Cases) < minVectors {
		t.Fatalf("%s: %v, %d cases (want at least %d)", path, err, len(f.Cases), minVectors)
	}
	return f.Cases
}
