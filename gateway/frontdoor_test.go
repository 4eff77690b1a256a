package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// The front door (body.go, docs/gateway.md "The front door"), over real
// TCP against an in-process gateway with JWT identity in front of a real
// broker: a request is judged on its head before its body is read, bodies
// are read once and bounded, slow heads and bodies are closed.

const frontJWTSecret = "front-door-jwt-secret"

// startFront starts a broker in gateway mode (brokerEnv over the defaults)
// and an in-process gateway with HS256 identity in front of it; tenant acme
// is on plan pro (ephemeral), tenant free on plan free (without it). tune
// changes the gateway's Config before it starts.
func startFront(t *testing.T, brokerEnv map[string]string, tune func(*Config)) *Gateway {
	t.Helper()
	env := map[string]string{
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          testSecret,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	}
	for k, v := range brokerEnv {
		env[k] = v
	}
	b := brokertest.StartQueen(t, env)
	cat := newMemCatalog()
	ctx := context.Background()
	_ = cat.PutPlan(ctx, catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}})
	_ = cat.PutPlan(ctx, catalog.Plan{Name: "free"})
	_ = cat.PutTenant(ctx, catalog.Tenant{Name: "acme", Plan: "pro"})
	_ = cat.PutTenant(ctx, catalog.Tenant{Name: "free", Plan: "free"})
	auth, err := identity.New(identity.Config{Mode: identity.ModeJWT, JWTSecret: []byte(frontJWTSecret)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Addr: "127.0.0.1:0", Upstreams: []string{b.URL()}, Secret: testSecret, Auth: auth, Catalog: cat,
		PollInterval: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond, Loops: 2,
	}
	if tune != nil {
		tune(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g
}

// frontToken mints an HS256 token for tenant with role.
func frontToken(t *testing.T, tenant, role string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "front", "tenant": tenant, "role": role, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(frontJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dial opens a raw connection to g.
func dial(t *testing.T, g *Gateway) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// head is a request head with a Content-Length body of n bytes (the token
// when not empty).
func head(method, target, token string, n int64) string {
	h := method + " " + target + " HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
	if token != "" {
		h += "Authorization: Bearer " + token + "\r\n"
	}
	return h + "Content-Length: " + strconv.FormatInt(n, 10) + "\r\n\r\n"
}

// answer reads one answer from r within 5 s (answerWithin for more): its
// status, its code and whether it says Connection: close.
func answer(t *testing.T, c net.Conn, r *bufio.Reader) (int, string, bool) {
	t.Helper()
	return answerWithin(t, c, r, 5*time.Second)
}

// answerWithin is answer with a deadline of wait.
func answerWithin(t *testing.T, c net.Conn, r *bufio.Reader, wait time.Duration) (int, string, bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &e)
	return resp.StatusCode, e.Code, resp.Close
}

// waitClosed fails t unless the gateway closes c within wait (a read ends
// with EOF or a reset); it answers how long that took.
func waitClosed(t *testing.T, c net.Conn, r io.Reader, wait time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(wait))
	n, err := io.Copy(io.Discard, r)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("the connection was still open after %v", wait)
	case err != nil && !errors.Is(err, syscall.ECONNRESET):
		t.Fatalf("reading until the close: %v", err)
	case n != 0:
		t.Fatalf("%d bytes more before the close", n)
	}
	return time.Since(start)
}

// TestUnauthenticatedUploadRefusedOnItsHead: a request that its head
// already condemns (no or a bad token, a route the table does not have, a
// level too low, a plan without the feature, an admin route for a tenant's
// admin) is answered as soon as its head is in, with the code the docs
// name, and its connection closed, although only 64 KiB of its 60 MiB body
// were sent: nothing of it is held (the in-flight bound is untouched).
// Before, the gateway read the whole body first.
func TestUnauthenticatedUploadRefusedOnItsHead(t *testing.T) {
	g := startFront(t, nil, nil)
	rw, ro := frontToken(t, "acme", "read-write"), frontToken(t, "acme", "read-only")
	for _, c := range []struct {
		name, method, target, token string
		status                      int
		code                        string
	}{
		{"no token", "POST", "/api/v1/ephemeral/push", "", 401, "unauthorized"},
		{"a forged token", "POST", "/api/v1/ephemeral/push", "e30.e30.AAAA", 401, "unauthorized"},
		{"an unknown route", "POST", "/api/v1/ephemeral/upload", rw, 404, "route_blocked"},
		{"a read-only token pushes", "POST", "/api/v1/ephemeral/push", ro, 403, "forbidden"},
		{"a plan without ephemeral", "POST", "/api/v1/ephemeral/push", frontToken(t, "free", "read-write"), 403, "feature_gated"},
		{"a tenant's admin puts a plan", "PUT", "/api/v1/gateway/plans/pro", frontToken(t, "acme", "admin"), 403, "forbidden"},
		{"no token on an admin route", "PUT", "/api/v1/gateway/plans/pro", "", 401, "unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, g)
			r := bufio.NewReader(conn)
			msg := []byte(head(c.method, c.target, c.token, 60<<20))
			msg = append(msg, bytes.Repeat([]byte{'x'}, 64<<10)...)
			if _, err := conn.Write(msg); err != nil {
				t.Fatal(err)
			}
			status, code, closes := answer(t, conn, r)
			if status != c.status || code != c.code || !closes {
				t.Fatalf("got %d %q (Connection: close %v), want %d %q and close", status, code, closes, c.status, c.code)
			}
			waitClosed(t, conn, r, 5*time.Second)
			if n := g.inflight.Load(); n != 0 {
				t.Fatalf("%d request bytes still reserved", n)
			}
		})
	}
}

// TestSlowHeadClosedByTheHeaderTimeout: a head that trickles in, a byte
// at a time, is closed once it has taken HeaderTimeout (checked on the 1 s
// tick), although the client never stops sending. Before, every byte kept
// the connection alive (it was open at 72 s with one byte every 8 s).
func TestSlowHeadClosedByTheHeaderTimeout(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.HeaderTimeout = 300 * time.Millisecond })
	conn := dial(t, g)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		line := []byte("POST /api/v1/ephemeral/push HTTP/1.1\r\nX-Slow: ")
		for i := 0; ; i++ {
			b := []byte{'a'}
			if i < len(line) {
				b = line[i : i+1]
			}
			if _, err := conn.Write(b); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	took := waitClosed(t, conn, conn, 10*time.Second)
	if took < 300*time.Millisecond {
		t.Fatalf("closed after %v, before the header timeout", took)
	}
}

// TestSlowBodyClosedByTheBodyTimeout: an authenticated body that trickles
// in is closed once it has taken BodyTimeout; its reservation is given
// back.
func TestSlowBodyClosedByTheBodyTimeout(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.BodyTimeout = 500 * time.Millisecond })
	conn := dial(t, g)
	if _, err := conn.Write([]byte(head("POST", "/api/v1/ephemeral/push", frontToken(t, "acme", "read-write"), 1000) + `{"queue":"q",`)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	took := waitClosed(t, conn, conn, 10*time.Second)
	if took < 500*time.Millisecond {
		t.Fatalf("closed after %v, before the body timeout", took)
	}
	brokertest.Eventually(t, 10*time.Second, "the body's reservation given back", func() bool { return g.inflight.Load() == 0 })
}

// TestInflightBoundRefusesOnTheHead: bodies being read hold the
// in-flight bound; a body it cannot hold is refused 503
// ephemeral_unavailable on its head and its connection closed, while the
// body already admitted completes and is forwarded.
func TestInflightBoundRefusesOnTheHead(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.MaxInflightBytes = 1 << 20 })
	tok := frontToken(t, "acme", "read-write")

	// Over the bound alone.
	conn := dial(t, g)
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, 2<<20))); err != nil {
		t.Fatal(err)
	}
	if status, code, closes := answer(t, conn, r); status != 503 || code != "ephemeral_unavailable" || !closes {
		t.Fatalf("a body over the bound: %d %q close %v, want 503 ephemeral_unavailable and close", status, code, closes)
	}
	waitClosed(t, conn, r, 5*time.Second)

	// A first body holds 600 KiB; a second of 600 KiB does not fit.
	body := pushOf("big", 600<<10)
	first := dial(t, g)
	fr := bufio.NewReader(first)
	if _, err := first.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(body))) + body[:1000])); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the first body reserved", func() bool { return g.inflight.Load() > 600<<10 })
	second := dial(t, g)
	sr := bufio.NewReader(second)
	if _, err := second.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(body))) + body[:1000])); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, second, sr); status != 503 || code != "ephemeral_unavailable" {
		t.Fatalf("a second body past the bound: %d %q, want 503 ephemeral_unavailable", status, code)
	}
	if _, err := first.Write([]byte(body[1000:])); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, first, fr); status != 201 {
		t.Fatalf("the admitted body: %d %q, want 201", status, code)
	}
	brokertest.Eventually(t, 10*time.Second, "every reservation given back", func() bool { return g.inflight.Load() == 0 })

	// A request of exactly the bound, head and body, fits.
	n := 1<<20 - len(head("POST", "/api/v1/ephemeral/push", tok, 1<<20)) - len(pushOf("exact", 0))
	exact := pushOf("exact", n)
	h := head("POST", "/api/v1/ephemeral/push", tok, int64(len(exact)))
	if len(h)+len(exact) != 1<<20 {
		t.Fatalf("the request is %d bytes, not the bound", len(h)+len(exact))
	}
	conn = dial(t, g)
	r = bufio.NewReader(conn)
	if _, err := conn.Write([]byte(h)); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the whole bound reserved", func() bool { return g.inflight.Load() == 1<<20 })
	if _, err := conn.Write([]byte(exact)); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, conn, r); status != 201 {
		t.Fatalf("a request of exactly the bound: %d %q, want 201", status, code)
	}
	brokertest.Eventually(t, 10*time.Second, "every reservation given back", func() bool { return g.inflight.Load() == 0 })
}

// pushOf is a push of one message whose payload is a string of about n
// bytes.
func pushOf(queue string, n int) string {
	return fmt.Sprintf(`{"queue":%q,"messages":[{"payload":%q}]}`, queue, strings.Repeat("p", n))
}

// TestLargeBodyForwardedWhole: an authenticated 40 MiB push, sent in 64 KiB
// writes, is forwarded and served (201), and its payload pops back byte
// for byte; reading it cost the gateway little CPU (each byte is looked at
// a bounded number of times: before, every read re-peeked and re-parsed the
// body from its start, 4.9 s of CPU here against 0.12 s then).
//
// It runs without the race detector only, in its own step of make test
// (docs/development.md): under -race in CI it failed twice in six runs
// with 503 ephemeral_forward_failed about 13 s in (the request never left
// the gateway), a cause not found yet: not a slow client (a 40 MiB upload
// spread over 13 s passes), not local load (four runs beside two busy
// loops passed).
func TestLargeBodyForwardedWhole(t *testing.T) {
	if raceEnabled {
		t.Skip("runs without -race (make test's own step): under -race it fails now and then in CI with a cause not yet found")
	}
	g := startFront(t, map[string]string{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES": strconv.Itoa(64 << 20)}, nil)
	tok := frontToken(t, "acme", "read-write")
	body := pushOf("large", 40<<20)
	conn := dial(t, g)
	r := bufio.NewReader(conn)
	cpu0 := processCPU(t)
	msg := []byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(body))) + body)
	for len(msg) > 0 {
		n := min(len(msg), 64<<10)
		if _, err := conn.Write(msg[:n]); err != nil {
			t.Fatal(err)
		}
		msg = msg[n:]
	}
	// 40 MiB on a loaded machine may take more than answer's 5 s.
	if status, code, _ := answerWithin(t, conn, r, time.Minute); status != 201 {
		t.Fatalf("push: %d %q, want 201", status, code)
	}
	cpu := processCPU(t) - cpu0
	t.Logf("reading and forwarding 40 MiB: %v of CPU in the test process (gateway and client)", cpu)
	// Under the race detector the figure followed the machine's load (2.7 s
	// measured quiet, 9.2 s with other packages' tests beside it), which is
	// one reason the test runs without it. 0.7 to 0.85 s measured on
	// 2026-12-05 (0.12 s when the test was written); re-reading the body
	// from its start cost 4.9 s more.
	if bound := 3 * time.Second; cpu > bound {
		t.Errorf("reading and forwarding 40 MiB cost %v of CPU, want under %v", cpu, bound)
	}
	req, _ := http.NewRequest("GET", "http://"+g.Addr().String()+"/api/v1/ephemeral/pop?queue=large&autoAck=true", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Messages []struct {
			Payload string `json:"payload"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
		t.Fatalf("pop: %d %v", resp.StatusCode, err)
	}
	if len(p.Messages) != 1 || p.Messages[0].Payload != strings.Repeat("p", 40<<20) {
		t.Fatalf("pop: %d messages, not the 40 MiB payload pushed", len(p.Messages))
	}
}

// processCPU is the CPU time this process has used (user and system).
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestUnreadAnswersCountAgainstTheBound: an answer its client does not
// read, held by the gateway, counts against the in-flight bound, so that a
// body then arriving is refused 503 on its head; once the client has read
// it, bodies are admitted again.
func TestUnreadAnswersCountAgainstTheBound(t *testing.T) {
	g := startFront(t, map[string]string{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES": strconv.Itoa(64 << 20)},
		func(c *Config) { c.MaxInflightBytes = 20 << 20 })
	tok := frontToken(t, "acme", "read-write")
	body := pushOf("unread", 18<<20)
	req, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("push: %d", resp.StatusCode)
	}

	// A pop whose 18 MiB answer is not read: the client's socket takes 64 KiB.
	slow, err := net.DialTCP("tcp", nil, g.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.SetReadBuffer(64 << 10)
	if _, err := slow.Write([]byte("GET /api/v1/ephemeral/pop?queue=unread&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the unread answer counted", func() bool { return g.inflight.Load() > 12<<20 })

	small := pushOf("other", 9<<20)
	conn := dial(t, g)
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(small))) + small[:100])); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, conn, r); status != 503 || code != "ephemeral_unavailable" {
		t.Fatalf("a body while 18 MiB of answers wait unread: %d %q, want 503 ephemeral_unavailable", status, code)
	}

	// The client reads its answer: the room comes back.
	_ = slow.SetReadBuffer(4 << 20)
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	popped, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, popped.Body)
	popped.Body.Close()
	if popped.StatusCode != 200 || n < 18<<20 {
		t.Fatalf("the unread pop: %d, %d bytes", popped.StatusCode, n)
	}
	// Counted again on the next tick (on its own loop, at once).
	brokertest.Eventually(t, 10*time.Second, "the read answer's room given back", func() bool { return g.inflight.Load() == 0 })
	conn = dial(t, g)
	r = bufio.NewReader(conn)
	if _, err := conn.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(small))) + small[:100])); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(small[100:])); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, conn, r); status != 201 {
		t.Fatalf("a body once the answer was read: %d %q, want 201", status, code)
	}
}

// stalledClients counts, on each loop, the client connections stalled
// behind their unread answers.
func stalledClients(t *testing.T, g *Gateway) int {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	g.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		wg.Add(1)
		err := ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer wg.Done()
			for cc := range ls.clients {
				if cc.stalled {
					n.Add(1)
				}
			}
			return nil
		}))
		if err != nil {
			wg.Done()
		}
		return true
	})
	wg.Wait()
	return int(n.Load())
}

// TestStalledBehindUnreadAnswers: a client whose unread answers pass 1 MiB
// has its next request left unread (not forwarded) until it reads them;
// then the request is served.
func TestStalledBehindUnreadAnswers(t *testing.T) {
	g := startFront(t, map[string]string{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES": strconv.Itoa(64 << 20)}, nil)
	tok := frontToken(t, "acme", "read-write")
	req, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(pushOf("big", 18<<20)))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("push: %d", resp.StatusCode)
	}
	slow, err := net.DialTCP("tcp", nil, g.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.SetReadBuffer(64 << 10)
	if _, err := slow.Write([]byte("GET /api/v1/ephemeral/pop?queue=big&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the unread answer held", func() bool { return g.inflight.Load() > 12<<20 })
	forwarded := g.m.forwarded.Get()
	small := pushOf("after", 10)
	if _, err := slow.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(small))) + small)); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the client stalled", func() bool { return stalledClients(t, g) == 1 })
	if n := g.m.forwarded.Get(); n != forwarded {
		t.Fatalf("%d requests forwarded while the client was stalled", n-forwarded)
	}
	_ = slow.SetReadBuffer(4 << 20)
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(slow)
	popped, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, popped.Body)
	popped.Body.Close()
	if popped.StatusCode != 200 || n < 18<<20 {
		t.Fatalf("the pop: %d, %d bytes", popped.StatusCode, n)
	}
	if status, code, _ := answer(t, slow, r); status != 201 {
		t.Fatalf("the push behind the stall: %d %q, want 201", status, code)
	}
}

// TestRefusalWaitsForTheAnswersInFlight: a request refused on its head (no
// token, a 60 MiB body announced) or for its framing (a large chunked body,
// read into a buffer of its own, then a broken chunk line) behind a waiting
// pop of the same connection is answered after the pop's answer, in order,
// and the connection closes. (The broken chunk left the connection hung
// when such a request was held for the answers in flight and read again
// from its start.)
func TestRefusalWaitsForTheAnswersInFlight(t *testing.T) {
	g := startFront(t, nil, nil)
	tok := frontToken(t, "acme", "read-write")
	for _, c := range []struct {
		name, behind, later string // later: sent once the pop has parked
		status              int
		code                string
	}{
		{"no token", head("POST", "/api/v1/ephemeral/push", "", 60<<20) + strings.Repeat("x", 64<<10), "", 401, "unauthorized"},
		{"a broken chunk", "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok +
			"\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n", 100<<10, strings.Repeat("x", 100<<10)), "zz\r\n", 400, "ephemeral_bad_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			queue := "wait-" + strconv.Itoa(len(c.name))
			conn := dial(t, g)
			r := bufio.NewReader(conn)
			pop := "GET /api/v1/ephemeral/pop?queue=" + queue + "&wait=true&timeout=10000&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n"
			if _, err := conn.Write([]byte(pop + c.behind)); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 10*time.Second, "the pop parked", func() bool {
				ts, ok := g.tenants.Load("acme")
				return ok && ts.parked.Load() == 1
			})
			if c.later != "" {
				if _, err := conn.Write([]byte(c.later)); err != nil {
					t.Fatal(err)
				}
			}
			push, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(`{"queue":"`+queue+`","messages":[{"payload":1}]}`))
			push.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(push)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if status, _, _ := answer(t, conn, r); status != 200 {
				t.Fatalf("the pop: %d, want 200 first", status)
			}
			if status, code, closes := answer(t, conn, r); status != c.status || code != c.code || !closes {
				t.Fatalf("behind it: %d %q close %v, want %d %q and close", status, code, closes, c.status, c.code)
			}
			waitClosed(t, conn, r, 5*time.Second)
			brokertest.Eventually(t, 10*time.Second, "nothing reserved", func() bool { return g.inflight.Load() == 0 })
		})
	}
}

// TestExpectContinueRefusedOnItsHead: a request that asks to be invited to
// send its body (Expect: 100-continue) and that its head condemns is
// answered with the refusal, never 100 Continue, and closed.
func TestExpectContinueRefusedOnItsHead(t *testing.T) {
	g := startFront(t, nil, nil)
	conn := dial(t, g)
	r := bufio.NewReader(conn)
	h := strings.TrimSuffix(head("POST", "/api/v1/ephemeral/push", "", 1000), "\r\n") + "Expect: 100-continue\r\n\r\n"
	if _, err := conn.Write([]byte(h)); err != nil {
		t.Fatal(err)
	}
	if status, code, closes := answer(t, conn, r); status != 401 || code != "unauthorized" || !closes {
		t.Fatalf("got %d %q close %v, want 401 unauthorized and close (no 100 Continue)", status, code, closes)
	}
	waitClosed(t, conn, r, 5*time.Second)
}

// heldClients counts, on each loop, the client connections whose next
// request is held for the answers in flight.
func heldClients(t *testing.T, g *Gateway) int {
	t.Helper()
	n := 0
	onLoops(t, g, func(ls *loopState) {
		for cc := range ls.clients {
			if cc.held {
				n++
			}
		}
	})
	return n
}

// pushesOfTotal is pushes (with tok) to queue whose requests add up to
// exactly total bytes, none of whose bodies passes 64 KiB.
func pushesOfTotal(queue, tok string, total int) []string {
	over := len(pushOf(queue, 0))
	headOf := func(n int) int { return len(head("POST", "/api/v1/ephemeral/push", tok, int64(n))) }
	var out []string
	for total > 0 {
		n := min(total, 60<<10)
		if total-n > 0 && total-n < 2048 {
			n = total / 2 // leave room for a whole request after this one
		}
		// The payload's length k such that head and body are n bytes.
		for k := n - headOf(n) - over; k <= n; k++ {
			if headOf(over+k)+over+k == n {
				req := head("POST", "/api/v1/ephemeral/push", tok, int64(over+k)) + pushOf(queue, k)
				out = append(out, req)
				break
			}
		}
		total -= n
	}
	return out
}

// TestBytesQueuedBehindAWaitingPop: what a client sends behind a request
// held for its waiting pop stays unread and is bounded (docs/gateway.md,
// "The front door"): up to 64 KiB it costs nothing, past that it holds the
// bound on request bytes in flight, and past QUEEN_MAX_BODY_BYTES and
// 64 KiB the connection closes. At each bound's exact value the requests
// are served in order once the pop is answered.
func TestBytesQueuedBehindAWaitingPop(t *testing.T) {
	const maxBody = 128 << 10
	for _, c := range []struct {
		name     string
		inflight int64 // the bound on request bytes in flight
		queued   int   // bytes buffered behind the pop, the held request's included
		closes   bool
	}{
		{"64 KiB, free under a bound of 32 KiB", 32 << 10, 64 << 10, false},
		{"exactly the body limit and 64 KiB, reserved", 0, maxBody + 64<<10, false},
		{"one byte more", 0, maxBody + 64<<10 + 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startFront(t, nil, func(cfg *Config) { cfg.MaxBodyBytes, cfg.MaxInflightBytes = maxBody, c.inflight })
			tok := frontToken(t, "acme", "read-write")
			conn := dial(t, g)
			r := bufio.NewReader(conn)
			pop := "GET /api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n"
			first := "GET /health HTTP/1.1\r\nHost: gw\r\n\r\n" // answered on the gateway: held for the pop
			if _, err := conn.Write([]byte(pop + first)); err != nil {
				t.Fatal(err)
			}
			brokertest.Eventually(t, 10*time.Second, "the health read held behind the parked pop", func() bool { return heldClients(t, g) == 1 })
			rest := pushesOfTotal("q", tok, c.queued-len(first))
			if _, err := conn.Write([]byte(strings.Join(rest, ""))); err != nil {
				t.Fatal(err)
			}
			if c.closes {
				waitClosed(t, conn, r, 5*time.Second)
				brokertest.Eventually(t, 10*time.Second, "nothing reserved", func() bool { return g.inflight.Load() == 0 })
				return
			}
			if c.queued > queuedFree {
				brokertest.Eventually(t, 10*time.Second, "the queued bytes reserved", func() bool { return g.inflight.Load() == int64(c.queued) })
			}
			push, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(`{"queue":"w","messages":[{"payload":1}]}`))
			push.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(push)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if status, code, _ := answer(t, conn, r); status != 200 {
				t.Fatalf("the pop: %d %q, want 200 first", status, code)
			}
			if status, code, _ := answer(t, conn, r); status != 200 {
				t.Fatalf("the health read: %d %q, want 200", status, code)
			}
			for i := range rest {
				if status, code, _ := answer(t, conn, r); status != 201 {
					t.Fatalf("push %d behind it: %d %q, want 201", i+1, status, code)
				}
			}
			brokertest.Eventually(t, 10*time.Second, "nothing reserved", func() bool { return g.inflight.Load() == 0 })
		})
	}
}

// clientBuffers reports, for g's one client connection, whether its request
// has a buffer of its own and how many bytes gnet still holds of it.
func clientBuffers(t *testing.T, g *Gateway) (own bool, inbound int) {
	t.Helper()
	onLoops(t, g, func(ls *loopState) {
		for cc := range ls.clients {
			own, inbound = cc.big != nil, cc.c.InboundBuffered()
		}
	})
	return own, inbound
}

// TestChunkedBodyReadInPieces: a chunked body past 64 KiB is moved into a
// buffer of its own and read into it a piece at a time, chunk data or up
// to the end of the line the parser reads next, never a byte of the
// request behind it: sent with every line split between its CR and its LF
// (each piece read before the next is sent) and a push pipelined behind
// its last LF, both are served and its payload pops back whole.
func TestChunkedBodyReadInPieces(t *testing.T) {
	g := startFront(t, nil, nil)
	tok := frontToken(t, "acme", "read-write")
	body := pushOf("chunked", 150<<10)
	var b strings.Builder
	b.WriteString("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\nTransfer-Encoding: chunked\r\n\r\n")
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 40000)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	b.WriteString("0\r\n\r\n")
	after := pushOf("after", 10)
	stream := b.String() + head("POST", "/api/v1/ephemeral/push", tok, int64(len(after))) + after
	conn := dial(t, g)
	r := bufio.NewReader(conn)
	// The head and the first 100 KB: moved into the request's own buffer.
	cut := 100_000
	for stream[cut-1] != '\r' {
		cut++
	}
	if _, err := conn.Write([]byte(stream[:cut])); err != nil {
		t.Fatal(err)
	}
	for stream = stream[cut:]; ; {
		brokertest.Eventually(t, 10*time.Second, "the piece read into the request's own buffer", func() bool {
			own, inbound := clientBuffers(t, g)
			return own && inbound == 0
		})
		i := strings.IndexByte(stream[1:], '\r') // the next piece ends on a CR
		if i < 0 || strings.HasPrefix(stream[i+1:], "\r\nHost") {
			break
		}
		if _, err := conn.Write([]byte(stream[:i+2])); err != nil {
			t.Fatal(err)
		}
		stream = stream[i+2:]
	}
	// The last LF and the push behind it.
	if _, err := conn.Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"the chunked push", "the push behind it"} {
		if status, code, _ := answer(t, conn, r); status != 201 {
			t.Fatalf("%s: %d %q, want 201", what, status, code)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+g.Addr().String()+"/api/v1/ephemeral/pop?queue=chunked&autoAck=true", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Messages []struct {
			Payload string `json:"payload"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != 200 {
		t.Fatalf("pop: %d %v", resp.StatusCode, err)
	}
	if len(p.Messages) != 1 || p.Messages[0].Payload != strings.Repeat("p", 150<<10) {
		t.Fatalf("pop: %d messages, not the payload pushed", len(p.Messages))
	}
}

// TestBodyOver64KiBHasABufferOfItsOwn: a Content-Length request of up to
// 64 KiB, head and body, waits in gnet's buffer until all of it is there;
// a longer one is moved into a buffer of its own as its body arrives
// (docs/gateway.md, "The front door"). Either is served.
func TestBodyOver64KiBHasABufferOfItsOwn(t *testing.T) {
	g := startFront(t, nil, nil)
	tok := frontToken(t, "acme", "read-write")
	for _, size := range []int{bigBody, bigBody + 1} {
		n := size - len(head("POST", "/api/v1/ephemeral/push", tok, int64(size))) - len(pushOf("q", 0))
		body := pushOf("q", n)
		req := head("POST", "/api/v1/ephemeral/push", tok, int64(len(body))) + body
		if len(req) != size {
			t.Fatalf("the request is %d bytes, want %d", len(req), size)
		}
		conn := dial(t, g)
		r := bufio.NewReader(conn)
		if _, err := conn.Write([]byte(req[:size-100])); err != nil {
			t.Fatal(err)
		}
		brokertest.Eventually(t, 10*time.Second, "the body reserved", func() bool { return g.inflight.Load() == int64(size) })
		if own, _ := clientBuffers(t, g); own != (size > bigBody) {
			t.Errorf("a request of %d bytes: a buffer of its own %v, want %v", size, own, size > bigBody)
		}
		if _, err := conn.Write([]byte(req[size-100:])); err != nil {
			t.Fatal(err)
		}
		if status, code, _ := answer(t, conn, r); status != 201 {
			t.Fatalf("a request of %d bytes: %d %q, want 201", size, status, code)
		}
		conn.Close()
		brokertest.Eventually(t, 10*time.Second, "the client gone", func() bool { return g.clients.Load() == 0 })
	}
}

// A head may take QUEEN_HEADER_TIMEOUT_MS and a body QUEEN_BODY_TIMEOUT_MS:
// a connection is overdue only past them (the tick then closes it).
func TestOverdueOnlyPastTheTimeouts(t *testing.T) {
	g := &Gateway{cfg: Config{HeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second}}
	const since = int64(1e18)
	for _, c := range []struct {
		head, body bool
		after      time.Duration
		overdue    bool
	}{
		{true, false, 10 * time.Second, false},
		{true, false, 10*time.Second + 1, true},
		{false, true, 30 * time.Second, false},
		{false, true, 30*time.Second + 1, true},
		{false, false, time.Hour, false},
	} {
		cc := &clientConn{g: g}
		if c.head {
			cc.headSince = since
		}
		if c.body {
			cc.bodySince = since
		}
		if got := cc.overdue(since + int64(c.after)); got != c.overdue {
			t.Errorf("head %v, body %v, %v after: overdue %v, want %v", c.head, c.body, c.after, got, c.overdue)
		}
	}
}

// brokerAdminToken is the broker's QUEEN_ADMIN_TOKEN where a test reads its
// /metrics (brokerGauge).
const brokerAdminToken = "broker-admin-token"

// brokerGauge reads one series (no labels) of the /metrics of a broker
// started with brokerAdminToken.
func brokerGauge(t *testing.T, brokerURL, name string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", brokerURL+"/metrics", nil)
	req.Header.Set("X-Queen-Gateway-Secret", testSecret)
	req.Header.Set("Authorization", "Bearer "+brokerAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	st, body := resp.StatusCode, string(b)
	if st != 200 {
		t.Fatalf("the broker's /metrics: %d %s", st, body)
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// ownConnections counts g's client connections that have a broker
// connection of their own.
func ownConnections(t *testing.T, g *Gateway) int {
	t.Helper()
	n := 0
	onLoops(t, g, func(ls *loopState) {
		for cc := range ls.clients {
			if cc.own != nil {
				n++
			}
		}
	})
	return n
}

// TestOwnConnectionsAndThePool: over HTTP (no link), a request that may
// take long (a status read, a waiting pop) gives its client a broker
// connection of its own, a push does not; a client that leaves with
// nothing in flight gives it to the pool, where the next client that needs
// one takes it without a dial; a client that leaves with a waiting pop
// gets it closed, which ends the pop at the broker, so a message pushed
// then is not leased to the client that left (docs/gateway.md,
// "Connections to the brokers").
func TestOwnConnectionsAndThePool(t *testing.T) {
	var brokerURL string
	g := startFront(t, map[string]string{"QUEEN_ADMIN_TOKEN": brokerAdminToken}, func(c *Config) { c.NoLink, c.Loops, brokerURL = true, 1, c.Upstreams[0] })
	tok := frontToken(t, "acme", "read-write")
	send := func(c net.Conn, method, target, body string) {
		t.Helper()
		if _, err := c.Write([]byte(head(method, target, tok, int64(len(body))) + body)); err != nil {
			t.Fatal(err)
		}
	}
	push := dial(t, g)
	pr := bufio.NewReader(push)
	send(push, "POST", "/api/v1/ephemeral/push", pushOf("other", 1))
	if status, code, _ := answer(t, push, pr); status != 201 {
		t.Fatalf("a push: %d %q", status, code)
	}
	if n := ownConnections(t, g); n != 0 {
		t.Fatalf("after a push, %d clients have a connection of their own, want 0", n)
	}

	a := dial(t, g)
	ar := bufio.NewReader(a)
	send(a, "GET", "/api/v1/ephemeral/queues", "")
	if status, code, _ := answer(t, a, ar); status != 200 {
		t.Fatalf("the status read: %d %q", status, code)
	}
	if n := ownConnections(t, g); n != 1 {
		t.Fatalf("after a status read, %d clients have a connection of their own, want 1", n)
	}
	dials := g.m.dials.Get()
	a.Close()
	brokertest.Eventually(t, 10*time.Second, "the first client gone", func() bool { return g.clients.Load() == 1 })
	b := dial(t, g)
	br := bufio.NewReader(b)
	send(b, "GET", "/api/v1/ephemeral/queues", "")
	if status, code, _ := answer(t, b, br); status != 200 {
		t.Fatalf("the next status read: %d %q", status, code)
	}
	if n := g.m.dials.Get(); n != dials {
		t.Fatalf("the next client dialled %d connections, want the pooled one", n-dials)
	}

	// b's waiting pop parks at the broker; b leaves.
	send(b, "GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000&autoAck=true", "")
	brokertest.Eventually(t, 10*time.Second, "the pop parked at the broker", func() bool { return brokerGauge(t, brokerURL, "queen_ephemeral_parked_pops") == 1 })
	b.Close()
	brokertest.Eventually(t, 10*time.Second, "the pop ended at the broker", func() bool { return brokerGauge(t, brokerURL, "queen_ephemeral_parked_pops") == 0 })
	if ts := g.tenant("acme"); ts.parked.Load() != 0 {
		t.Fatalf("%d slots held after the client left", ts.parked.Load())
	}
}

// TestIdleAndGoneClients: a client with nothing in flight is closed once
// quiet for the idle timeout, one whose waiting pop is in flight is not
// (docs/gateway.md, "Accepting clients"); a client that goes away with
// answers unread gives back their room in the in-flight bound.
func TestIdleAndGoneClients(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	tok := frontToken(t, "acme", "read-write")
	waiting := dial(t, g)
	wr := bufio.NewReader(waiting)
	if _, err := waiting.Write([]byte("GET /api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the pop parked", func() bool { return g.tenant("acme").parked.Load() == 1 })
	idle := dial(t, g)
	ir := bufio.NewReader(idle)
	if _, err := idle.Write([]byte("GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := answer(t, idle, ir); status != 200 {
		t.Fatalf("health: %d", status)
	}
	waitClosed(t, idle, ir, 5*time.Second) // at the next tick
	pusher := dial(t, g)
	if _, err := pusher.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(pushOf("w", 1)))) + pushOf("w", 1))); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, waiting, wr); status != 200 {
		t.Fatalf("the waiting pop kept past the idle timeout: %d %q, want 200", status, code)
	}

	g = startFront(t, map[string]string{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES": strconv.Itoa(64 << 20)}, nil)
	req, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(pushOf("big", 8<<20)))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("push: %d", resp.StatusCode)
	}
	slow, err := net.DialTCP("tcp", nil, g.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadBuffer(64 << 10)
	if _, err := slow.Write([]byte("GET /api/v1/ephemeral/pop?queue=big&autoAck=true HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + tok + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the unread answer counted", func() bool { return g.inflight.Load() > 0 })
	slow.Close()
	brokertest.Eventually(t, 10*time.Second, "the gone client's room given back", func() bool { return g.inflight.Load() == 0 })
}

// TestRequestBehindALinkRequestWaits: a client's requests in flight are on
// one connection or link, so its answers come back in its order; a status
// read behind a waiting pop that went on the link waits for the pop's
// answer, although the client has a broker connection of its own from an
// earlier status read (docs/gateway.md, "Connections to the brokers").
func TestRequestBehindALinkRequestWaits(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.Loops = 1 })
	tok := frontToken(t, "acme", "read-write")
	c := dial(t, g)
	r := bufio.NewReader(c)
	send := func(s string) {
		t.Helper()
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() (int, string) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for deadline := time.Now().Add(10 * time.Second); g.links.Load() == 0; { // the first pushes open it
		if time.Now().After(deadline) {
			t.Fatal("the link to the broker never opened")
		}
		send(head("POST", "/api/v1/ephemeral/push", tok, int64(len(pushOf("other", 1)))) + pushOf("other", 1))
		if status, body := read(); status != 201 {
			t.Fatalf("a push: %d %s", status, body)
		}
	}
	send(head("GET", "/api/v1/ephemeral/queues", tok, 0))
	if status, body := read(); status != 200 || !strings.Contains(body, `"queues"`) {
		t.Fatalf("the status read: %d %s", status, body)
	}
	if n := ownConnections(t, g); n != 1 {
		t.Fatalf("after a status read, %d clients have a connection of their own, want 1", n)
	}
	send(head("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=500", tok, 0) + head("GET", "/api/v1/ephemeral/queues", tok, 0))
	if status, body := read(); strings.Contains(body, `"queues"`) {
		t.Fatalf("the first answer after a waiting pop and a status read is the status read's (%d %s): want the pop's first", status, body)
	}
	if status, body := read(); status != 200 || !strings.Contains(body, `"queues"`) {
		t.Fatalf("the status read behind the pop: %d %s", status, body)
	}
}

// TestWaitingPopLetGoOnTheLink: a waiting pop that went on the link to
// the broker is let go there when its client leaves (a cancel frame, as a
// closed connection's pop, D13), so no message is leased to a client that
// left; its slot comes back (docs/gateway.md, "The link to a broker").
func TestWaitingPopLetGoOnTheLink(t *testing.T) {
	var brokerURL string
	g := startFront(t, map[string]string{"QUEEN_ADMIN_TOKEN": brokerAdminToken}, func(c *Config) { c.Loops, brokerURL = 1, c.Upstreams[0] })
	tok := frontToken(t, "acme", "read-write")
	c := dial(t, g)
	r := bufio.NewReader(c)
	for deadline := time.Now().Add(10 * time.Second); g.links.Load() == 0; { // the first pushes open it
		if time.Now().After(deadline) {
			t.Fatal("the link to the broker never opened")
		}
		if _, err := c.Write([]byte(head("POST", "/api/v1/ephemeral/push", tok, int64(len(pushOf("other", 1)))) + pushOf("other", 1))); err != nil {
			t.Fatal(err)
		}
		if status, code, _ := answer(t, c, r); status != 201 {
			t.Fatalf("a push: %d %q", status, code)
		}
	}
	if _, err := c.Write([]byte(head("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000&autoAck=true", tok, 0))); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the pop parked at the broker", func() bool { return brokerGauge(t, brokerURL, "queen_ephemeral_parked_pops") == 1 })
	c.Close()
	brokertest.Eventually(t, 10*time.Second, "the pop let go at the broker", func() bool { return brokerGauge(t, brokerURL, "queen_ephemeral_parked_pops") == 0 })
	brokertest.Eventually(t, 10*time.Second, "the slot given back", func() bool { return g.tenant("acme").parked.Load() == 0 })
}
