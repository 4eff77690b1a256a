package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// startConfigured starts a server with cfg (Addr, Engine and Store are
// filled in) on one loop.
func startConfigured(t *testing.T, cfg Config) *testServer {
	t.Helper()
	st := openStore(t)
	cfg.Loops = 1
	return serve(t, engine.New(engine.Config{}), st, cfg)
}

type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawClient) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// answer reads one answer within 5 s and returns its status and body.
func (r *rawClient) answer() (int, string, bool) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.t.Fatalf("reading an answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), resp.Close
}

// wantRefusal reads an answer and requires status, code and Connection:
// close, then the connection closed.
func (r *rawClient) wantRefusal(status int, code string) {
	r.t.Helper()
	st, body, closing := r.answer()
	if st != status || !strings.Contains(body, `"code":"`+code+`"`) || !closing {
		r.t.Fatalf("got %d %s (close %v), want %d %s and Connection: close", st, body, closing, status, code)
	}
	r.wantEOF(3 * time.Second)
}

func (r *rawClient) wantEOF(d time.Duration) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	n, err := r.br.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatalf("want the connection closed within %v; read %d bytes, err %v", d, n, err)
	}
}

func postHead(n int, extra ...string) string {
	h := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\nContent-Length: " + strconv.Itoa(n) + "\r\n"
	for _, x := range extra {
		h += x + "\r\n"
	}
	return h + "\r\n"
}

// A body that the bound on request bytes in flight cannot hold is refused
// on its head with 503 ephemeral_unavailable and the connection closed; the
// bound is shared by connections and given back when a body is served.
func TestInflightBoundRefusesOnTheHead(t *testing.T) {
	ts := startConfigured(t, Config{MaxInflightBytes: 1 << 20})

	alone := dialRaw(t, ts.addr)
	alone.send(postHead(2<<20) + "{")
	alone.wantRefusal(503, "ephemeral_unavailable")

	holder := dialRaw(t, ts.addr)
	holder.send(postHead(600<<10) + strings.Repeat("x", 1000)) // holds 600 KiB of the bound
	waitFor(t, 10*time.Second, "the held body's reservation", func() bool { return ts.s.inflight.Load() >= 600<<10 })
	second := dialRaw(t, ts.addr)
	second.send(postHead(600 << 10))
	second.wantRefusal(503, "ephemeral_unavailable")

	holder.send(strings.Repeat("x", 600<<10-1000)) // not JSON: 400, the connection stays
	if st, body, _ := holder.answer(); st != 400 || !strings.Contains(body, `"code":"ephemeral_bad_request"`) {
		t.Fatalf("the held body: %d %s", st, body)
	}
	third := dialRaw(t, ts.addr)
	third.send(postHead(600<<10) + strings.Repeat("x", 600<<10))
	if st, _, _ := third.answer(); st != 400 {
		t.Fatalf("after the first body was served, another of the same size: %d, want 400 (its shape)", st)
	}
	if n := ts.s.inflight.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved after every body was served", n)
	}
}

// A body that stops arriving closes its connection after the body timeout,
// from the one-second tick.
func TestBodyTimeoutClosesATricklingBody(t *testing.T) {
	ts := startConfigured(t, Config{BodyTimeout: 500 * time.Millisecond, HeaderTimeout: time.Hour})
	for _, size := range []int{1000, 1 << 20} { // waiting in gnet's buffer, and in a buffer of its own
		r := dialRaw(t, ts.addr)
		r.send(postHead(size) + "x")
		r.wantEOF(4 * time.Second)
	}
	if n := ts.s.inflight.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved after the connections closed", n)
	}
}

// In jwt mode a large body without a valid credential is refused on its
// head (401) before it is read, with Expect: 100-continue too (no 100).
func TestIdentityCheckedBeforeALargeBody(t *testing.T) {
	auth, err := identity.New(identity.Config{Mode: identity.ModeJWT, JWTSecret: []byte("s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	ts := startConfigured(t, Config{Auth: auth})
	for _, extra := range [][]string{nil, {"Expect: 100-continue"}, {"Authorization: Bearer not.a.token"}} {
		r := dialRaw(t, ts.addr)
		r.send(postHead(8<<20, extra...)) // no body is sent
		r.wantRefusal(401, "unauthorized")
	}
	// A small body announced with Expect: 100-continue is refused instead
	// of being invited.
	r0 := dialRaw(t, ts.addr)
	r0.send(postHead(100, "Expect: 100-continue"))
	r0.wantRefusal(401, "unauthorized")
	// A small body is read whole and answered by the route, as before.
	r := dialRaw(t, ts.addr)
	r.send(postHead(2) + "{}")
	if st, body, _ := r.answer(); st != 401 {
		t.Fatalf("small body without credential: %d %s", st, body)
	}
}

// A client that pipelines requests and reads none of its answers stops
// being served once its unsent answers pass the soft limit; the loop keeps
// serving other connections; reading resumes it; staying over for longer
// than allowed closes it.
func TestUnreadAnswersStopServing(t *testing.T) {
	ts := startConfigured(t, Config{OutboundSoft: 64 << 10, OutboundSoftTime: 3 * time.Second})
	// 100 queues with long names: each listing is some 20 KB.
	for i := range 100 {
		code, body := ts.do(t, "POST", "/api/v1/ephemeral/configure", fmt.Sprintf(`{"queue":"q%03d-%s"}`, i, strings.Repeat("n", 100)))
		if code != 201 {
			t.Fatalf("configure: %d %s", code, body)
		}
	}
	const n = 2000 // 40 MB of answers: more than the kernel's socket buffers
	listing := "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: t\r\n\r\n"
	greedy := dialRaw(t, ts.addr)
	greedy.send(strings.Repeat(listing, n))
	waitFor(t, 20*time.Second, "the greedy client stopped being served", func() bool { return ts.s.nThrottled.Load() == 1 })

	if code, _ := ts.do(t, "GET", "/health", ""); code != 200 {
		t.Fatalf("health: %d", code)
	}
	served := listingsServed(ts.s)
	if served >= n/2 {
		t.Fatalf("%d of %d listings served to a client that reads none; want it stopped near the soft limit", served, n)
	}
	// Reading resumes it (from the tick): every answer arrives, in order.
	for i := range n {
		if st, _, _ := greedy.answer(); st != 200 {
			t.Fatalf("answer %d: %d", i, st)
		}
	}
	waitFor(t, 20*time.Second, "the client that read everything served again", func() bool { return ts.s.nThrottled.Load() == 0 })
	// The same again, never read: closed after OutboundSoftTime (3 s), not
	// before. Reading would resume it, so the close is watched on the
	// server (stopped, then no longer counted) before the client reads.
	greedy.send(strings.Repeat(listing, n))
	waitFor(t, 20*time.Second, "the greedy client stopped again", func() bool { return ts.s.nThrottled.Load() == 1 })
	stopped := time.Now()
	waitFor(t, 3*time.Second+20*time.Second, "the stopped client closed", func() bool { return ts.s.nThrottled.Load() == 0 })
	// The rule's time is 3 s, judged on the server's clock, which moves
	// once a tick (1 s): closed 2 s after it stopped at the earliest, and
	// this test saw the stop a little late.
	if d := time.Since(stopped); d < time.Second {
		t.Fatalf("a client stopped for its unread answers was closed after %v; want OutboundSoftTime (3 s)", d)
	}
	_ = greedy.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, greedy.br); err != nil {
		t.Fatalf("a client over the soft limit for longer than allowed was not closed: %v", err)
	}
}

// listingsServed reads the count of the queues route's latency histogram.
func listingsServed(s *Server) int {
	for _, line := range strings.Split(string(s.appendMetrics(nil)), "\n") {
		if rest, ok := strings.CutPrefix(line, `queen_ephemeral_request_duration_seconds_count{route="queues"} `); ok {
			v, _ := strconv.Atoi(rest)
			return v
		}
	}
	return 0
}

// Bodies read into their own buffer (over 64 KiB) or waited for in gnet's
// (up to 64 KiB) are served whole and in order with the requests pipelined
// behind them, however the bytes are split.
func TestBodiesArrivingInPiecesServedInOrder(t *testing.T) {
	ts := startConfigured(t, Config{})
	push := func(q string, n int) string {
		body := `{"queue":"` + q + `","messages":[{"payload":"` + strings.Repeat("p", n) + `"}]}`
		return "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	chunked := func(q string, n, chunk int, trailer string) string {
		body := `{"queue":"` + q + `","messages":[{"payload":"` + strings.Repeat("c", n) + `"}]}`
		var b strings.Builder
		b.WriteString("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
		for off := 0; off < len(body); off += chunk {
			part := body[off:min(off+chunk, len(body))]
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(part), part)
		}
		b.WriteString("0\r\n" + trailer + "\r\n")
		return b.String()
	}
	stream := push("big", 300<<10) + "GET /health HTTP/1.1\r\nHost: t\r\n\r\n" + push("mid", 30<<10) + push("small", 10) +
		push("big", 100<<10) + "GET /api/v1/ephemeral/queues/big/depth HTTP/1.1\r\nHost: t\r\n\r\n" +
		chunked("chunky", 200<<10, 8000, "") + chunked("chunky", 150<<10, 70000, "X-Trailer: 1\r\n") + chunked("chunky", 100, 7, "") +
		"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
	for _, piece := range []int{1000, 7919, 65536, 200000} {
		r := dialRaw(t, ts.addr)
		for off := 0; off < len(stream); off += piece {
			r.send(stream[off:min(off+piece, len(stream))])
			time.Sleep(time.Millisecond)
		}
		for i, want := range []int{201, 200, 201, 201, 201, 200, 201, 201, 201, 200} {
			if st, body, _ := r.answer(); st != want {
				t.Fatalf("pieces of %d: answer %d: %d %s, want %d", piece, i, st, body, want)
			}
		}
	}
	if n := ts.s.inflight.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved", n)
	}
}

// Requests queued behind a parked pop hold the bound on request bytes in
// flight past their first 64 KiB, so many busy connections cannot each
// queue MaxPipelined: one whose queue the bound cannot hold is closed, its
// hold given back; a short queue costs nothing and is served in order.
func TestQueuedBehindABusyRequestHoldsTheBound(t *testing.T) {
	ts := startConfigured(t, Config{MaxInflightBytes: 1 << 20})
	pop := "GET /api/v1/ephemeral/pop?queue=q&wait=true&timeout=10000 HTTP/1.1\r\nHost: t\r\n\r\n"

	short := dialRaw(t, ts.addr)
	short.send(pop + "GET /health HTTP/1.1\r\nHost: t\r\n\r\n")

	long := dialRaw(t, ts.addr)
	long.send(pop)
	if !eventually(func() bool { return parkedPops(ts.e) == 2 }) {
		t.Fatal("the two pops did not park")
	}
	filler := postHead(1<<20) + strings.Repeat("x", 1<<20) // 1 MiB behind the parked pop
	go func() { _, _ = io.WriteString(long.c, filler) }()
	long.wantEOF(5 * time.Second)
	if !eventually(func() bool { return ts.s.inflight.Load() == 0 }) {
		t.Fatalf("%d bytes still held after the connection closed", ts.s.inflight.Load())
	}

	if st, _ := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`); st != 201 {
		t.Fatalf("push: %d", st)
	}
	if st, body, _ := short.answer(); st != 200 || !strings.Contains(body, `"payload":1`) {
		t.Fatalf("the parked pop: %d %s", st, body)
	}
	if st, _, _ := short.answer(); st != 200 {
		t.Fatalf("the request queued behind it: %d", st)
	}
}

// parkedPops counts the pops parked in e, every tenant.
func parkedPops(e *engine.Engine) int64 {
	var n int64
	e.TenantGauges(func(_ string, _ int64, _, _ int, parked int64) { n += parked })
	return n
}
