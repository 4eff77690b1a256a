package server

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// Client links (clientlink.go), driven over TCP as docs/link.md describes
// them: the upgrade, then frames.

// upgradeClient sends the upgrade to a client link with the given extra
// header lines and returns the broker's answer and, on 101, the link.
func upgradeClient(t *testing.T, addr, lines string) (*http.Response, *testLink) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\n" + lines + "\r\n"
	if _, err := c.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	return readUpgradeAnswer(t, c)
}

// readUpgradeAnswer reads the answer to an upgrade, byte by byte up to its
// blank line so that no frame behind it is read into a buffer.
func readUpgradeAnswer(t *testing.T, c net.Conn) (*http.Response, *testLink) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var raw []byte
	b := make([]byte, 1)
	for !strings.HasSuffix(string(raw), "\r\n\r\n") {
		if _, err := c.Read(b); err != nil {
			t.Fatalf("reading the upgrade's answer: %v (so far %q)", err, raw)
		}
		raw = append(raw, b[0])
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		resp, err = http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw)+readRest(c))), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, nil
	}
	return resp, &testLink{c: c}
}

const v1 = "Connection: Upgrade\r\nUpgrade: queen-link/1\r\n"

func openClientLink(t *testing.T, addr, lines string) *testLink {
	t.Helper()
	resp, l := upgradeClient(t, addr, v1+lines)
	if l == nil {
		t.Fatalf("upgrade refused: %d", resp.StatusCode)
	}
	return l
}

// The upgrade: 101 naming the version picked among those offered; 426
// ephemeral_bad_request naming the versions spoken otherwise; identity
// refused as on any route.
func TestClientLinkUpgrade(t *testing.T) {
	ts := startServer(t, engine.Config{})
	for _, c := range []struct {
		what, lines string
		status      int
		upgrade     string // the answer's Upgrade header
		code        string
	}{
		{"v1", v1, 101, "queen-link/1", ""},
		{"a list with v1", "Connection: Upgrade\r\nUpgrade: queen-link/2, queen-link/1\r\n", 101, "queen-link/1", ""},
		{"only a newer version", "Connection: Upgrade\r\nUpgrade: queen-link/2\r\n", 426, "queen-link/1", codeBadRequest},
		{"the old gateway token", "Connection: Upgrade\r\nUpgrade: queen-link\r\n", 426, "queen-link/1", codeBadRequest},
		{"no Upgrade", "", 426, "queen-link/1", codeBadRequest},
	} {
		resp, l := upgradeClient(t, ts.addr, c.lines)
		if resp.StatusCode != c.status || resp.Header.Get("Upgrade") != c.upgrade {
			t.Fatalf("%s: %d Upgrade %q, want %d %q", c.what, resp.StatusCode, resp.Header.Get("Upgrade"), c.status, c.upgrade)
		}
		if c.code != "" {
			if code := errorCode(t, resp); code != c.code || l != nil {
				t.Fatalf("%s: code %q, want %q", c.what, code, c.code)
			}
		}
	}
	waitUntil(t, "two links counted", func() bool { return ts.s.clientLinks.Load() == 2 })

	// In jwt mode, identity first: no token is 401 whatever the Upgrade.
	secret := []byte("link-secret")
	jts := startConfigured(t, Config{Loops: 1, Auth: jwtAuth(t, secret)})
	for _, lines := range []string{v1, ""} {
		resp, _ := upgradeClient(t, jts.addr, lines)
		if resp.StatusCode != 401 || errorCode(t, resp) != codeUnauthorized {
			t.Fatalf("no token (%q): %d, want 401 unauthorized", lines, resp.StatusCode)
		}
	}
}

func jwtAuth(t *testing.T, secret []byte) *identity.Auth {
	t.Helper()
	a, err := identity.New(identity.Config{Mode: identity.ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every route is answered on its stream with the answer HTTP gives, byte
// for byte in the body: the same requests, in the same order, over a link
// to one broker and over HTTP to another. A pop parks on its stream only,
// and a cancel lets it go.
func TestClientLinkServesTheFamily(t *testing.T) {
	ts := startServer(t, engine.Config{})
	hs := startServer(t, engine.Config{})
	l := openClientLink(t, ts.addr, "")
	popID := l.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=q&wait=true&timeout=5000", "")
	waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
	pushID := l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"hi"}]}`)
	got := map[uint64]int{}
	for range 2 {
		id, status, _ := l.answer(t)
		got[id] = status
	}
	if got[pushID] != 201 || got[popID] != 200 {
		t.Fatalf("answers by stream: %v, want push 201 and the parked pop 200", got)
	}
	hs.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"hi"}]}`)
	hs.do(t, "GET", "/api/v1/ephemeral/pop?queue=q", "")
	for _, r := range []struct{ method, target, body string }{
		{"POST", "/api/v1/ephemeral/configure", `{"queue":"c","options":{"maxLength":5}}`},
		{"POST", "/api/v1/ephemeral/configure", `{"queue":"c","options":{"maxMessages":5}}`},
		{"POST", "/api/v1/ephemeral/push", `{"queue":"c","messages":[{"payload":1},{"payload":2}]}`},
		{"GET", "/api/v1/ephemeral/queues", ""},
		{"GET", "/api/v1/ephemeral/queues/c/depth", ""},
		{"GET", "/api/v1/ephemeral/queues/nosuch/depth", ""},
		{"POST", "/api/v1/ephemeral/reset", `{"queue":"c"}`},
		{"DELETE", "/api/v1/ephemeral/queue/c", ""},
		{"DELETE", "/api/v1/ephemeral/queue/c", ""},
		{"POST", "/api/v1/ephemeral/push", `{"queue":"q"}`},
		{"POST", "/api/v1/ephemeral/ack", `{"queue":"q","acks":[{"id":"nope"}]}`},
		{"GET", "/api/v1/ephemeral/push", ""},
		{"GET", "/api/v1/ephemeral/nosuch", ""},
	} {
		id := l.send(t, "", 0, r.method, r.target, r.body)
		gotID, status, body := l.answer(t)
		hStatus, hBody := hs.do(t, r.method, r.target, r.body)
		if gotID != id || status != hStatus || body != hBody {
			t.Fatalf("%s %s: stream %d %d %s; over HTTP %d %s", r.method, r.target, gotID, status, body, hStatus, hBody)
		}
	}
	// Routes outside the family, the link's own included, are 404.
	for _, target := range []string{"/health", "/metrics", "/api/v1/ephemeral/link", "/api/v1/system/cell"} {
		l.send(t, "", 0, "GET", target, "")
		if _, status, body := l.answer(t); status != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Fatalf("GET %s on a link: %d %s, want 404 not_found", target, status, body)
		}
	}
	// A cancel lets a parked pop go.
	id := l.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=idle&wait=true&timeout=30000", "")
	waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
	l.c.Write(link.AppendHeader(nil, link.FrameCancel, id, 0))
	waitUntil(t, "the pop let go", func() bool { return parkedPops(ts.e) == 0 })
}

// A request frame naming a tenant is a protocol error: the link closes.
func TestClientLinkFrameNamingATenantClosesIt(t *testing.T) {
	ts := startServer(t, engine.Config{})
	l := openClientLink(t, ts.addr, "")
	l.send(t, "acme", identity.Admin, "GET", "/api/v1/ephemeral/queues", "")
	l.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := l.c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes, want the link closed", n)
	}
	if qs := ts.e.Queues("acme", nil); len(qs) != 0 {
		t.Fatalf("acme's queues: %v", qs)
	}
}

// A JWT link ends at its token's exp unless a fresh token of the same
// tenant extends it; a token of another tenant is refused 403 and changes
// nothing.
func TestClientLinkTokenExpiryAndRefresh(t *testing.T) {
	secret := []byte("link-secret")
	ts := startConfigured(t, Config{Loops: 1, Auth: jwtAuth(t, secret)})
	tok := func(tenant string, exp time.Time) string {
		return hs256(t, secret, jwt.MapClaims{"tenant": tenant, "role": "read-write", "exp": exp.Unix()})
	}
	// exp has a resolution of a second: the first token ends within 2 s.
	soon := time.Now().Add(2 * time.Second).Truncate(time.Second)
	l := openClientLink(t, ts.addr, "Authorization: Bearer "+tok("acme", soon)+"\r\n")
	other := openClientLink(t, ts.addr, "Authorization: Bearer "+tok("acme", soon)+"\r\n")

	sendToken := func(l *testLink, token string) (int, string) {
		id := l.nextID
		l.nextID++
		f := link.AppendHeader(nil, link.FrameToken, id, len(token))
		l.c.Write(append(f, token...))
		gotID, status, body := l.answer(t)
		if gotID != id {
			t.Fatalf("token answered on stream %d, want %d", gotID, id)
		}
		return status, body
	}
	if status, body := sendToken(l, tok("globex", time.Now().Add(time.Hour))); status != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("another tenant's token: %d %s, want 403 forbidden", status, body)
	}
	if status, _ := sendToken(l, "not-a-jwt"); status != 401 {
		t.Fatalf("a bad token: %d, want 401", status)
	}
	if status, body := sendToken(l, "Bearer "+tok("acme", time.Now().Add(time.Hour))); status != 200 || body != "{}" {
		t.Fatalf("a fresh token: %d %s, want 200 {}", status, body)
	}
	// The link without a fresh token closes once its exp has passed; the
	// refreshed one still serves after that.
	other.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := other.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the link whose token expired is still open")
	}
	if !time.Now().After(soon) {
		t.Fatalf("closed at %v, before the token's exp %v", time.Now(), soon)
	}
	l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`)
	if _, status, _ := l.answer(t); status != 201 {
		t.Fatalf("push on the refreshed link: %d, want 201", status)
	}
	if got := ts.e.Queues("acme", nil); len(got) != 1 {
		t.Fatalf("acme's queues: %v", got)
	}
}

// After exp, as over HTTP: a new frame is answered 401 unauthorized on its
// stream, a pop parked before exp is still served, and the link closes once
// it carries nothing.
func TestClientLinkAfterExp(t *testing.T) {
	secret := []byte("link-secret")
	ts := startConfigured(t, Config{Loops: 1, Auth: jwtAuth(t, secret)})
	tok := func(exp time.Time) string {
		return hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "read-write", "exp": exp.Unix()})
	}
	soon := time.Now().Add(2 * time.Second).Truncate(time.Second)
	l := openClientLink(t, ts.addr, "Authorization: Bearer "+tok(soon)+"\r\n")
	pusher := openClientLink(t, ts.addr, "Authorization: Bearer "+tok(time.Now().Add(time.Hour))+"\r\n")
	popID := l.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=late&wait=true&timeout=30000&autoAck=true", "")
	time.Sleep(time.Until(soon) + 100*time.Millisecond) // exp is the rule here: a time
	l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`)
	if _, status, body := l.answer(t); status != 401 || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Fatalf("a frame after exp: %d %s, want 401 unauthorized", status, body)
	}
	pusher.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"late","messages":[{"payload":"served"}]}`)
	if _, status, _ := pusher.answer(t); status != 201 {
		t.Fatalf("push: %d, want 201", status)
	}
	if id, status, body := l.answer(t); id != popID || status != 200 || !strings.Contains(body, `"served"`) {
		t.Fatalf("the pop parked before exp: stream %d, %d %s; want stream %d, 200 with the message", id, status, body, popID)
	}
	l.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := l.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the expired link carrying nothing is still open")
	}
}

// The kill switch and the access level apply per frame.
func TestClientLinkGatesPerFrame(t *testing.T) {
	secret := []byte("link-secret")
	ts := startConfigured(t, Config{Loops: 1, Auth: jwtAuth(t, secret)})
	ro := hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "read-only", "exp": time.Now().Add(time.Hour).Unix()})
	l := openClientLink(t, ts.addr, "Authorization: Bearer "+ro+"\r\n")
	l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`)
	if _, status, body := l.answer(t); status != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("a read-only link's push: %d %s, want 403 forbidden", status, body)
	}
	ts.s.paused.Store(true)
	l.send(t, "", 0, "GET", "/api/v1/ephemeral/queues", "")
	if _, status, body := l.answer(t); status != 503 || !strings.Contains(body, `"code":"ephemeral_disabled"`) {
		t.Fatalf("paused: %d %s, want 503 ephemeral_disabled", status, body)
	}
}

// A frame begun and not whole within the body timeout closes its link, as
// a body that takes longer closes an HTTP connection; a link that keeps
// sending whole frames is kept.
func TestClientLinkStalledFrameCloses(t *testing.T) {
	ts := startConfigured(t, Config{Loops: 1, BodyTimeout: 300 * time.Millisecond})
	stalled := openClientLink(t, ts.addr, "")
	busy := openClientLink(t, ts.addr, "")
	// A frame declaring 1,000 bytes, then a byte every 100 ms: the link
	// is never silent, but the frame never completes.
	frame := append(link.AppendHeader(nil, link.FrameRequest, 0, 1000), 0, 0)
	stalled.c.Write(frame)
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := stalled.c.Write([]byte{0}); err != nil {
				done <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the link whose frame never completed is still open")
	}
	for range 5 {
		busy.send(t, "", 0, "GET", "/api/v1/ephemeral/queues", "")
		if _, status, _ := busy.answer(t); status != 200 {
			t.Fatalf("the busy link: %d", status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A request frame over the link's frame limit is refused on its stream as
// HTTP refuses a body over the bound, its bytes dropped as they come, and
// the link carries on.
func TestClientLinkOversizedFrameRefusedAlone(t *testing.T) {
	ts := startConfigured(t, Config{Loops: 1, MaxBodyBytes: 4096})
	l := openClientLink(t, ts.addr, "")
	parked := l.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000", "")
	waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
	big := l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"`+strings.Repeat("x", 200<<10)+`"}]}`)
	id, status, body := l.answer(t)
	if id != big || status != 400 || !strings.Contains(body, `"code":"ephemeral_bad_request"`) || !strings.Contains(body, "QUEEN_MAX_BODY_BYTES") {
		t.Fatalf("the oversized push: stream %d %d %s, want %d 400 ephemeral_bad_request", id, status, body, big)
	}
	push := l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":1}]}`)
	got := map[uint64]int{}
	for range 2 {
		id, status, _ := l.answer(t)
		got[id] = status
	}
	if got[push] != 201 || got[parked] != 200 {
		t.Fatalf("after the refusal: %v, want the push 201 and the parked pop answered 200", got)
	}
}
