package server

import (
	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/store"
)

// Tenant shares in a cell (D17; docs/cell.md, "Tenant allowances across
// members"). A grant's byte allowance and message rate hold cell-wide as an
// approximation: each member enforces its share, the allowance divided by
// the live member count of its current view, re-divided on every membership
// change. The queue allowance is divided by the engine, for implicit queues
// only: every member holds every declaration, so declared queues are
// bounded by the whole allowance, and this member's implicit queues by its
// share of what they leave (grantShare passes the member count with it).
// The broker's own defaults for tenants without a grant and its total
// (QUEEN_EPHEMERAL_MAX_BYTES) are not divided: they are per member.

// share is one member's part of a cell-wide allowance: allowance divided by
// members, rounded down so that the shares never add up to more than the
// allowance, but at least 1 (0 would mean unlimited). 0 (unlimited) stays 0;
// a cell of one (or a member that sees nobody) keeps the whole allowance.
func share(allowance, members int64) int64 {
	if allowance <= 0 || members <= 1 {
		return allowance
	}
	return max(1, allowance/members)
}

// grantShare is what this member enforces of grant g, and the member count
// the engine divides the implicit queues' part of g.MaxQueues (left whole
// here) by.
func (s *Server) grantShare(g store.Grant) (store.Grant, int64) {
	n := s.shareMembers.Load()
	g.MaxBytes = share(g.MaxBytes, n)
	g.MessagesPerSecond = share(g.MessagesPerSecond, n)
	return g, max(1, n)
}

// redivide applies every stored grant again with the live member count of
// v (CellChanged calls it when the count moves). It runs on the membership
// goroutine; grants are few and applying one is a few atomic stores. It
// takes grantsMu, not grantMu: grantMu is held across store calls, and the
// next heartbeat waits for this.
func (s *Server) redivide(v *cell.View) {
	n := int64(max(1, len(v.Members)))
	s.sy.grantsMu.Lock()
	defer s.sy.grantsMu.Unlock()
	if s.shareMembers.Swap(n) == n {
		return
	}
	for tenant, g := range s.sy.grants {
		s.setGrant(tenant, &g)
	}
}
