package server

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// Member origins (cors.go; docs/server.md, "Browsers (D20)"): a page of
// one member reads the listing and the view of the others.

// corsDo sends method path with the header pairs and answers the status,
// the body and the headers.
func corsDo(t *testing.T, ts *testServer, method, path string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+ts.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// noCORS fails when h carries any header that grants an origin.
func noCORS(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") || k == "Vary" {
			t.Fatalf("%s: answered %s: %q, want no CORS header", what, k, h[k])
		}
	}
}

// wantCORS fails unless h grants exactly origin on a GET's answer.
func wantCORS(t *testing.T, what string, h http.Header, origin string) {
	t.Helper()
	if got := h.Values("Access-Control-Allow-Origin"); len(got) != 1 || got[0] != origin {
		t.Fatalf("%s: Access-Control-Allow-Origin %q, want exactly %q", what, got, origin)
	}
	if got := h.Values("Vary"); len(got) != 1 || got[0] != "Origin" {
		t.Fatalf("%s: Vary %q, want Origin", what, got)
	}
	for _, k := range []string{"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Allow-Credentials"} {
		if v := h.Values(k); len(v) != 0 {
			t.Fatalf("%s: %s %q on a GET's answer", what, k, v)
		}
	}
}

func corsCell(t *testing.T, cfg Config) (*testServer, *fakeCell) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	cfg.Loops, cfg.Cell = 1, f
	return serve(t, engine.New(engine.Config{}), openStore(t), cfg), f
}

// The two status reads answer a member origin with it, and only a member
// origin: exact match, never "*"; no other route does; outside a cell no
// origin is a member's.
func TestCORSMemberOriginReads(t *testing.T) {
	ts, _ := corsCell(t, Config{})
	for _, o := range []string{"http://10.0.0.1:6632", "https://b.example.com"} {
		for _, p := range []string{queuesPath, cellViewPath, cellViewPath + "?after=3&timeout=100"} {
			code, _, h := corsDo(t, ts, "GET", p, "Origin", o)
			if code != 200 {
				t.Fatalf("GET %s from %s: %d", p, o, code)
			}
			wantCORS(t, "GET "+p+" from "+o, h, o)
		}
	}
	for _, o := range []string{"", "null", "http://evil.example", "http://10.0.0.1:66321", "http://10.0.0.1",
		"https://10.0.0.1:6632", "http://10.0.0.1:6632/", "HTTP://10.0.0.1:6632", "https://b.example.com:443",
		"https://B.example.com", "http://10.0.0.3:6632", "*"} {
		code, _, h := corsDo(t, ts, "GET", queuesPath, "Origin", o)
		if code != 200 {
			t.Fatalf("GET from %q: %d", o, code)
		}
		noCORS(t, "GET "+queuesPath+" from "+o, h)
	}
	for _, p := range []string{queuesPath + "/q/depth", "/metrics", "/health", cellPath, "/dashboard"} {
		_, _, h := corsDo(t, ts, "GET", p, "Origin", "http://10.0.0.1:6632")
		noCORS(t, "GET "+p, h)
	}

	single := startServer(t, engine.Config{})
	_, _, h := corsDo(t, single, "GET", queuesPath, "Origin", "http://10.0.0.1:6632")
	noCORS(t, "outside a cell", h)
}

// A member origin's refused read carries the grant too, so that its page
// can show why (here: no token, then too little access).
func TestCORSRefusedReadCarriesTheGrant(t *testing.T) {
	secret := []byte("cors-secret")
	ts, _ := corsCell(t, Config{Auth: jwtAuth(t, secret)})
	code, body, h := corsDo(t, ts, "GET", queuesPath, "Origin", "http://10.0.0.1:6632")
	if code != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Fatalf("no token: %d %s, want 401 unauthorized", code, body)
	}
	wantCORS(t, "401", h, "http://10.0.0.1:6632")
	tok := hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "write-only", "exp": time.Now().Add(time.Hour).Unix()})
	code, body, h = corsDo(t, ts, "GET", cellViewPath, "Origin", "https://b.example.com", "Authorization", "Bearer "+tok)
	if code != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("write-only: %d %s, want 403 forbidden", code, body)
	}
	wantCORS(t, "403", h, "https://b.example.com")
	tok = hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "read-only", "exp": time.Now().Add(time.Hour).Unix()})
	code, _, h = corsDo(t, ts, "GET", queuesPath, "Origin", "https://b.example.com", "Authorization", "Bearer "+tok)
	if code != 200 {
		t.Fatalf("read-only: %d", code)
	}
	wantCORS(t, "200", h, "https://b.example.com")
	// The same connection's next request, from no origin, carries nothing.
	code, _, h = corsDo(t, ts, "GET", queuesPath, "Authorization", "Bearer "+tok)
	if code != 200 {
		t.Fatalf("no origin: %d", code)
	}
	noCORS(t, "the next request", h)
}

// A preflight of a GET of the two reads from a member origin is 204,
// before identity; any other OPTIONS is refused as before (405).
func TestCORSPreflight(t *testing.T) {
	secret := []byte("cors-secret")
	ts, _ := corsCell(t, Config{Auth: jwtAuth(t, secret)})
	for _, p := range []string{queuesPath, cellViewPath} {
		code, body, h := corsDo(t, ts, "OPTIONS", p, "Origin", "http://10.0.0.1:6632",
			"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "authorization")
		if code != 204 || body != "" {
			t.Fatalf("preflight of %s: %d %q, want 204 and no body", p, code, body)
		}
		want := map[string]string{
			"Access-Control-Allow-Origin":  "http://10.0.0.1:6632",
			"Vary":                         "Origin",
			"Access-Control-Allow-Methods": "GET",
			"Access-Control-Allow-Headers": "Authorization",
			"Access-Control-Max-Age":       "60",
		}
		for k, v := range want {
			if got := h.Values(k); len(got) != 1 || got[0] != v {
				t.Fatalf("preflight of %s: %s %q, want %q", p, k, got, v)
			}
		}
		if v := h.Values("Access-Control-Allow-Credentials"); len(v) != 0 {
			t.Fatalf("preflight allows credentials: %q", v)
		}
	}
	refused := []struct {
		path string
		hdr  []string
	}{
		{queuesPath, []string{"Origin", "http://evil.example", "Access-Control-Request-Method", "GET"}},
		{queuesPath, []string{"Origin", "http://10.0.0.1:6632", "Access-Control-Request-Method", "POST"}},
		{queuesPath, []string{"Origin", "http://10.0.0.1:6632"}},
		{queuesPath, []string{"Access-Control-Request-Method", "GET"}},
		{prefix + "push", []string{"Origin", "http://10.0.0.1:6632", "Access-Control-Request-Method", "POST"}},
		{queuesPath + "/q/depth", []string{"Origin", "http://10.0.0.1:6632", "Access-Control-Request-Method", "GET"}},
	}
	for _, r := range refused {
		code, body, h := corsDo(t, ts, "OPTIONS", r.path, r.hdr...)
		if code != 405 || !strings.Contains(body, `"code":"method_not_allowed"`) {
			t.Fatalf("OPTIONS %s %q: %d %s, want 405 method_not_allowed", r.path, r.hdr, code, body)
		}
		noCORS(t, "OPTIONS "+r.path, h)
	}
	// The pop is state-changing whatever its method (D20): refused first.
	code, body, h := corsDo(t, ts, "OPTIONS", prefix+"pop", "Origin", "http://10.0.0.1:6632", "Access-Control-Request-Method", "GET")
	if code != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("OPTIONS pop: %d %s, want 403 forbidden", code, body)
	}
	noCORS(t, "OPTIONS pop", h)
}

// A member origin changes no state: its POST, and its GET of pop, are
// still refused by D20's cross-origin rule, with no grant.
func TestCORSMemberOriginStillRefusedWrites(t *testing.T) {
	ts, _ := corsCell(t, Config{})
	for _, r := range []struct{ method, path string }{
		{"POST", prefix + "push"}, {"POST", prefix + "configure"}, {"GET", prefix + "pop?queue=q"},
		{"DELETE", prefix + "queue/q"},
	} {
		code, body, h := corsDo(t, ts, r.method, r.path, "Origin", "http://10.0.0.1:6632", "Sec-Fetch-Site", "cross-site")
		if code != 403 || !strings.Contains(body, `"code":"forbidden"`) || !strings.Contains(body, "QUEEN_TRUSTED_ORIGINS") {
			t.Fatalf("%s %s from a member origin: %d %s, want 403 forbidden naming QUEEN_TRUSTED_ORIGINS", r.method, r.path, code, body)
		}
		noCORS(t, r.method+" "+r.path, h)
	}
}

// The grant follows the live view: a member that leaves it is no longer
// granted, one that joins is, and the dashboard's policy lists the view's
// member origins.
func TestCORSFollowsTheView(t *testing.T) {
	ts, f := corsCell(t, Config{})
	_, _, h := corsDo(t, ts, "GET", "/dashboard", "")
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "; connect-src 'self' http://10.0.0.1:6632 https://b.example.com; ") {
		t.Fatalf("policy %q, want connect-src 'self' and the two member origins", csp)
	}
	next := []cell.Member{urlMembers[1], {ID: "10.0.0.4:7000", Incarnation: "ddd", URL: "http://10.0.0.4:8080/queen/"}}
	changeView(ts, f, cell.StaticView(5, "10.0.0.2:7000", next, false))
	_, _, h = corsDo(t, ts, "GET", queuesPath, "Origin", "http://10.0.0.1:6632")
	noCORS(t, "a member that left", h)
	code, _, h := corsDo(t, ts, "OPTIONS", queuesPath, "Origin", "http://10.0.0.1:6632", "Access-Control-Request-Method", "GET")
	if code != 405 {
		t.Fatalf("preflight from a member that left: %d, want 405", code)
	}
	_, _, h2 := corsDo(t, ts, "GET", queuesPath, "Origin", "http://10.0.0.4:8080")
	wantCORS(t, "a member that joined", h2, "http://10.0.0.4:8080")
	noCORS(t, "preflight from a member that left", h)
	_, _, h = corsDo(t, ts, "GET", "/dashboard/dashboard.js", "")
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "; connect-src 'self' https://b.example.com http://10.0.0.4:8080; ") {
		t.Fatalf("policy %q after the view changed", csp)
	}
	single := startServer(t, engine.Config{})
	_, _, h = corsDo(t, single, "GET", "/dashboard", "")
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "; connect-src 'self'; ") {
		t.Fatalf("policy outside a cell %q, want connect-src 'self' alone", csp)
	}
}

// urlOrigin derives what a browser sends as Origin for a page at a URL.
func TestURLOrigin(t *testing.T) {
	for u, want := range map[string]string{
		"http://10.0.0.1:6632":            "http://10.0.0.1:6632",
		"http://10.0.0.1:6632/":           "http://10.0.0.1:6632",
		"HTTPS://Queen.Example.com/x?y#z": "https://queen.example.com",
		"http://a.example:80":             "http://a.example",
		"https://a.example:443/":          "https://a.example",
		"https://a.example:80":            "https://a.example:80",
		"http://[fd00::1]:6632":           "http://[fd00::1]:6632",
		"":                                "",
		"10.0.0.1:6632":                   "",
		"ftp://a.example":                 "",
		"http://user@a.example":           "",
		"http://":                         "",
	} {
		got, ok := urlOrigin(u)
		if got != want || ok != (want != "") {
			t.Errorf("urlOrigin(%q) = %q, %v; want %q", u, got, ok, want)
		}
	}
}

// Granting a member origin allocates nothing per request (P3: the origins
// and their header lines are made once per view), as a listing without an
// Origin does not.
func TestCORSGrantIsAllocationFree(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	s := New(Config{Engine: e, Store: openStore(t), Cell: f})
	cs := &conn{s: s, ls: new(loopState)}
	cs.sink = popSink{cs: cs, e: e}
	var p wire.Parser
	var raw []byte
	serve := func(target, headers string) {
		raw = append(raw[:0], "GET "...)
		raw = append(raw, target...)
		raw = append(raw, " HTTP/1.1\r\nHost: x\r\n"...)
		raw = append(raw, headers...)
		raw = append(raw, "\r\n"...)
		p.Reset()
		req, _, err := p.Parse(raw)
		if err != nil || req == nil {
			t.Fatalf("parse %s: %v", target, err)
		}
		cs.out = cs.out[:0]
		cs.route(req)
	}
	grant := []byte("\r\nAccess-Control-Allow-Origin: http://10.0.0.1:6632\r\nVary: Origin\r\n")
	for _, target := range []string{queuesPath, cellViewPath} {
		n := steadyMallocs(steadyCycles, func() {
			serve(target, "Origin: http://10.0.0.1:6632\r\n")
			if !bytes.HasPrefix(cs.out, []byte("HTTP/1.1 200")) || !bytes.Contains(cs.out, grant) {
				t.Fatalf("GET %s from a member origin: %s", target, cs.out)
			}
		})
		base := steadyMallocs(steadyCycles, func() { serve(target, "") })
		if n > base+steadyCycles/100 {
			t.Fatalf("%d granted reads of %s allocated %d times, %d without an Origin", steadyCycles, target, n, base)
		}
		t.Logf("%s: %d reads: %d allocations granted, %d without an Origin", target, steadyCycles, n, base)
	}
}
