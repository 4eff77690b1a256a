package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/queenmq/ephemeral/wire"
)

// The dashboard (docs/dashboard.md): GET /dashboard answers a static page
// whose script polls the status routes, /metrics and the system routes
// with the credential the user types. The page and its assets are embedded
// in the binary, so serving them needs no files beside it and no build
// step.
//
// Access: none. The page holds no data (every number on it comes from a
// route that checks its own identity), so it loads in every mode, from any
// client, and while the broker is paused (it has to show the pause).

const (
	dashboardPath   = "/dashboard"
	dashboardPrefix = dashboardPath + "/"
)

//go:embed dashboard
var dashboardFS embed.FS

// dashboardAsset is one embedded file, ready to answer: its bytes, type
// and validator, computed once at start.
type dashboardAsset struct {
	body  []byte
	ctype string
	// extra holds the header lines every answer of the asset carries. The
	// assets have fixed names and change with the binary, so a browser
	// must revalidate them on every load (no-cache): the ETag makes that a
	// 304 without a body, and a page from an older broker never runs
	// against a newer one.
	extra []byte
	etag  []byte
	// cellExtra is extra without the Content-Security-Policy and
	// Referrer-Policy lines, for a cell member's answer, whose policy
	// names the view's member origins (extraFor).
	cellExtra string
}

// dashboardHeaders go on every asset. The token the user types sits in
// sessionStorage, so the page allows scripts, styles and connections to
// its own origin only and no framing: a queue name is shown as text,
// never as markup, and nothing injected could load or send elsewhere. On
// a cell member the page connects to the other members too, to read the
// cell's listing (dashboardCSP).
const dashboardHeaders = "X-Content-Type-Options: nosniff\r\n" + dashboardCSPStart + dashboardCSPEnd +
	"Referrer-Policy: no-referrer\r\n"

const (
	dashboardCSPStart = "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; " +
		"img-src 'self' data:; connect-src 'self'"
	dashboardCSPEnd = "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
)

// dashboardCSP is the page's Content-Security-Policy line when the view's
// members are at origins: connect-src lists them after 'self', and only
// them (their answers carry the page's origin, cors.go).
func dashboardCSP(origins []corsOrigin) string {
	var b strings.Builder
	b.WriteString(dashboardCSPStart)
	for _, o := range origins {
		b.WriteString(" ")
		b.WriteString(o.origin)
	}
	b.WriteString(dashboardCSPEnd)
	return b.String()
}

// dashboardAssets maps a request path (/dashboard/app.js) to its asset;
// /dashboard and /dashboard/ map to index.html.
var dashboardAssets = loadDashboard()

func loadDashboard() map[string]*dashboardAsset {
	m := make(map[string]*dashboardAsset)
	err := fs.WalkDir(dashboardFS, "dashboard", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := dashboardFS.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		etag := []byte(`"` + hex.EncodeToString(sum[:8]) + `"`)
		a := &dashboardAsset{body: body, ctype: dashboardType(name), etag: etag}
		a.extra = []byte("Cache-Control: no-cache\r\nETag: " + string(etag) + "\r\n" + dashboardHeaders)
		a.cellExtra = "Cache-Control: no-cache\r\nETag: " + string(etag) + "\r\nX-Content-Type-Options: nosniff\r\n"
		m["/"+name] = a
		if name == "dashboard/index.html" {
			m[dashboardPath] = a
			m[dashboardPrefix] = a
		}
		return nil
	})
	if err != nil {
		panic("server: the embedded dashboard: " + err.Error()) // a broken build, not a runtime state
	}
	return m
}

// dashboardType is the Content-Type of an embedded file, by its extension.
// The table is ours rather than package mime's, which reads the host's
// /etc/mime.types: a host that maps .js to text/plain would stop the
// script (the answers carry nosniff). A file of another kind is
// octet-stream, which TestDashboardEmbedsWhatThePageLinks refuses.
func dashboardType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	}
	return "application/octet-stream"
}

// isDashboard reports whether path is /dashboard or under /dashboard/
// (not /dashboardx).
func isDashboard(path []byte) bool {
	return bytes.HasPrefix(path, []byte(dashboardPath)) &&
		(len(path) == len(dashboardPath) || path[len(dashboardPath)] == '/')
}

// serveDashboard answers GET and HEAD of the page and its assets; another
// method is 405 (Allow: GET, HEAD) and an unknown asset 404, in the
// family's error shape, as for any other path.
func (cs *conn) serveDashboard(req *wire.Request) {
	a := dashboardAssets[string(req.Path)]
	if a == nil {
		cs.refuse(req, errNoRoute)
		return
	}
	if req.Method != wire.MethodGet && req.Method != wire.MethodHead {
		head := req.Head(0)
		head.Extra = []byte("Allow: GET, HEAD\r\n")
		cs.out = cs.s.appendError(cs.out, head, errMethod)
		return
	}
	head := req.Head(200)
	head.ContentType = a.ctype
	head.Extra = cs.s.dashboardExtra(a)
	if etagMatch(req, a.etag) {
		// RFC 9110 15.4.5: a 304 has no content; its Content-Length, when
		// sent, is the length a 200 would have had.
		head.Status = 304
		head.ContentLength = len(a.body)
		cs.out = wire.AppendHead(cs.out, head)
		return
	}
	if req.Method == wire.MethodHead {
		head.ContentLength = len(a.body)
		cs.out = wire.AppendHead(cs.out, head)
		return
	}
	cs.out = wire.AppendResponse(cs.out, head, a.body)
}

// dashboardExtra is a's header lines for this member's current view:
// outside a cell, or in a view with no member origins, the fixed ones.
// The policy is computed per answer (a page loaded now connects to the
// members of now), so a member's answer costs a copy of its lines.
func (s *Server) dashboardExtra(a *dashboardAsset) []byte {
	o := s.cors.of(s.cellView())
	if o == nil || len(o.origins) == 0 {
		return a.extra
	}
	return []byte(a.cellExtra + o.csp + "Referrer-Policy: no-referrer\r\n")
}

// etagMatch reports whether req's If-None-Match names etag (or is "*").
func etagMatch(req *wire.Request, etag []byte) bool {
	v, ok := req.Header("If-None-Match")
	if !ok {
		return false
	}
	for _, t := range strings.Split(string(v), ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t == "*" || t == string(etag) {
			return true
		}
	}
	return false
}
