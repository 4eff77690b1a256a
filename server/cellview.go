package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/wire"
)

// The cell's view for clients (D19; docs/routes.md, "cell"; docs/cell.md,
// "Public URLs"): GET /api/v1/ephemeral/cell, a read of the family, answers
// the members this member computes ownership over now, each with the URL
// clients reach it at, the view's generation, and the caller's tenant (so
// that a client computes rendezvous.Key(tenant, queue) without knowing how
// its identity maps to a tenant):
//
//	{"generation":7,"tenant":"acme","self":"10.0.0.2:7000",
//	 "members":[{"id":"10.0.0.1:7000","url":"http://10.0.0.1:6632"},...]}
//
// A broker outside a cell answers generation 0 and no members ("use the
// URL you have"). It is a status read: served by the member it lands on,
// never relayed.
//
// With ?after=G it is a long poll: it parks until this member's view has
// another generation than G, or for timeout milliseconds (the pop's
// parameter, bounds and default), then answers the view current then. This
// is how a client on a link learns of every change without a frame type of
// its own. A parked view read holds no goroutine: it is listed in
// Server.views, woken by the membership's publication (CellChanged) or by
// its timer, and let go when its connection closes or its stream is
// cancelled. On an HTTP connection it holds the connection (as a parked
// pop does); on a link it holds only its stream, and at most
// maxLinkViewReads of a link's view reads park at once (more are answered
// at once, as with timeout 0: an SDK needs one).

// maxLinkViewReads bounds the parked view reads of one link.
const maxLinkViewReads = 4

// viewWaiters are the parked view reads.
type viewWaiters struct {
	n       atomic.Int64 // len(parked), read without the lock
	mu      sync.Mutex
	parked  map[*conn]*viewWait
	perLink map[*linkConn]int
	stopped bool // Shutdown answered them all: none parks any more
}

// viewWait is one parked view read.
type viewWait struct {
	after  uint64
	tenant string
	head   wire.Head
	timer  *time.Timer
	link   *linkConn // the link of a stand-in; nil on an HTTP connection
}

// viewGeneration is v's generation, 0 outside a cell.
func viewGeneration(v *cell.View) uint64 {
	if v == nil {
		return 0
	}
	return v.Generation
}

// cellView returns this member's current view, nil outside a cell.
func (s *Server) cellView() *cell.View {
	if s.cfg.Cell == nil {
		return nil
	}
	return s.cfg.Cell.View()
}

// cellViewRead serves GET /api/v1/ephemeral/cell; method and identity are
// checked (serveRoute).
func (cs *conn) cellViewRead(req *wire.Request) {
	s := cs.s
	p, err := wire.ParseCellView(req.Query(), int(s.cfg.PopTimeout/time.Millisecond))
	if err != nil {
		cs.refuse(req, err)
		return
	}
	if p.HasAfter && p.TimeoutMs > 0 && s.views.park(cs, p, cs.head(req, 200)) {
		return
	}
	cs.out = wire.AppendResponse(cs.out, cs.head(req, 200), appendCellView(nil, s.cellView(), cs.tenant))
}

// park lists a view read that waits for another generation than p.After;
// false when it is to be answered at once instead: the view differs
// already, the server is stopping, or the link has its share parked. The
// generation is compared under the lock the waking takes, after the view
// it wakes for was published, so no change falls between the two.
func (w *viewWaiters) park(cs *conn, p wire.CellViewParams, head wire.Head) bool {
	var l *linkConn
	if cs.frameLink != nil {
		l = cs.frameLink
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || viewGeneration(cs.s.cellView()) != p.After || l != nil && w.perLink[l] >= maxLinkViewReads {
		return false
	}
	if w.parked == nil {
		w.parked, w.perLink = map[*conn]*viewWait{}, map[*linkConn]int{}
	}
	vw := &viewWait{after: p.After, tenant: cs.tenant, head: head, link: l}
	w.parked[cs] = vw
	w.n.Add(1)
	if l != nil {
		w.perLink[l]++
	}
	cs.goBusy()
	vw.timer = time.AfterFunc(time.Duration(p.TimeoutMs)*time.Millisecond, func() {
		if w.take(cs) != nil {
			cs.answerView(vw)
		}
	})
	return true
}

// take removes cs's parked view read and returns it; nil when it is not
// parked (answered or let go already): whoever takes it answers it.
func (w *viewWaiters) take(cs *conn) *viewWait {
	if w.n.Load() == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	vw := w.parked[cs]
	if vw == nil {
		return nil
	}
	w.drop(cs, vw)
	return vw
}

// drop unlists vw (cs's), under the lock.
func (w *viewWaiters) drop(cs *conn, vw *viewWait) {
	delete(w.parked, cs)
	w.n.Add(-1)
	if vw.link != nil {
		if w.perLink[vw.link]--; w.perLink[vw.link] == 0 {
			delete(w.perLink, vw.link)
		}
	}
	vw.timer.Stop()
}

// wake answers the parked view reads whose generation the current view
// no longer has (all of them, when all is set: the server stops). Called
// after the membership published a view (CellChanged, on a goroutine of
// its own) and by Shutdown.
func (w *viewWaiters) wake(s *Server, all bool) {
	gen := viewGeneration(s.cellView())
	var due []*conn
	var waits []*viewWait
	w.mu.Lock()
	if all {
		w.stopped = true
	}
	for cs, vw := range w.parked {
		if all || vw.after != gen {
			w.drop(cs, vw)
			due, waits = append(due, cs), append(waits, vw)
		}
	}
	w.mu.Unlock()
	for i, cs := range due {
		cs.answerView(waits[i])
	}
}

// answerView answers a parked view read with the view current now, from
// any goroutine, as any answer made off the loop: on an HTTP connection
// through its AsyncWrite, on a link's stand-in on its stream, where the
// stand-in is taken back (answerLater; not counted among the link's
// requests served off the loop, which a parked view read is not).
func (cs *conn) answerView(vw *viewWait) {
	cs.answerAsync(wire.AppendResponse(nil, vw.head, appendCellView(nil, cs.s.cellView(), vw.tenant)))
}

// letGoView lets a parked view read go (its connection closed, its stream
// was cancelled or its link ended), on the loop. It reports whether cs had
// one: then nothing will answer it.
func (cs *conn) letGoView() bool {
	return cs.s.views.take(cs) != nil
}

// appendCellView appends the view's answer body for tenant.
func appendCellView(b []byte, v *cell.View, tenant string) []byte {
	b = append(b, `{"generation":`...)
	b = wire.AppendUint(b, viewGeneration(v))
	b = append(b, `,"tenant":`...)
	b = wire.AppendString(b, tenant)
	if v == nil {
		return append(b, `,"members":[]}`...)
	}
	b = append(b, `,"self":`...)
	b = wire.AppendString(b, v.Self)
	b = append(b, `,"members":[`...)
	for i, m := range v.Members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = wire.AppendString(b, m.ID)
		if m.URL != "" {
			b = append(b, `,"url":`...)
			b = wire.AppendString(b, m.URL)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
