package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// The dashboard's route (docs/dashboard.md): the embedded page and assets
// with their types, lengths and caching headers; 404 for an asset that is
// not there, 405 for a method other than GET and HEAD, in the family's
// error shape. The page in a browser: conformance/browser.

func getDashboard(t *testing.T, ts *testServer, method, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+ts.addr+path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestDashboardAssets(t *testing.T) {
	ts := startServer(t, engine.Config{})
	for _, c := range []struct{ path, ctype, contains string }{
		{"/dashboard", "text/html; charset=utf-8", "<title>"},
		{"/dashboard/", "text/html; charset=utf-8", "<title>"},
		{"/dashboard/index.html", "text/html; charset=utf-8", "<title>"},
		{"/dashboard/dashboard.js", "text/javascript; charset=utf-8", "'use strict'"},
		{"/dashboard/dashboard.css", "text/css; charset=utf-8", "--accent"},
	} {
		resp, body := getDashboard(t, ts, "GET", c.path, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", c.path, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Content-Type"); got != c.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", c.path, got, c.ctype)
		}
		if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(len(body)) {
			t.Errorf("GET %s: Content-Length %q for %d bytes", c.path, got, len(body))
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", c.path, got)
		}
		if resp.Header.Get("ETag") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: headers %v", c.path, resp.Header)
		}
		if !strings.Contains(body, c.contains) {
			t.Errorf("GET %s: the body lacks %q", c.path, c.contains)
		}
	}
}

// Every embedded file has a type a browser will use (a script served as
// octet-stream does not run under nosniff), and everything the page links
// to is embedded.
func TestDashboardEmbedsWhatThePageLinks(t *testing.T) {
	for p, a := range dashboardAssets {
		if a.ctype == "application/octet-stream" {
			t.Errorf("%s: no content type", p)
		}
	}
	page := string(dashboardAssets[dashboardPath].body)
	links := regexp.MustCompile(`(?:src|href)="(/[^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(links) < 2 {
		t.Fatalf("the page links %d assets; want its script and stylesheet", len(links))
	}
	for _, m := range links {
		if dashboardAssets[m[1]] == nil {
			t.Errorf("index.html links %s, which is not embedded", m[1])
		}
	}
}

func TestDashboardNotFoundAndMethods(t *testing.T) {
	ts := startServer(t, engine.Config{})
	for _, p := range []string{"/dashboard/nope.js", "/dashboard/dashboard.js/x", "/dashboardx", "/dashboard//index.html", "/dashboard/%2e%2e/health"} {
		resp, body := getDashboard(t, ts, "GET", p, nil)
		if resp.StatusCode != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Errorf("GET %s: %d %s; want 404 not_found", p, resp.StatusCode, body)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "OPTIONS", "PATCH"} {
		resp, body := getDashboard(t, ts, m, "/dashboard", nil)
		if resp.StatusCode != 405 || !strings.Contains(body, `"code":"method_not_allowed"`) {
			t.Errorf("%s /dashboard: %d %s; want 405 method_not_allowed", m, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
			t.Errorf("%s /dashboard: Allow %q, want \"GET, HEAD\"", m, got)
		}
	}
}

// HEAD answers the GET's headers and no body: a GET pipelined behind it on
// the same connection is read intact. A GET naming the ETag is a 304
// without a body.
func TestDashboardHeadAndNotModified(t *testing.T) {
	ts := startServer(t, engine.Config{})
	full, body := getDashboard(t, ts, "GET", "/dashboard", nil)
	etag := full.Header.Get("ETag")

	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(c, "HEAD /dashboard HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /dashboard HTTP/1.1\r\nHost: x\r\nIf-None-Match: "+etag+"\r\n\r\n"+
		"GET /dashboard/ HTTP/1.1\r\nHost: x\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	head, err := http.ReadResponse(r, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if head.StatusCode != 200 || head.Header.Get("Content-Length") != strconv.Itoa(len(body)) ||
		head.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("HEAD: %d %v", head.StatusCode, head.Header)
	}
	nm, err := http.ReadResponse(r, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	if nm.StatusCode != 304 || nm.Header.Get("ETag") != etag {
		t.Fatalf("If-None-Match: %d %v; want 304", nm.StatusCode, nm.Header)
	}
	// A 304 has no body whatever its Content-Length (RFC 9110 15.4.5): the
	// next answer starts right after its head.
	again, err := http.ReadResponse(r, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(again.Body)
	if again.StatusCode != 200 || string(b) != body {
		t.Fatalf("GET after HEAD and 304: %d, %d bytes; want 200 and the page", again.StatusCode, len(b))
	}
}

// The page loads without identity in jwt mode (the routes it calls refuse
// without a token) and while the broker is paused (it has to show that).
func TestDashboardNeedsNoIdentity(t *testing.T) {
	secret := []byte("jwt-secret")
	auth, err := identity.New(identity.Config{Mode: identity.ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: auth, OperatorTenant: "ops"})
	if resp, body := getDashboard(t, ts, "GET", "/dashboard", nil); resp.StatusCode != 200 {
		t.Fatalf("jwt mode, no token: GET /dashboard %d %s", resp.StatusCode, body)
	}
	if c, _ := ts.do(t, "GET", queuesPath, ""); c != 401 {
		t.Fatalf("jwt mode, no token: the listing answers %d; want 401", c)
	}
	op := hs256(t, secret, jwt.MapClaims{"tenant": "ops", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()})
	resp, body := getDashboard(t, ts, "POST", systemPath, nil)
	if resp.StatusCode != 401 {
		t.Fatalf("pause without a token: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", "http://"+ts.addr+systemPath, strings.NewReader(`{"enabled":false}`))
	req.Header.Set("Authorization", "Bearer "+op)
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("pause: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	if resp, body := getDashboard(t, ts, "GET", "/dashboard/dashboard.js", nil); resp.StatusCode != 200 {
		t.Fatalf("paused: GET /dashboard/dashboard.js %d %s", resp.StatusCode, body)
	}
}
