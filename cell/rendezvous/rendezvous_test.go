package rendezvous

import (
	"fmt"
	"slices"
	"testing"

	"github.com/queenmq/ephemeral/cell/rendezvous/rendezvoustest"
)

// The function's answers for known ids (../testdata/owners.json): the key
// hash and the owner of each case, whatever order the ids come in.
func TestOwnerVectors(t *testing.T) {
	for _, c := range rendezvoustest.Vectors(t) {
		if got := fmt.Sprintf("%016x", Key(c.Tenant, c.Queue)); got != c.Key {
			t.Errorf("(%q, %q): key %s, want %s", c.Tenant, c.Queue, got, c.Key)
		}
		ids := c.IDs()
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
