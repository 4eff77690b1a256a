package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/rendezvous/rendezvoustest"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// membersOf is a vector's live set as the cell's members
// (cell/testdata/owners.json; cell.TestOwnerVectors says what they are).
func membersOf(ms []rendezvoustest.Member) []cell.Member {
	out := make([]cell.Member, len(ms))
	for i, m := range ms {
		out[i] = cell.Member{ID: m.ID, Incarnation: m.Incarnation}
	}
	return out
}

// The server decides ownership by the documented function, as the fixed
// vectors give it, in both places it computes an owner: the request path
// (conn.elsewhere) serves a push itself exactly when the vector names this
// member, and relays it otherwise (to addresses that cannot be reached
// here: 503 ephemeral_forward_failed, nothing kept); and the cell listing
// (GET /api/v1/system/cell) counts a declared queue for the vector's owner
// alone. Only the default tenant's cases go through the request path (the
// server is run without identity).
func TestServerOwnershipIsTheDocumentedFunction(t *testing.T) {
	cases := rendezvoustest.Vectors(t)
	mv := &movingView{}
	mv.v.Store(cell.StaticView(1, selfAddr, []cell.Member{{ID: selfAddr}}, false))
	ts := startLanding(t, mv, RelayOptions{DialTimeout: 50 * time.Millisecond})
	served := 0
	for _, c := range cases {
		name := fmt.Sprintf("%d members, (%q, %q)", len(c.Members), c.Tenant, c.Queue)
		members := membersOf(c.Members)

		if err := ts.e.Configure(c.Tenant, c.Queue, engine.OptionSet{}); err != nil {
			t.Fatalf("%s: configure: %v", name, err)
		}
		l := ts.s.cellListing(cell.StaticView(1, members[0].ID, members, false), nil)
		for _, m := range l.Members {
			want := 0
			if m.Member == c.Owner {
				want = 1
			}
			if m.DeclaredQueues != want {
				t.Errorf("%s: the listing counts %d declared queues for %s; want %d (the owner is %s)", name, m.DeclaredQueues, m.Member, want, c.Owner)
			}
		}
		if _, err := ts.e.Delete(c.Tenant, c.Queue); err != nil {
			t.Fatal(err)
		}

		if c.Tenant != identity.DefaultTenant || len(c.Members) < 2 {
			continue
		}
		push := `{"queue":"` + c.Queue + `","messages":[{"payload":1}]}`
		for _, self := range members {
			mv.v.Store(cell.StaticView(1, self.ID, members, false))
			if self.ID == c.Owner {
				ts.want(t, "POST", "/api/v1/ephemeral/push", push, 201, `"pushed":1`)
				if n := pending(t, ts.e, c.Queue); n != 1 {
					t.Fatalf("%s: %d pending on the owner", name, n)
				}
				served++
				if _, err := ts.e.Delete(c.Tenant, c.Queue); err != nil {
					t.Fatal(err)
				}
				continue
			}
			ts.wantRefusal(t, "POST", "/api/v1/ephemeral/push", push, 503, codeForwardFailed)
			if n, _ := ts.e.Delete(c.Tenant, c.Queue); n {
				t.Fatalf("%s: %s, not the owner, kept the push", name, self.ID)
			}
		}
	}
	if served < 3 {
		t.Fatalf("the request path served %d cases; want every default-tenant case of 2 members or more", served)
	}
}
