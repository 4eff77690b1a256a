package cell

import (
	"math"
	"slices"
	"strings"
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
