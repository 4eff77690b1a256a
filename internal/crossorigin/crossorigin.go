// Package crossorigin decides what a browser may do to a server that
// answers on a port a web page can reach (docs/decisions.md, D20): the
// broker's public port and the gateway's.
//
// Two rules, both read from a request's head, so a refusal costs no body:
//
//   - Cross-origin protection. A request that changes state and that a
//     browser marks as sent from another origin is refused, as Go's
//     net/http.CrossOriginProtection decides: Sec-Fetch-Site other than
//     same-origin or none, or, without that header, an Origin whose host is
//     not the Host. A listed trusted origin is let through. A request with
//     neither header (curl, the SDKs, the gateway, queenctl) is not a
//     browser's and is untouched.
//   - Loopback names. A server that trusts a loopback client (protected
//     mode) trusts it only when its Host names loopback (or a listed
//     trusted host): a page whose name was rebound to 127.0.0.1 (DNS
//     rebinding) reaches the port from loopback but still sends its own name.
//
// The checks allocate nothing; the refusals are built once.
package crossorigin

import (
	"bytes"
	"fmt"
	"net/url"
	"strings"

	"github.com/queenmq/ephemeral/wire"
)

// Guard holds the operator's exceptions. The zero Guard trusts no origin
// and no host beyond loopback's own names. A Guard is read-only once built
// and safe for concurrent use.
type Guard struct {
	origins map[string]struct{} // exact Origin values, "scheme://host[:port]"
	hosts   map[string]struct{} // lower-case host names without a port
}

// New builds a Guard from the trusted origins (QUEEN_TRUSTED_ORIGINS) and
// trusted hosts (QUEEN_TRUSTED_HOSTS). An origin is "scheme://host[:port]"
// with nothing after it, as a browser sends it; a host is a name or an
// address without a port. Anything else is an error that names it.
func New(origins, hosts []string) (*Guard, error) {
	g := &Guard{origins: map[string]struct{}{}, hosts: map[string]struct{}{}}
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "" || u.User != nil ||
			u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
			return nil, fmt.Errorf("trusted origin %q: want scheme://host[:port] with no path, query or fragment, "+
				"exactly as a browser sends it in Origin (for example https://app.example.com)", o)
		}
		g.origins[o] = struct{}{}
	}
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, "/:@?# ") && !isBracketed(h) {
			return nil, fmt.Errorf("trusted host %q: want a host name or address without a scheme or port "+
				"(for example queen.internal, or [fd00::1])", h)
		}
		g.hosts[strings.ToLower(h)] = struct{}{}
	}
	return g, nil
}

// Split splits a comma-separated list (an environment variable's value),
// trimming spaces and dropping empty entries.
func Split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func isBracketed(h string) bool {
	return len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' && !strings.ContainsAny(h[1:len(h)-1], "[]/@?# ")
}

// Refusals, built once: both are 403 forbidden and say what to change.
var (
	ErrCrossSite = &wire.Error{Status: 403, Code: wire.CodeForbidden, Msg: "cross-origin request refused: " +
		"the browser marked it Sec-Fetch-Site other than same-origin, so a page on another site sent it; " +
		"a page may change state only on its own origin (list the page's origin in QUEEN_TRUSTED_ORIGINS to allow it)"}
	ErrOriginMismatch = &wire.Error{Status: 403, Code: wire.CodeForbidden, Msg: "cross-origin request refused: " +
		"its Origin does not match its Host and it carries no Sec-Fetch-Site, so a page on another site " +
		"(or an out-of-date browser) sent it (list the page's origin in QUEEN_TRUSTED_ORIGINS to allow it)"}
	ErrHostNotLoopback = &wire.Error{Status: 403, Code: wire.CodeForbidden, Msg: "a loopback client is trusted here " +
		"only when its Host names loopback (localhost, 127.0.0.1 or [::1]): another name reaching loopback is how a " +
		"rebound web page arrives; list the name in QUEEN_TRUSTED_HOSTS, or send the admin token"}
)

// Header is what the checks read of a request: wire.Request has it.
type Header interface {
	Header(name string) ([]byte, bool)
}

// PopPath is the one route of the queue protocol whose GET changes state:
// a pop takes leases and, with autoAck, consumes.
const PopPath = "/api/v1/ephemeral/pop"

// StateChanging reports whether a request may change state, and so is
// checked: every method but GET, HEAD and OPTIONS (the methods
// net/http.CrossOriginProtection lets through), and a GET of PopPath.
func StateChanging(m wire.Method, path []byte) bool {
	safe := m == wire.MethodGet || m == wire.MethodHead || m == wire.MethodOptions
	return !safe || string(path) == PopPath
}

// Check refuses a request that a browser sent from another origin, or
// returns nil. The caller decides that the request changes state (see
// StateChanging); Check reads only the headers. The rules are
// net/http.CrossOriginProtection's, in its order.
func (g *Guard) Check(r Header) *wire.Error {
	if site, ok := r.Header("Sec-Fetch-Site"); ok && len(site) > 0 {
		if string(site) == "same-origin" || string(site) == "none" {
			return nil
		}
		if g.trustedOrigin(r) {
			return nil
		}
		return ErrCrossSite
	}
	origin, ok := r.Header("Origin")
	if !ok || len(origin) == 0 {
		return nil // neither header: same-origin from an old browser, or no browser at all
	}
	host, _ := r.Header("Host")
	if oh, ok := originHost(origin); ok && len(host) > 0 && equalFold(oh, host) {
		return nil
	}
	if g.trustedOrigin(r) {
		return nil
	}
	return ErrOriginMismatch
}

// trustedOrigin reports whether the request's Origin is listed. As in
// net/http, a listed origin counts only when the browser sent one.
func (g *Guard) trustedOrigin(r Header) bool {
	origin, ok := r.Header("Origin")
	if !ok || len(origin) == 0 || g == nil || len(g.origins) == 0 {
		return false
	}
	_, ok = g.origins[string(origin)]
	return ok
}

// originHost returns the host[:port] of an Origin value
// ("scheme://host[:port]"); "null" and anything without a scheme have none.
func originHost(origin []byte) ([]byte, bool) {
	i := bytes.Index(origin, []byte("://"))
	if i <= 0 {
		return nil, false
	}
	h := origin[i+3:]
	if j := bytes.IndexAny(h, "/?#"); j >= 0 {
		h = h[:j]
	}
	return h, len(h) > 0
}

// LoopbackHost reports whether the request's Host names loopback
// (localhost, 127.0.0.1 or [::1], any port) or a trusted host. A request
// with no Host (HTTP/1.0 without one) is no browser's and passes.
func (g *Guard) LoopbackHost(r Header) bool {
	host, ok := r.Header("Host")
	if !ok || len(host) == 0 {
		return true
	}
	name := stripPort(host)
	switch {
	case equalFold(name, []byte("localhost")), string(name) == "127.0.0.1", string(name) == "[::1]":
		return true
	}
	if g == nil || len(g.hosts) == 0 {
		return false
	}
	var low [256]byte
	if len(name) > len(low) {
		return false
	}
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	_, ok = g.hosts[string(low[:len(name)])]
	return ok
}

// stripPort drops a ":port" from a Host value; a bracketed IPv6 address
// keeps its brackets.
func stripPort(host []byte) []byte {
	if len(host) > 0 && host[0] == '[' {
		if i := bytes.IndexByte(host, ']'); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	if i := bytes.LastIndexByte(host, ':'); i >= 0 {
		return host[:i]
	}
	return host
}

func equalFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		c, d := a[i], b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
