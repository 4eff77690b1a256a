package cell

import (
	"math"
	"slices"
	"strings"
	"time"
)

// StaticView returns a view that no Membership publishes: these members
// (sorted by ID here), self, and fencing fixed as given; it is never
// superseded and never turns fenced by the clock. It is for code that
// reads views without running a cell (the server's status routes are
// tested with it) and for tools; a broker uses Membership.View.
func StaticView(generation uint64, self string, members []Member, fenced bool) *View {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return newView(generation, self, ms, fenced, math.MaxInt64, monotonic)
}

// StaticViewUntil is StaticView with a renewal deadline judged by the
// clock, as a Membership's view is: not fenced before renewedUntil, fenced
// from then on, with self still among the members. That is the view a
// member holds when it runs again after a pause past its member timeout,
// before its membership loop has published the fenced view (which leaves
// self out): self may be the rendezvous owner (Owner names it) while
// Fenced is true and Owns is false. Code that consults Owner and Fenced
// apart (the server's ownership check) is tested with it.
func StaticViewUntil(generation uint64, self string, members []Member, renewedUntil time.Time) *View {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return newView(generation, self, ms, false, monotonic()+time.Until(renewedUntil), monotonic)
}
