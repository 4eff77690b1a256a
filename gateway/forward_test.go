package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// What a broker receives for a client's request (docs/gateway.md, "A
// request's way through", step 5): the method, the target as sent, Host,
// Content-Type, the body with its Content-Length (a POST or PUT always has
// one, a bodiless GET or DELETE none, RFC 9110 8.6), and the tenancy
// headers; no other header of the client.
func TestForwardedRequest(t *testing.T) {
	for _, c := range []struct {
		method, target, body string
		length               string // the Content-Length forwarded, "" for none
	}{
		{"GET", "/api/v1/ephemeral/queues?x=1", "", ""},
		{"POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`, "40"},
		{"POST", "/api/v1/ephemeral/reset", "", "0"},
		{"PUT", "/api/v1/ephemeral/x", "", "0"},
		{"DELETE", "/api/v1/ephemeral/queue/q", "", ""},
		{"DELETE", "/api/v1/ephemeral/queue/q", "{}", "2"},
	} {
		raw := c.method + " " + c.target + " HTTP/1.1\r\nHost: client.example\r\nContent-Type: application/json\r\n" +
			"Authorization: Bearer client-token\r\nX-Queen-Tenant: forged\r\nCookie: c=1\r\n"
		if c.body != "" || c.method == "POST" || c.method == "PUT" {
			raw += "Content-Length: " + strconv.Itoa(len(c.body)) + "\r\n"
		}
		raw += "\r\n" + c.body
		req, _, err := wire.NewParser(wire.Limits{}).Parse([]byte(raw))
		if err != nil || req == nil {
			t.Fatalf("%s %s: parsing the client's request: %v", c.method, c.target, err)
		}
		out := appendForward(nil, req, "broker:6632", "acme", identity.ReadWrite, "s3cret")
		fwd, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(out))))
		if err != nil {
			t.Fatalf("%s %s: the forwarded request does not parse: %v\n%s", c.method, c.target, err, out)
		}
		body, _ := io.ReadAll(fwd.Body)
		got := map[string]string{
			"method": fwd.Method, "target": fwd.RequestURI, "host": fwd.Host, "body": string(body),
			"Content-Length": fwd.Header.Get("Content-Length"), "Content-Type": fwd.Header.Get("Content-Type"),
			"X-Queen-Tenant": fwd.Header.Get("X-Queen-Tenant"), "X-Queen-Access": fwd.Header.Get("X-Queen-Access"),
			"X-Queen-Gateway-Secret": fwd.Header.Get("X-Queen-Gateway-Secret"),
			"Authorization":          fwd.Header.Get("Authorization"), "Cookie": fwd.Header.Get("Cookie"),
		}
		want := map[string]string{
			"method": c.method, "target": c.target, "host": "broker:6632", "body": c.body,
			"Content-Length": c.length, "Content-Type": "application/json",
			"X-Queen-Tenant": "acme", "X-Queen-Access": identity.ReadWrite.String(), "X-Queen-Gateway-Secret": "s3cret",
			"Authorization": "", "Cookie": "",
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s %s: %s %q, want %q", c.method, c.target, k, got[k], w)
			}
		}
		if n := len(fwd.Header.Values("Content-Length")); n > 1 {
			t.Errorf("%s %s: %d Content-Length headers", c.method, c.target, n)
		}
	}
}

// Zero durations and bounds take the documented defaults (docs/gateway.md:
// QUEEN_GATEWAY_POLL_MS 1 s, QUEEN_GATEWAY_USAGE_FLUSH_MS 5 s, the broker's
// QUEEN_MAX_BODY_BYTES, QUEEN_HEADER_TIMEOUT_MS, QUEEN_BODY_TIMEOUT_MS and
// QUEEN_MAX_INFLIGHT_BYTES; a dial 2 s, an idle client 120 s; a loop per
// GOMAXPROCS); values set are kept.
func TestConfigDefaults(t *testing.T) {
	base := Config{Upstreams: []string{"http://127.0.0.1:1"}, Secret: "s", Catalog: newMemCatalog()}
	g, err := New(base)
	if err != nil {
		t.Fatal(err)
	}
	got := g.cfg
	want := base
	want.Routes, want.Loops, want.Logger = routes.Default(), runtime.GOMAXPROCS(0), got.Logger
	want.PollInterval, want.FlushInterval, want.DialTimeout, want.IdleTimeout = time.Second, 5*time.Second, 2*time.Second, 120*time.Second
	want.MaxBodyBytes, want.HeaderTimeout, want.BodyTimeout, want.MaxInflightBytes = 64<<20, 10*time.Second, 30*time.Second, 64<<20
	if !reflect.DeepEqual(got, want) || got.Logger == nil {
		t.Errorf("defaults:\n%+v\nwant\n%+v", got, want)
	}
	set := base
	set.Loops, set.PollInterval, set.FlushInterval, set.DialTimeout, set.IdleTimeout = 3, 7, 8, 9, 10
	set.MaxBodyBytes, set.HeaderTimeout, set.BodyTimeout, set.MaxInflightBytes = 11, 12, 13, 14
	if g, err = New(set); err != nil {
		t.Fatal(err)
	}
	set.Routes, set.Logger = routes.Default(), g.cfg.Logger
	if !reflect.DeepEqual(g.cfg, set) {
		t.Errorf("values set:\n%+v\nwant them kept:\n%+v", g.cfg, set)
	}
}

// QUEEN_GATEWAY_UPSTREAMS holds base URLs http://host:port (a bare "/" path
// allowed, no other path, no query); without a port, 80.
func TestParseUpstream(t *testing.T) {
	for s, want := range map[string]upstreamAddr{
		"http://127.0.0.1:6632":  {dial: "127.0.0.1:6632", host: "127.0.0.1:6632"},
		"http://127.0.0.1:6632/": {dial: "127.0.0.1:6632", host: "127.0.0.1:6632"},
		"http://broker":          {dial: "broker:80", host: "broker"},
	} {
		if got, err := parseUpstream(s); err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"https://b:1", "http://", "http://b:1/api", "http://b:1?x=1", "b:1", "http://b:1/%zz"} {
		if got, err := parseUpstream(s); err == nil {
			t.Errorf("%s: %+v, want refused", s, got)
		}
	}
}

// Each client starts on one broker, round robin over those not passed over
// after a failed dial (until downUntil, then tried again); -1 when every
// one is passed over.
func TestPickRoundRobin(t *testing.T) {
	const now = int64(1e18)
	ls := &loopState{downUntil: make([]int64, 3)}
	var got []int
	for range 4 {
		got = append(got, ls.pick(now))
	}
	ls.downUntil[1] = now + 1
	for range 3 {
		got = append(got, ls.pick(now))
	}
	ls.downUntil[1] = now // its time is up: tried again
	got = append(got, ls.pick(now), ls.pick(now))
	ls.downUntil = []int64{now + 1, now + 1, now + 1}
	got = append(got, ls.pick(now))
	if want := []int{0, 1, 2, 0, 2, 0, 2, 0, 1, -1}; !reflect.DeepEqual(got, want) {
		t.Errorf("picked %v, want %v", got, want)
	}
}

// Shutdown stops accepting and writes the last usage; a gateway never
// started shuts down as well.
func TestShutdown(t *testing.T) {
	g, err := New(Config{Upstreams: []string{"http://127.0.0.1:1"}, Secret: "s", Catalog: newMemCatalog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutting down a gateway never started: %v", err)
	}
	cat := newMemCatalog()
	g, _ = startBehind(t, cat)
	g.tenant("default").unflushedMsgs.Store(5)
	addr := g.Addr().String()
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the gateway still accepts after Shutdown")
	}
	if u, _ := cat.UsageSince(context.Background(), 0); u["default"][catalog.Messages] != 5 {
		t.Fatalf("usage written at Shutdown: %v, want default's 5 messages", u)
	}
}

// pacedBrokers starts n fake brokers over HTTP that record each request
// (broker index, method and path) and answer a push 201 and anything else
// 200 {"queues":[]}; a push's answer is held until a request that is not
// a push arrives at any of them, or for hold at most (the brokers' pace).
func pacedBrokers(t *testing.T, n int, hold time.Duration) (urls []string, seen func() []string) {
	t.Helper()
	var mu sync.Mutex
	var log []string
	other := make(chan struct{})
	var once sync.Once
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			log = append(log, strconv.Itoa(i)+" "+r.Method+" "+r.URL.Path)
			mu.Unlock()
			if r.URL.Path != "/api/v1/ephemeral/push" {
				once.Do(func() { close(other) })
				_, _ = w.Write([]byte(`{"queues":[]}`))
				return
			}
			if hold > 0 {
				select {
				case <-other:
				case <-time.After(hold):
				}
			}
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"pushed":1}`))
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return urls, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(log)
	}
}

// Each client starts on one broker of the list, round robin, and stays on
// it while it is not passed over (docs/gateway.md, "Connections to the
// brokers"): two clients' pushes over HTTP go, each client's all, to one
// broker each.
func TestClientStaysOnItsBroker(t *testing.T) {
	urls, seen := pacedBrokers(t, 2, 0)
	g := startGatewayWith(t, urls[0], func(c *Config) { c.Upstreams, c.NoLink = urls, true })
	for range 2 {
		c := dial(t, g)
		r := bufio.NewReader(c)
		for range 4 {
			body := `{"queue":"q","messages":[{"payload":1}]}`
			if _, err := c.Write([]byte(head("POST", "/api/v1/ephemeral/push", "", int64(len(body))) + body)); err != nil {
				t.Fatal(err)
			}
			if status, code, _ := answer(t, c, r); status != 201 {
				t.Fatalf("a push: %d %q", status, code)
			}
		}
		c.Close()
	}
	// A client link's requests over HTTP likewise, each link's at one broker.
	for range 2 {
		l := dialTestLink(t, g.Addr().String())
		for range 4 {
			if typ, p := l.roundTrip(t, linkPushOf("q")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
				t.Fatalf("a push on a client link: frame %d %q", typ, p)
			}
		}
		l.nc.Close()
	}
	got := seen()
	want := []string{"0 POST /api/v1/ephemeral/push", "1 POST /api/v1/ephemeral/push"}
	if links := got[8:]; len(links) != 8 || links[0] == links[4] || !slices.Equal(links[:4], slices.Repeat(links[:1], 4)) || !slices.Equal(links[4:], slices.Repeat(links[4:5], 4)) {
		t.Fatalf("the brokers received from the client links %q; want each link's four pushes at one broker, the two links at two", links)
	}
	got = got[:8]
	if len(got) != 8 || got[0] == got[4] || !slices.Contains(want, got[0]) || !slices.Contains(want, got[4]) || !slices.Equal(got[:4], slices.Repeat(got[:1], 4)) || !slices.Equal(got[4:], slices.Repeat(got[4:5], 4)) {
		t.Fatalf("the brokers received %q; want each client's four pushes at one broker, the two clients at two", got)
	}
}

// A client's own broker connection (a status read's) goes back to the loop
// for the next client when its client leaves, up to maxIdleDedicated kept
// per broker; the others are closed. Kills upstream.go:352's
// `len(ls.idle[u.up]) > maxIdleDedicated` (one more kept).
func TestSpareOwnConnectionsBounded(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	const clients = maxIdleDedicated + 6
	conns := make([]net.Conn, clients)
	for i := range conns {
		conns[i] = dial(t, g)
		if _, err := conns[i].Write([]byte(head("GET", "/api/v1/ephemeral/queues", "", 0))); err != nil {
			t.Fatal(err)
		}
		if status, code, _ := answer(t, conns[i], bufio.NewReader(conns[i])); status != 201 {
			t.Fatalf("client %d: %d %q, want the fake broker's 201", i, status, code)
		}
	}
	if n := fb.open.Load(); n != clients {
		t.Fatalf("%d connections to the broker for %d clients each holding a status read's; want one each", n, clients)
	}
	for _, c := range conns {
		c.Close()
	}
	brokertest.Eventually(t, 10*time.Second, fmt.Sprintf("the broker connections down to the %d kept spare", maxIdleDedicated),
		func() bool { return fb.open.Load() == maxIdleDedicated })
}

// A broker that closes a client's own connection after answering (its
// answer says Connection: close) leaves the client free to go on: its next
// status read gets a connection of its own again and is answered. Kills
// upstream.go:376's `owner.own != u` (the client kept the closed
// connection, and its next request waited on it for ever).
func TestOwnConnectionClosedByTheBroker(t *testing.T) {
	var n atomic.Int32
	fb := startFakeBrokerAnswering(t, func(string) string {
		if n.Add(1) == 1 {
			return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
		}
		return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	})
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	c := dial(t, g)
	r := bufio.NewReader(c)
	for i := range 2 {
		if _, err := c.Write([]byte(head("GET", "/api/v1/ephemeral/queues", "", 0))); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if status, code, _ := answer(t, c, r); status != 200 {
			t.Fatalf("status read %d: %d %q", i+1, status, code)
		}
	}
}

// A request whose broker connection fails while it is being dialled (no
// broker listens) was never sent: it is answered 503
// ephemeral_forward_failed, on a connection that stays open, the shared
// connection's and a client's own alike. Kills upstream.go:384's
// `i <= sent` (the first request not sent taken for lost: its client's
// connection closed), which only gateway/e2e's TestBrokerRestart caught.
func TestRequestNeverSentIsForwardFailed(t *testing.T) {
	port, err := brokertest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, "http://127.0.0.1:"+strconv.Itoa(port), func(c *Config) { c.NoLink = true })
	c := dial(t, g)
	r := bufio.NewReader(c)
	body := `{"queue":"q","messages":[{"payload":1}]}`
	for _, req := range []string{head("POST", "/api/v1/ephemeral/push", "", int64(len(body))) + body, head("GET", "/api/v1/ephemeral/queues", "", 0)} {
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		if status, code, _ := answer(t, c, r); status != 503 || code != "ephemeral_forward_failed" {
			t.Fatalf("%.40q with no broker listening: %d %q, want 503 ephemeral_forward_failed", req, status, code)
		}
	}
}

// The broker connections idle for upstreamIdle are closed, shared, spare
// and a connected client's own alike, and none sooner: at the tick's own
// time nothing is (the next requests reuse every connection, the spare one
// included), at upstreamIdle + 1 s later every one is, and the client whose
// own connection went is served on a new one. Kills upstream.go:441's
// mutants (`u == nil`, `len(u.queue) != 0`, `now+u.lastUsed`,
// `now-u.lastUsed <= upstreamIdle`), which a 60 s idle time kept from any
// test.
func TestIdleBrokerConnectionsClosed(t *testing.T) {
	fb := startFakeBrokerAnswering(t, func(string) string {
		return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	})
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	body := `{"queue":"q","messages":[{"payload":1}]}`
	push := head("POST", "/api/v1/ephemeral/push", "", int64(len(body))) + body
	status := head("GET", "/api/v1/ephemeral/queues", "", 0)
	ask := func(c net.Conn, r *bufio.Reader, req string) {
		t.Helper()
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		if st, code, _ := answer(t, c, r); st != 200 {
			t.Fatalf("%.30q: %d %q", req, st, code)
		}
	}
	a, b, c := dial(t, g), dial(t, g), dial(t, g)
	ar, br, cr := bufio.NewReader(a), bufio.NewReader(b), bufio.NewReader(c)
	ask(a, ar, push)   // the shared connection
	ask(b, br, status) // b's own, b stays
	ask(c, cr, status) // c's own, spare once c leaves
	c.Close()
	spare := func() int {
		n := 0
		onLoops(t, g, func(ls *loopState) {
			for _, list := range ls.idle {
				n += len(list)
			}
		})
		return n
	}
	brokertest.Eventually(t, 10*time.Second, "c's connection given back", func() bool { return spare() == 1 })
	if n := fb.dialed.Load(); n != 3 {
		t.Fatalf("%d connections dialled, want 3", n)
	}

	closeIdle := func(now int64) { onLoops(t, g, func(ls *loopState) { ls.closeIdleUpstreams(now) }) }
	closeIdle(time.Now().UnixNano())
	d := dial(t, g)
	dr := bufio.NewReader(d)
	ask(a, ar, push)
	ask(b, br, status)
	ask(d, dr, status) // takes the spare
	if n := fb.dialed.Load(); n != 3 {
		t.Fatalf("%d connections dialled after the tick at the present; want the 3 reused, none closed", n)
	}

	closeIdle(time.Now().Add(upstreamIdle + time.Second).UnixNano())
	brokertest.Eventually(t, 10*time.Second, "every broker connection closed", func() bool { return fb.open.Load() == 0 })
	ask(b, br, status)
	if n := fb.dialed.Load(); n != 4 {
		t.Fatalf("%d connections dialled; want a fourth for b's status read", n)
	}
}

// A request that must go on another broker connection (a status read,
// which gets a connection of its own) behind a push in flight on the
// shared one waits, unread, until the push's answer is back, so the answers
// come in the client's order (docs/gateway.md, "Connections to the
// brokers"): the brokers hold the push's answer until the status read
// arrives (at most 300 ms), and the client reads the push's answer first.
func TestRequestForAnotherConnectionWaits(t *testing.T) {
	urls, seen := pacedBrokers(t, 1, 300*time.Millisecond)
	g := startGatewayWith(t, urls[0], func(c *Config) { c.NoLink = true })
	c := dial(t, g)
	r := bufio.NewReader(c)
	body := `{"queue":"q","messages":[{"payload":1}]}`
	if _, err := c.Write([]byte(head("POST", "/api/v1/ephemeral/push", "", int64(len(body))) + body + head("GET", "/api/v1/ephemeral/queues", "", 0))); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, c, r); status != 201 {
		t.Fatalf("the first answer: %d %q, want the push's 201 (the brokers received %q)", status, code, seen())
	}
	if status, code, _ := answer(t, c, r); status != 200 {
		t.Fatalf("the status read's answer: %d %q", status, code)
	}
}

// A client that leaves with a request in flight on the shared broker
// connection drops only its own answers: another client's push in flight
// on the same connection is answered (docs/gateway.md, "Connections to
// the brokers"). The broker holds the first push's answer until a status
// read from a third client arrives, sent once the second client is gone.
func TestGoneClientLeavesOthersAnswers(t *testing.T) {
	urls, seen := pacedBrokers(t, 1, 10*time.Second)
	g := startGatewayWith(t, urls[0], func(c *Config) { c.NoLink = true })
	body := `{"queue":"q","messages":[{"payload":1}]}`
	a, b := dial(t, g), dial(t, g)
	for _, c := range []net.Conn{a, b} {
		if _, err := c.Write([]byte(head("POST", "/api/v1/ephemeral/push", "", int64(len(body))) + body)); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 10*time.Second, "both pushes forwarded", func() bool { return g.m.forwarded.Get() == 2 })
	b.Close()
	brokertest.Eventually(t, 10*time.Second, "the second client gone", func() bool { return g.clients.Load() == 1 })
	c := dial(t, g)
	if _, err := c.Write([]byte(head("GET", "/api/v1/ephemeral/queues", "", 0))); err != nil {
		t.Fatal(err)
	}
	if status, code, _ := answer(t, a, bufio.NewReader(a)); status != 201 {
		t.Fatalf("the first client's push: %d %q, want 201 (the brokers received %q)", status, code, seen())
	}
}

// stalledUpstream is a broker address whose connections never complete: a
// listening socket with the smallest backlog, filled by one connection
// never accepted, so that the kernel drops the next ones' SYNs and their
// dials wait.
func stalledUpstream(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break // the backlog is full
		}
		t.Cleanup(func() { c.Close() })
		if i == 8 {
			t.Skip("the kernel accepts every connection: no dial can be held")
		}
	}
	return "http://" + addr
}

// A waiting pop's parked-consumer slot comes back when its client leaves
// while the pop's broker connection is still being dialled, over HTTP (the
// link off): the pop never reaches a broker, and nothing else would settle
// it (docs/gateway.md, "Parked consumers").
func TestSlotGivenBackWhenItsClientLeavesDuringTheDial(t *testing.T) {
	g := startGatewayWith(t, stalledUpstream(t), func(c *Config) { c.NoLink, c.DialTimeout = true, time.Minute })
	c := dial(t, g)
	if _, err := c.Write([]byte("GET /api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000 HTTP/1.1\r\nHost: gw\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	ts := g.tenant("default")
	brokertest.Eventually(t, 10*time.Second, "the pop's slot taken", func() bool { return ts.parked.Load() == 1 })
	c.Close()
	brokertest.Eventually(t, 10*time.Second, "the slot given back after its client left", func() bool { return ts.parked.Load() == 0 })
}
