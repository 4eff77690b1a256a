package cell

import (
	"fmt"
	"slices"
	"testing"

	"github.com/queenmq/ephemeral/cell/rendezvous/rendezvoustest"
)

// membersOf is a vector's live set as the cell's members.
func membersOf(ms []rendezvoustest.Member) []Member {
	out := make([]Member, len(ms))
	for i, m := range ms {
		out[i] = Member{ID: m.ID, Incarnation: m.Incarnation}
	}
	return out
}

// Ownership is the documented function, not merely one every member
// computes alike: testdata/owners.json holds key hashes and owners computed
// once and written down, for live sets of 1, 2, 3 and 5 members (the last
// listed out of order) and for names that join alike ("ab","c" and
// "a","bc"). A change that moves any owner (a rolling upgrade would then
// split ownership between builds) fails here; so does choosing the lowest
// score instead of the highest. The same file is checked by the server
// (server.TestServerOwnershipIsTheDocumentedFunction), by package
// rendezvous (the function itself, which the Go SDK imports) and by the
// JavaScript SDK's own implementation (clients/js/test/owner.test.js).
func TestOwnerVectors(t *testing.T) {
	for _, c := range rendezvoustest.Vectors(t) {
		members := membersOf(c.Members)
		name := fmt.Sprintf("%d members, (%q, %q)", len(c.Members), c.Tenant, c.Queue)
		if got := fmt.Sprintf("%016x", keyHash(c.Tenant, c.Queue)); got != c.Key {
			t.Errorf("%s: key %s, want %s", name, got, c.Key)
		}
		ids := make([]string, len(c.Members))
		bare := make([]Member, len(c.Members)) // no incarnations: they play no part
		for i, m := range c.Members {
			ids[i], bare[i] = m.ID, Member{ID: m.ID}
		}
		if got := OwnerOf(ids, c.Tenant, c.Queue); got != c.Owner {
			t.Errorf("%s: OwnerOf says %s, want %s", name, got, c.Owner)
		}
		reversed := slices.Clone(members)
		slices.Reverse(reversed)
		for _, ms := range [][]Member{members, reversed, bare} {
			for _, self := range ids {
				v := StaticView(1, self, ms, false)
				m, ok := v.Owner(c.Tenant, c.Queue)
				if !ok || m.ID != c.Owner {
					t.Errorf("%s: %s's view says %s, want %s", name, self, m.ID, c.Owner)
				}
				if v.Owns(c.Tenant, c.Queue) != (self == c.Owner) {
					t.Errorf("%s: %s's view Owns %v", name, self, v.Owns(c.Tenant, c.Queue))
				}
			}
		}
	}
}
