package server

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/wire"
)

// The server as a member of a cell (D17; docs/cell.md, "Relaying in the
// server"): AttachCell, SetMembership and AdoptRelayConn, which
// cmd/queen's composition root calls, the relay's counts, and the
// membership's hooks, CellChanging and CellChanged. A push, pop or ack
// (the routes whose cellRole is servedByOwner) that lands on a member that
// does not own its (tenant, queue) is relayed to the owner once identity,
// kill switch, grant and shape have been checked here (relay.go); the
// owner serves it on a stand-in conn (relayowner.go, standin.go) and its
// answer is written back byte for byte (connfields.go). The relay's
// connections are served on the event loops (relaylink.go).

// The cell's two refusals (server/codes.go; docs/cell.md says when each is answered).
var (
	errOwnerMoved    = &wire.Error{Status: 503, Code: codeOwnerMoved, Msg: "ownership of the queue moved while the request was in flight; it was not served"}
	errForwardFailed = &wire.Error{Status: 503, Code: codeForwardFailed, Msg: "the broker that owns the queue could not be reached"}
)

// cellState is the server's part of the cell: nil in a cell of one.
type cellState struct {
	m  viewer        // the membership (a test may stand in its own)
	rc *relay.Client // the fan-out of reset and delete (fanout.go); requests are relayed on the loops (relaylink.go)
	RelayOptions

	// Metrics (cell members only): requests this member relayed, relayed
	// requests it served as the owner, relays whose client connection it
	// closed unanswered because the owner may have acted, and the relay's
	// dials. The two refusals are counted with every refusal, by code.
	relayed, served, lost, dials *metrics.Counter
	refused, shed                *metrics.Counter // the relay port's, counted by cmd/queen's relay.Server
	linkCount                    atomic.Int64     // relay links open or being dialled, both ways
}

// RelayOptions configure the relay on the event loops (relaylink.go).
type RelayOptions struct {
	Secret       []byte        // the cell secret: links are dialled with its handshake
	DialTimeout  time.Duration // dial and handshake together (default 2 s)
	PingInterval time.Duration // every dialled link is pinged this often (default 1 s)
	PingTimeout  time.Duration // a link, dialled or accepted, silent for this long fails, and its calls with it (default 5 s)
	// FrameTimeout: a link whose frame, once begun, is not whole within
	// this long fails (default: the server's BodyTimeout), so that a peer
	// cannot hold the bytes of frames it never completes.
	FrameTimeout time.Duration
	// CallDeadline bounds a relayed push or ack (default 30 s), PopMargin
	// a relayed pop beyond its wait (default 5 s): an owner that never
	// answers still ends the call, and the client's connection is closed
	// (the owner may have acted).
	CallDeadline, PopMargin time.Duration
	// FanOutDeadline bounds the wait for the other members' answers to a
	// reset or delete (fanout.go; default 5 s): set it to the member
	// timeout, within which a silent member leaves the cell anyway.
	FanOutDeadline time.Duration
	// Delay is a test hook (zero in production): the owner waits this long
	// before serving each relayed request, so a test can move ownership
	// while one is in flight (owner_moved).
	Delay time.Duration
}

// viewer is what the relay needs of the membership: its current view.
type viewer interface{ View() *cell.View }

// AttachCell makes the server a member of a cell: requests for queues it
// does not own in the membership's current view are relayed to their
// owner on the event loops; rc carries the fan-out of reset and delete.
// It is called before the membership starts (whose OnChange is
// CellChanged), SetMembership after, both before Start; connections from
// other members are handed to AdoptRelayConn once Start has returned.
// The order is enforced: either call after Start panics, and Start
// refuses a server attached to a cell without its membership.
func (s *Server) AttachCell(rc *relay.Client, opts RelayOptions) {
	if s.started.Load() || s.cell != nil {
		panic("server: AttachCell must be called once, before Start")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = time.Second
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = 5 * time.Second
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = s.cfg.BodyTimeout
	}
	if opts.CallDeadline <= 0 {
		opts.CallDeadline = 30 * time.Second
	}
	if opts.PopMargin <= 0 {
		opts.PopMargin = 5 * time.Second
	}
	if opts.FanOutDeadline <= 0 {
		opts.FanOutDeadline = 5 * time.Second
	}
	s.cell = &cellState{rc: rc, RelayOptions: opts}
	set := s.m.set
	s.cell.relayed = set.NewCounter("queen_ephemeral_relayed_total")
	s.cell.served = set.NewCounter("queen_ephemeral_relay_served_total")
	s.cell.lost = set.NewCounter("queen_ephemeral_relay_closed_unanswered_total")
	s.cell.dials = set.NewCounter("queen_ephemeral_relay_dials_total")
	s.cell.refused = set.NewCounter("queen_ephemeral_relay_handshakes_refused_total")
	s.cell.shed = set.NewCounter("queen_ephemeral_relay_shed_total")
	set.NewGauge("queen_ephemeral_relay_links", func() float64 { return float64(s.cell.linkCount.Load()) })
}

// SetMembership gives the server the cell's membership (see AttachCell),
// which also answers the status reads (/health's cell, GET
// /api/v1/system/cell) unless Config.Cell named another source. Like
// AttachCell it is called before Start.
func (s *Server) SetMembership(m *cell.Membership) {
	if s.started.Load() || s.cell == nil || s.cell.m != nil {
		panic("server: SetMembership must be called once, after AttachCell and before Start")
	}
	s.cell.m = m
	if s.cfg.Cell == nil {
		s.cfg.Cell = m
	}
}

// AdoptRelayConn serves a connection another member dialled to this
// member's relay port, once it passed the relay's handshake
// (relay.ServerConfig.Adopt): it is enrolled on an event loop and served
// there. Call it only after Start.
func (s *Server) AdoptRelayConn(nc net.Conn) {
	if s.cli == nil || s.stopping.Load() {
		nc.Close()
		return
	}
	_, _ = s.cli.EnrollContext(nc, &linkConn{s: s, role: linkAccepted}) // closes nc: the loop holds a duplicate
}

// CountRelayRefused and CountRelayShed count a connection to the relay
// port refused at its handshake, or closed before it (relay.ServerConfig's
// OnRefused and OnShed). Call them only after AttachCell.
func (s *Server) CountRelayRefused() { s.cell.refused.Inc() }

// CountRelayShed: see CountRelayRefused.
func (s *Server) CountRelayShed() { s.cell.shed.Inc() }

// RelayCounts reports the relayed requests answered 503
// ephemeral_forward_failed and those whose client connection was closed
// unanswered because the owner may have acted.
func (s *Server) RelayCounts() (forwardFailed, lost int64) {
	return s.relayFailed.Load(), s.relayLost.Load()
}

// CellChanging is the membership's BeforeChange: the queues this member is
// about to own in next and did not own in prev are emptied before any
// request can see next (D17: the new owner starts a queue empty). They
// hold something only when a request checked under an older view acted
// after that view's drop (the check and the act are not one step), or
// when this member comes back from fencing (prev owns nothing, so all it
// will own is emptied: a request checked just before the fence may have
// added contents after the fenced view's drop). Emptied here, such
// leftovers can never come back to life when ownership returns, and their
// ids answer stale (docs/cell.md, "Membership changes").
func (s *Server) CellChanging(prev, next *cell.View) {
	s.e.DropMoved(func(tenant, queue string) bool {
		return !next.Owns(tenant, queue) || prev.Owns(tenant, queue)
	})
}

// CellChanged is the membership's OnChange: the queues this member no
// longer owns in next are dropped (D17: a move empties what moved), shares
// of tenant allowances are divided anew, and the relay forgets members
// that left. Both walks run on the membership goroutine; they allocate
// nothing and cost about 0.2 µs a queue (docs/engine.md), which the next
// heartbeat waits for.
func (s *Server) CellChanged(prev, next *cell.View) {
	s.e.DropMoved(next.Owns)
	s.redivide(next)
	if s.views.n.Load() > 0 {
		go s.views.wake(s, false) // the view reads parked on an older generation
	}
	if prev == nil || s.cell == nil {
		return
	}
	for _, old := range prev.Members {
		if old.ID == next.Self {
			continue
		}
		if !hasMember(next.Members, old.ID) {
			s.cell.rc.Forget(old.ID)
			s.forgetLinks(old.ID)
		}
	}
}

func hasMember(ms []cell.Member, id string) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}
