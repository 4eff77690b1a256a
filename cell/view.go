package cell

import (
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous"
)

// Member is one live member of a view.
type Member struct {
	// ID is the member's advertised address (QUEEN_CELL_ADVERTISE), where
	// the others reach it.
	ID string
	// Incarnation is the member process's incarnation (the engine's): a
	// member that restarts on the same address comes back as another one.
	Incarnation string
	// URL is where clients reach the member's public port
	// (QUEEN_CELL_PUBLIC_URL, or derived from HOST and PORT): "" when it
	// published none (it cannot be derived, or the member is of a release
	// before public URLs). Clients route its queues through any member then.
	URL string
}

// View is an immutable snapshot of the cell as one member sees it. A
// Membership publishes a new one, with a higher Generation, whenever the
// live set or the member's fencing changes; readers load the current one
// without locking and may keep it for the duration of a request.
type View struct {
	// Generation increases on every change this member observes: a member
	// joining, leaving or coming back with another incarnation, and this
	// member being fenced or unfenced. It is local to the member (another
	// member's view of the same set may carry another number) and starts
	// at 1 in every Membership.
	Generation uint64
	// Self is this member's id.
	Self string
	// Members is the live set, sorted by ID (bytes). A fenced member leaves
	// itself out, so it is never the owner in its own view.
	Members []Member

	seeds  []uint64 // xxhash of each member's ID: its rendezvous seed
	self   int      // index of Self in Members, -1 when absent
	fenced bool     // fenced when published
	// deadline is when this member's last renewal expires, on clock. It is
	// the one thing that changes in a published view: each renewal extends
	// it while the view is current, and it freezes once a newer view
	// replaces this one, so a superseded view ends up fenced.
	deadline atomic.Int64
	clock    func() time.Duration
	next     chan struct{} // closed when a newer view replaces this one
}

func newView(gen uint64, self string, members []Member, fenced bool, deadline time.Duration, clock func() time.Duration) *View {
	v := &View{
		Generation: gen,
		Self:       self,
		Members:    members,
		seeds:      make([]uint64, len(members)),
		self:       -1,
		fenced:     fenced,
		clock:      clock,
		next:       make(chan struct{}),
	}
	v.deadline.Store(int64(deadline))
	for i, m := range members {
		v.seeds[i] = rendezvous.Seed(m.ID)
		if m.ID == self {
			v.self = i
		}
	}
	return v
}

// Fenced reports whether this member must not answer as an owner: it was
// fenced when the view was published, or its last renewal is older than
// the member timeout now. The second half is judged by the reader against
// the clock, so a member paused past the timeout (SIGSTOP, a long GC, a
// blocked database) is fenced the moment it runs again, before its
// membership loop has had a chance to publish anything.
func (v *View) Fenced() bool {
	return v == nil || v.fenced || v.clock() >= time.Duration(v.deadline.Load())
}

// Owner returns the owner of (tenant, queue) in v; ok is false when v has
// no live member. It does not consult fencing: see Owns.
func (v *View) Owner(tenant, queue string) (m Member, ok bool) {
	i := Owner(v, tenant, queue)
	if i < 0 {
		return Member{}, false
	}
	return v.Members[i], true
}

// Owns reports whether this member owns (tenant, queue) and may serve it
// now: it is the rendezvous owner and it is not fenced.
func (v *View) Owns(tenant, queue string) bool {
	if v == nil || v.self < 0 {
		return false
	}
	return Owner(v, tenant, queue) == v.self && !v.Fenced()
}

// IsSelf reports whether m is this member.
func (v *View) IsSelf(m Member) bool { return m.ID == v.Self }

// Superseded is closed when a newer view replaces v: a waiter that holds v
// learns of the change without polling.
func (v *View) Superseded() <-chan struct{} { return v.next }

// sameSet reports whether v has exactly these members and fencing.
func (v *View) sameSet(members []Member, fenced bool) bool {
	if v.fenced != fenced || len(v.Members) != len(members) {
		return false
	}
	for i := range members {
		if v.Members[i] != members[i] {
			return false
		}
	}
	return true
}
