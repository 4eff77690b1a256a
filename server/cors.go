package server

import (
	"strings"
	"sync/atomic"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/wire"
)

// Reads across a cell's members from a browser (docs/server.md, "Browsers
// (D20)", "Member origins"): the dashboard served by one member reads the
// queue listing and the view of every other member, so that its table
// shows the whole cell. A browser lets a page read another origin's answer
// only when the answer names the page's origin in
// Access-Control-Allow-Origin, and sends a preflight OPTIONS first for a
// request with an Authorization header.
//
// The rule is as narrow as that need: only GET of the two status reads
// the page makes of other members (the queue listing and the cell's view),
// only for an Origin exactly equal to the origin of a member's public URL
// in this member's current view, never "*". Those GETs change no state,
// and every state-changing request keeps D20's cross-origin refusal, so a
// member origin gains reading what its user's own token may read, nothing
// more. A preflight carries no credentials: it is answered before
// identity, from the view alone, and changes nothing.

// corsMaxAge is how long, in seconds, a browser may keep a preflight's
// answer: short, so that a member that leaves the view stops being
// trusted soon.
const corsMaxAge = "60"

// corsOrigins is the view's member origins with their header lines,
// computed once per view.
type corsOrigins struct {
	view    *cell.View
	origins []corsOrigin
	csp     string // the dashboard's Content-Security-Policy line for this view
}

// corsOrigin is one member origin and the header lines that grant it.
type corsOrigin struct {
	origin    string
	lines     []byte // Access-Control-Allow-Origin and Vary, for a GET's answer
	preflight []byte // the same plus what a preflight's answer allows
}

// corsCache holds the corsOrigins of the latest view asked about.
type corsCache struct{ p atomic.Pointer[corsOrigins] }

// of returns the member origins of view v (nil outside a cell).
func (c *corsCache) of(v *cell.View) *corsOrigins {
	if v == nil {
		return nil
	}
	if o := c.p.Load(); o != nil && o.view == v {
		return o
	}
	o := &corsOrigins{view: v}
	seen := map[string]bool{}
	for _, m := range v.Members {
		origin, ok := urlOrigin(m.URL)
		if !ok || seen[origin] {
			continue
		}
		seen[origin] = true
		lines := "Access-Control-Allow-Origin: " + origin + "\r\nVary: Origin\r\n"
		o.origins = append(o.origins, corsOrigin{
			origin: origin,
			lines:  []byte(lines),
			preflight: []byte(lines + "Access-Control-Allow-Methods: GET\r\n" +
				"Access-Control-Allow-Headers: Authorization\r\n" +
				"Access-Control-Max-Age: " + corsMaxAge + "\r\n"),
		})
	}
	o.csp = dashboardCSP(o.origins)
	c.p.Store(o)
	return o
}

// match returns the member origin equal to origin, nil when none is.
func (o *corsOrigins) match(origin []byte) *corsOrigin {
	if o == nil {
		return nil
	}
	for i := range o.origins {
		if o.origins[i].origin == string(origin) {
			return &o.origins[i]
		}
	}
	return nil
}

// urlOrigin returns the origin a browser sends for a page at public URL u
// (RFC 6454): the scheme and host lower-cased, the port kept unless it is
// the scheme's default, nothing after. A URL that is not http or https,
// or carries user information, has none.
func urlOrigin(u string) (string, bool) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return "", false
	}
	scheme = strings.ToLower(scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if rest == "" || strings.ContainsAny(rest, "@ \t\r\n") {
		return "", false
	}
	host := strings.ToLower(rest)
	if scheme == "http" {
		host = strings.TrimSuffix(host, ":80")
	} else {
		host = strings.TrimSuffix(host, ":443")
	}
	return scheme + "://" + host, true
}

// corsRead reports whether r is one of the two status reads other
// members' pages may read.
func corsRead(r *ephemeralRoute) bool { return r.id == routeQueues || r.id == routeCellView }

// memberOrigin returns the member origin req's Origin names, nil when it
// names none (or carries none, as every request but a browser's).
func (cs *conn) memberOrigin(req *wire.Request) *corsOrigin {
	if cs.frameLink != nil || cs.s.cfg.Cell == nil {
		return nil
	}
	origin, ok := req.Header("Origin")
	if !ok || len(origin) == 0 {
		return nil
	}
	return cs.s.cors.of(cs.s.cellView()).match(origin)
}

// preflight answers a browser's OPTIONS before a GET of a corsRead route
// from a member origin: 204 with what the GET may carry. It reports false,
// answering nothing, for any other OPTIONS (another origin, another method
// asked for), which the route then refuses (405).
func (cs *conn) preflight(req *wire.Request) bool {
	o := cs.memberOrigin(req)
	if o == nil {
		return false
	}
	if m, ok := req.Header("Access-Control-Request-Method"); !ok || string(m) != "GET" {
		return false
	}
	head := req.Head(204)
	head.Extra = o.preflight
	cs.out = wire.AppendHead(cs.out, head)
	return true
}

// head is req.Head(status) with the header lines that grant the request's
// member origin, if any (set by serveRoute for a corsRead route's GET;
// nil otherwise).
func (cs *conn) head(req *wire.Request, status int) wire.Head {
	h := req.Head(status)
	h.Extra = cs.cors
	return h
}
