package rendezvous

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
)

// The function's answers for known ids (../testdata/owners.json): the key
// hash and the owner of each case, whatever order the ids come in.
func TestOwnerVectors(t *testing.T) {
	b, err := os.ReadFile("../testdata/owners.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			Members []struct{ ID string }
			Tenant  string
			Queue   string
			Key     string
			Owner   string
		}
	}
	if err := json.Unmarshal(b, &f); err != nil || len(f.Cases) < 32 {
		t.Fatalf("owners.json: %v, %d cases", err, len(f.Cases))
	}
	for _, c := range f.Cases {
		if got := fmt.Sprintf("%016x", Key(c.Tenant, c.Queue)); got != c.Key {
			t.Errorf("(%q, %q): key %s, want %s", c.Tenant, c.Queue, got, c.Key)
		}
		ids := make([]string, len(c.Members))
		for i, m := range c.Members {
			ids[i] = m.ID
		}
		reversed := slices.Clone(ids)
		slices.Reverse(reversed)
		for _, order := range [][]string{ids, reversed} {
			if got := OwnerOf(order, c.Tenant, c.Queue); got != c.Owner {
				t.Errorf("(%q, %q) among %v: %s, want %s", c.Tenant, c.Queue, order, got, c.Owner)
			}
		}
	}
	if OwnerOf(nil, "t", "q") != "" || Owner(1, nil) != -1 {
		t.Fatal("no member owns anything")
	}
}
