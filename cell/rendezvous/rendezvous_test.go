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

// A tie (equal seeds score equally for every key) goes to the first of
// them, as Owner documents, so that every caller given the same slice
// names the same member.
func TestOwnerTieGoesToTheFirst(t *testing.T) {
	seed := Seed("member-a")
	for key := range uint64(64) {
		if got := Owner(key, []uint64{seed, seed}); got != 0 {
			t.Fatalf("key %d: the tie went to %d, want 0", key, got)
		}
		if got := Owner(key, []uint64{seed, seed, seed}); got != 0 {
			t.Fatalf("key %d: the tie of three went to %d, want 0", key, got)
		}
	}
}
