package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/wire"
)

// The cell's status reads (D17): /health adds `cell: {members, self,
// fenced}` when the broker is in a cell, and GET /api/v1/system/cell (the
// broker's operator, as /metrics) lists the members. docs/cell.md, "Status
// routes".

const cellPath = "/api/v1/system/cell"

// CellStatus is what the status reads need of the cell: the current view
// (live set, self, fencing, and so owners) and the member rows with their
// timestamps. *cell.Membership satisfies it; tests use a fake over
// cell.StaticView.
type CellStatus interface {
	// View never blocks and never returns nil.
	View() *cell.View
	// Rows queries the database: it is called off the event loops.
	Rows(ctx context.Context) ([]cell.Row, error)
}

// appendCellHealth appends /health's `,"cell":{...}` in a cell; nothing
// otherwise (a cell of one answers /health without it). members is the
// live set in this member's view: a fenced member leaves itself out.
func (s *Server) appendCellHealth(b []byte) []byte {
	if s.cfg.Cell == nil {
		return b
	}
	v := s.cfg.Cell.View()
	b = append(b, `,"cell":{"members":`...)
	b = wire.AppendInt(b, int64(len(v.Members)))
	b = append(b, `,"self":`...)
	b = wire.AppendString(b, v.Self)
	if v.Fenced() {
		b = append(b, `,"fenced":true}`...)
	} else {
		b = append(b, `,"fenced":false}`...)
	}
	return b
}

// cellMember is one entry of GET /api/v1/system/cell.
type cellMember struct {
	Member      string     `json:"member"`
	Incarnation string     `json:"incarnation"`
	PublicURL   string     `json:"publicUrl"`   // where clients reach it (QUEEN_CELL_PUBLIC_URL); "" when it published none
	JoinedAt    *time.Time `json:"joinedAt"`    // null: no row (it was removed since the view was read)
	HeartbeatAt *time.Time `json:"heartbeatAt"` // its last renewal, the database's clock
	Live        bool       `json:"live"`        // its row is younger than its writer's timeout
	InView      bool       `json:"inView"`      // in this member's live set, so an owner here
	Self        bool       `json:"self"`
	// DeclaredQueues: the declared queues it owns in this member's view.
	// Every member holds every declaration, so members with the same view
	// give the same numbers.
	DeclaredQueues int `json:"declaredQueues"`
	// ImplicitQueues: on this member's own entry only, the implicit queues
	// it holds and owns; null on the others, whose implicit queues live
	// there alone.
	ImplicitQueues *int `json:"implicitQueues"`
}

type cellListing struct {
	Enabled    bool         `json:"enabled"`
	Self       string       `json:"self,omitempty"`
	Generation uint64       `json:"generation,omitempty"`
	Fenced     bool         `json:"fenced"`
	Members    []cellMember `json:"members"`
}

// cellStatus serves GET /api/v1/system/cell. Outside a cell it answers
// {"enabled":false,...,"members":[]}; in one, it reads the rows off the
// loop (P1) and counts ownership there.
func (cs *conn) cellStatus(req *wire.Request) {
	cs.reqRoute = routeSystem
	if !cs.method(req, wire.MethodGet) || !cs.adminAccess(req, needOperator, nil) {
		return
	}
	c := cs.s.cfg.Cell
	if c == nil {
		cs.answer(req, 200, []byte(`{"enabled":false,"fenced":false,"members":[]}`))
		return
	}
	head := req.Head(200)
	cs.goBusy()
	go func() {
		s := cs.s
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
		rows, err := c.Rows(ctx)
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("the cell's members could not be read", "err", err)
			cs.answerAsync(s.errorAnswer(head, 503, codeUnavailable, "the cell's members could not be read from the database"))
			return
		}
		body, _ := json.Marshal(s.cellListing(c.View(), rows)) // plain types: cannot fail
		cs.answerAsync(wire.AppendResponse(nil, head, body))
	}()
}

// cellListing joins the rows with the view and counts what each member
// owns.
func (s *Server) cellListing(v *cell.View, rows []cell.Row) cellListing {
	l := cellListing{Enabled: true, Self: v.Self, Generation: v.Generation, Fenced: v.Fenced()}
	declared := make([]int, len(v.Members)) // by index in v.Members
	implicit := 0
	s.e.EachQueueName(func(tenant, queue string) bool {
		i := cell.Owner(v, tenant, queue)
		if i < 0 {
			return false // no live member in the view: nothing is owned
		}
		if _, ok := s.e.Declared(tenant, queue); ok {
			declared[i]++
		} else if v.IsSelf(v.Members[i]) {
			implicit++
		}
		return true
	})
	index := make(map[string]int, len(v.Members))
	for i, m := range v.Members {
		index[m.ID] = i
	}
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		joined, beat := r.JoinedAt.UTC(), r.HeartbeatAt.UTC()
		m := cellMember{Member: r.ID, Incarnation: r.Incarnation, PublicURL: r.PublicURL, JoinedAt: &joined, HeartbeatAt: &beat, Live: r.Live, Self: r.ID == v.Self}
		if i, ok := index[r.ID]; ok && v.Members[i].Incarnation == r.Incarnation {
			m.InView, m.DeclaredQueues = true, declared[i]
			seen[r.ID] = true
		}
		if m.Self && m.InView {
			m.ImplicitQueues = &implicit
		}
		l.Members = append(l.Members, m)
	}
	for i, m := range v.Members { // in the view, but its row is gone or another incarnation's
		if !seen[m.ID] {
			e := cellMember{Member: m.ID, Incarnation: m.Incarnation, PublicURL: m.URL, InView: true, Self: m.ID == v.Self, DeclaredQueues: declared[i]}
			if e.Self {
				e.ImplicitQueues = &implicit
			}
			l.Members = append(l.Members, e)
		}
	}
	if l.Members == nil {
		l.Members = []cellMember{}
	}
	return l
}
