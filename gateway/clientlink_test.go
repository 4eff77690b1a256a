package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	sdk "github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// A client link's request written to a broker whose connection or link
// then failed before the answer may have been served: its stream ends with
// a refuse frame "lost" (never 503 ephemeral_forward_failed, which the SDKs
// send again), the link goes on, and the SDK reports "may have applied"
// without sending the push again. Over the gateway's link to the broker
// and over HTTP, against the fake broker of lost_test.go.
func TestClientLinkLostAnswer(t *testing.T) {
	for _, overLink := range []bool{false, true} {
		name := "http"
		if overLink {
			name = "link"
		}
		t.Run(name, func(t *testing.T) {
			fb := startFakeBroker(t)
			g := startGatewayTo(t, fb.url, !overLink)
			l := dialTestLink(t, g.Addr().String())
			if overLink {
				deadline := time.Now().Add(5 * time.Second)
				for g.links.Load() == 0 { // the first pushes open it (over HTTP meanwhile)
					if time.Now().After(deadline) {
						t.Fatal("the link to the broker never opened")
					}
					if typ, p := l.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
						t.Fatalf("a push: frame %d %q, want a 201", typ, p)
					}
				}
			}
			if typ, p := l.roundTrip(t, linkPushOf("lose")); typ != link.FrameRefuse || len(p) != 1 || p[0] != link.RefuseLost {
				t.Fatalf("the push whose answer was lost: frame %d %q, want a refuse frame 'lost'", typ, p)
			}
			if n := g.m.lost.Get(); n != 1 {
				t.Fatalf("queen_gateway_answers_lost_total %d, want 1", n)
			}
			if n := g.links.Load(); overLink && n != 0 {
				t.Fatalf("queen_gateway_links %d after the link to the broker failed, want 0", n)
			}
			// The client's link goes on.
			if typ, p := l.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
				t.Fatalf("a push after the lost one: frame %d %q, want a 201", typ, p)
			}
			// And the next pushes dial a new link to the broker.
			for deadline := time.Now().Add(10 * time.Second); overLink && g.links.Load() != 1; {
				if time.Now().After(deadline) {
					t.Fatalf("no new link to the broker after the first failed: queen_gateway_links %d", g.links.Load())
				}
				if typ, p := l.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
					t.Fatalf("a push: frame %d %q, want a 201", typ, p)
				}
			}

			// The SDK: "may have applied", and the push is not sent again.
			c, err := sdk.New("http://" + g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			before := fb.lost.Load()
			_, err = c.Push(context.Background(), "lose", []any{1}, sdk.PushOptions{})
			if err == nil || !strings.Contains(err.Error(), "may have applied") {
				t.Fatalf("the SDK's push whose answer was lost: %v, want 'may have applied'", err)
			}
			if n := fb.lost.Load() - before; n != 1 {
				t.Fatalf("the broker received the SDK's lost push %d times, want once", n)
			}
			// A second link of the SDK's may still be upgrading (its view
			// read dials one beside the push's), and a connection counts as
			// an HTTP client until its 101 is written; one that the SDK used
			// for HTTP would stay, pooled for its next call.
			for deadline := time.Now().Add(5 * time.Second); g.clients.Load() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d HTTP client connections: the SDK did not use a link", g.clients.Load())
				}
			}
		})
	}
}

// startGatewayWith is startGatewayTo with set changing the config first.
func startGatewayWith(t testing.TB, upstream string, set func(*Config)) *Gateway {
	t.Helper()
	cat := newMemCatalog()
	_ = cat.PutPlan(context.Background(), catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}})
	_ = cat.PutTenant(context.Background(), catalog.Tenant{Name: "default", Plan: "pro"})
	auth, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: "127.0.0.1:0", Upstreams: []string{upstream}, Secret: testSecret, Auth: auth, Catalog: cat,
		PollInterval: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond, Loops: 1}
	set(&cfg)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g
}

// testLink is a client link spoken frame by frame (docs/link.md).
type testLink struct {
	nc   net.Conn
	br   *bufio.Reader
	next uint64
}

// dialTestLink opens a client link to addr (with a bearer token, when one
// is given).
func dialTestLink(t *testing.T, addr string, token ...string) *testLink {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	auth := ""
	for _, tok := range token {
		auth = "Authorization: Bearer " + tok + "\r\n"
	}
	if _, err := io.WriteString(nc, "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: g\r\n"+auth+"Connection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v, want 101", resp, err)
	}
	return &testLink{nc: nc, br: br}
}

func linkPushOf(queue string) *link.Request {
	return &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"),
		Body: []byte(`{"queue":"` + queue + `","messages":[{"payload":1}]}`)}
}

// roundTrip sends rq on a new stream and reads the frame that ends it.
func (l *testLink) roundTrip(t *testing.T, rq *link.Request) (byte, []byte) {
	t.Helper()
	id := l.next
	l.next++
	b, _ := link.AppendRequest(nil, id, rq)
	if _, err := l.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = l.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, link.HeaderLen)
	if _, err := io.ReadFull(l.br, hdr); err != nil {
		t.Fatalf("stream %d: %v", id, err)
	}
	typ, got, n := link.ParseHeader(hdr)
	p := make([]byte, n)
	if _, err := io.ReadFull(l.br, p); err != nil {
		t.Fatal(err)
	}
	if got != id {
		t.Fatalf("a frame of stream %d, want %d", got, id)
	}
	return typ, p
}

// A request frame over the body limit is answered as HTTP answers such a
// body (400 ephemeral_bad_request) and the link goes on, up to a frame of
// exactly the limit and its head room; a frame one byte longer closes the
// link (a protocol error), as does one naming a tenant.
func TestClientLinkFrameBounds(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink, c.MaxBodyBytes = true, 1<<10 })
	l := dialTestLink(t, g.Addr().String())
	big := &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"), Body: make([]byte, 2<<10)}
	if typ, p := l.roundTrip(t, big); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 400") || !strings.Contains(string(p), `"code":"ephemeral_bad_request"`) {
		t.Fatalf("a body over the limit: frame %d %q, want 400 ephemeral_bad_request", typ, p)
	}
	if typ, p := l.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("a push after it: frame %d %q, want a 201", typ, p)
	}
	atLimit := linkPushOf("keep")
	atLimit.Body = []byte(`{"queue":"keep","messages":[{"payload":"` + strings.Repeat("x", 1<<10-len(`{"queue":"keep","messages":[{"payload":""}]}`)) + `"}]}`)
	if typ, p := l.roundTrip(t, atLimit); len(atLimit.Body) != 1<<10 || typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("a body of exactly the limit (%d bytes): frame %d %q, want a 201", len(atLimit.Body), typ, p)
	}
	// A frame of exactly the limit and its head room is read whole, not
	// taken for a protocol error: its body, over the body limit, is
	// refused as over HTTP, and the link goes on.
	whole := &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push")}
	whole.Body = make([]byte, 1<<10+linkHeadRoom-whole.EncodedLen())
	if typ, p := l.roundTrip(t, whole); whole.EncodedLen() != 1<<10+linkHeadRoom || typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 400") {
		t.Fatalf("a frame of exactly the frame limit (%d bytes): frame %d %q, want a 400", whole.EncodedLen(), typ, p)
	}
	if typ, p := l.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("a push after the frame of exactly the limit: frame %d %q, want a 201", typ, p)
	}
	for _, what := range []string{"over the frame limit", "naming a tenant"} {
		l := dialTestLink(t, g.Addr().String())
		var b []byte
		if what == "naming a tenant" {
			rq := linkPushOf("keep")
			rq.Tenant = []byte("other")
			b, _ = link.AppendRequest(nil, 0, rq)
		} else {
			b = link.AppendHeader(nil, link.FrameRequest, 0, 1<<10+linkHeadRoom+1)
		}
		if _, err := l.nc.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = l.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := l.br.Read(make([]byte, 64)); err != io.EOF {
			t.Fatalf("a frame %s: read %d bytes, %v; want the link closed", what, n, err)
		}
	}
}

// A link that sends nothing for the idle timeout is closed; one that pings
// is kept.
func TestClientLinkIdle(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink, c.IdleTimeout = true, 1500*time.Millisecond })
	quiet := dialTestLink(t, g.Addr().String())
	pinging := dialTestLink(t, g.Addr().String())
	ping := link.AppendHeader(nil, link.FramePing, 0, 0)
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := pinging.nc.Write(ping); err != nil {
			t.Fatal(err)
		}
		hdr := make([]byte, link.HeaderLen)
		_ = pinging.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(pinging.br, hdr); err != nil || hdr[4] != link.FramePong {
			t.Fatalf("the pinging link: %v (frame %d), want a pong", err, hdr[4])
		}
		time.Sleep(200 * time.Millisecond) // the client's pace, not a wait for a state
	}
	_ = quiet.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := quiet.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the quiet link after the idle timeout: %v, want it closed", err)
	}
	if n := g.clientLinks.Load(); n != 1 {
		t.Fatalf("queen_gateway_client_links %d, want 1 (the pinging link)", n)
	}
}

// A client that sends requests on its link and never reads their answers
// holds at most the broker's hard bound of unread answers at the gateway
// (8 MiB, with the answers already waiting): the link is closed then, and
// what it held is given back. 100 pushes answered 512 KiB each, sent in one
// write (all read before any answer comes), would otherwise hold 50 MiB.
func TestClientLinkSlowReader(t *testing.T) {
	const answerSize = 512 << 10
	g := startGatewayWith(t, bigAnswerBroker(t, answerSize), func(c *Config) { c.NoLink = true })
	l := dialTestLink(t, g.Addr().String())
	for deadline := time.Now().Add(5 * time.Second); g.clientLinks.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the link is never counted") // counted just after the 101 is written
		}
	}
	var frames []byte
	for i := range 100 {
		frames, _ = link.AppendRequest(frames, uint64(i), linkPushOf("q"))
	}
	if _, err := l.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	peak := int64(0)
	deadline := time.Now().Add(30 * time.Second)
	for g.clientLinks.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the link that does not read is still open after 30 s, the gateway holding %d bytes of it", g.inflight.Load())
		}
		peak = max(peak, g.inflight.Load())
		time.Sleep(time.Millisecond) // sampling what the gateway holds
	}
	if limit := int64(linkOutboundHard + 2*answerSize); peak > limit {
		t.Fatalf("the gateway held %d bytes of unread answers, want at most %d", peak, limit)
	}
	deadline = time.Now().Add(10 * time.Second)
	for g.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the link closed the gateway still counts %d bytes in flight", g.inflight.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// silentBroker answers requests over HTTP with a 201 and accepts the
// gateway link's upgrade, but never answers a frame on it: whatever is
// forwarded on the link stays in flight.
func startSilentBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if strings.HasPrefix(req.Header.Get("Upgrade"), "queen-link") {
						_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n")
						_, _ = io.Copy(io.Discard, r) // frames, never answered
						return
					}
					if _, err := io.WriteString(c, fakePushAnswer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A link holds at most maxLinkStreams requests in flight: one more is
// refused with a refuse frame "busy" (nothing done), and once one of them
// ends (here: a cancelled waiting pop) the next is taken.
func TestClientLinkBusy(t *testing.T) {
	g := startGatewayWith(t, startSilentBroker(t), func(*Config) {})
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	for deadline := time.Now().Add(10 * time.Second); g.links.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the link to the broker never opened")
		}
		// Opens the link (over HTTP meanwhile); one that goes on the link
		// is never answered, which does not matter here.
		if resp, err := hc.Post("http://"+g.Addr().String()+"/api/v1/ephemeral/push", "application/json", strings.NewReader(`{"queue":"w","messages":[{"payload":1}]}`)); err == nil {
			resp.Body.Close()
		}
	}
	l := dialTestLink(t, g.Addr().String())
	pop := &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=q&wait=true&timeout=60000")}
	var frames []byte
	for id := range uint64(maxLinkStreams) {
		frames, _ = link.AppendRequest(frames, id, pop)
	}
	frames, _ = link.AppendRequest(frames, maxLinkStreams, pop) // one too many
	if _, err := l.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	typ, id, p := l.readFrame(t)
	if typ != link.FrameRefuse || id != maxLinkStreams || len(p) != 1 || p[0] != link.RefuseBusy {
		t.Fatalf("the request past the bound: frame %d of stream %d %q, want a refuse frame 'busy' of stream %d", typ, id, p, maxLinkStreams)
	}
	// A cancel lets one go: the next request is taken (no refusal before
	// the pong that follows it).
	next, _ := link.AppendRequest(link.AppendHeader(nil, link.FrameCancel, 0, 0), maxLinkStreams+1, pop)
	if _, err := l.nc.Write(link.AppendHeader(next, link.FramePing, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if typ, id, p := l.readFrame(t); typ != link.FramePong {
		t.Fatalf("after a cancel: frame %d of stream %d %q, want the pong (the request taken)", typ, id, p)
	}
	// The cancelled pop's parked-consumer slot came back, the next took one.
	if n := g.tenant("default").parked.Load(); n != maxLinkStreams {
		t.Fatalf("%d slots held after a cancel and one more pop, want %d", n, maxLinkStreams)
	}
}

// readFrame reads one frame, within 10 s.
func (l *testLink) readFrame(t *testing.T) (byte, uint64, []byte) {
	t.Helper()
	_ = l.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, link.HeaderLen)
	if _, err := io.ReadFull(l.br, hdr); err != nil {
		t.Fatal(err)
	}
	typ, id, n := link.ParseHeader(hdr)
	p := make([]byte, n)
	if _, err := io.ReadFull(l.br, p); err != nil {
		t.Fatal(err)
	}
	return typ, id, p
}

// A request frame past queuedFree that arrives in pieces holds its length
// of the bound on request bytes in flight while it arrives, and gives it
// back once it is read, and when its link closes (docs/gateway.md, the
// bound on request bytes in flight).
func TestClientLinkFrameInPiecesHoldsItsLength(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	l := dialTestLink(t, g.Addr().String())
	rq := linkPushOf("q")
	rq.Body = []byte(`{"queue":"q","messages":[{"payload":"` + strings.Repeat("x", 100<<10) + `"}]}`)
	b, _ := link.AppendRequest(nil, 0, rq)
	if _, err := l.nc.Write(b[:1<<10]); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the frame's length held", func() bool { return g.inflight.Load() == int64(len(b)) })
	if _, err := l.nc.Write(b[1<<10:]); err != nil {
		t.Fatal(err)
	}
	if typ, _, p := l.readFrame(t); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("the push: frame %d %q, want a 201", typ, p)
	}
	brokertest.Eventually(t, 10*time.Second, "the frame's hold given back once read", func() bool { return g.inflight.Load() == 0 })

	// Cut short: given back when the link closes.
	l = dialTestLink(t, g.Addr().String())
	if _, err := l.nc.Write(b[:1<<10]); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the frame's length held", func() bool { return g.inflight.Load() == int64(len(b)) })
	l.nc.Close()
	brokertest.Eventually(t, 10*time.Second, "the frame's hold given back when its link closed", func() bool { return g.inflight.Load() == 0 })
}

// A frame still arriving holds its length of QUEEN_MAX_INFLIGHT_BYTES once
// it passes 64 KiB, not before (docs/gateway.md, "Client links",
// "Bounds"): with a bound of 64 KiB, a frame of exactly 64 KiB arriving in
// pieces is served; one byte more does not fit, and is answered 503
// ephemeral_unavailable on its stream and the link closed.
func TestClientLinkFrameArrivingPast64KiB(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink, c.MaxInflightBytes = true, queuedFree })
	frameOf := func(n int) []byte {
		rq := linkPushOf("q")
		for pad := n; ; pad-- {
			rq.Body = []byte(`{"queue":"q","messages":[{"payload":"` + strings.Repeat("x", pad) + `"}]}`)
			b, _ := link.AppendRequest(nil, 0, rq)
			if len(b)-link.HeaderLen == n {
				return b
			}
		}
	}
	for _, n := range []int{queuedFree, queuedFree + 1} {
		l := dialTestLink(t, g.Addr().String())
		b := frameOf(n)
		if _, err := l.nc.Write(b[:1<<10]); err != nil {
			t.Fatal(err)
		}
		if n == queuedFree {
			if _, err := l.nc.Write(b[1<<10:]); err != nil {
				t.Fatal(err)
			}
			if typ, _, p := l.readFrame(t); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
				t.Fatalf("a frame of exactly 64 KiB: frame %d %q, want the push's 201", typ, p)
			}
			continue
		}
		if typ, _, p := l.readFrame(t); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 503") || !strings.Contains(string(p), `"code":"ephemeral_unavailable"`) {
			t.Fatalf("a frame of 64 KiB + 1 past the bound: frame %d %q, want 503 ephemeral_unavailable", typ, p)
		}
		l.wantEOF(t)
	}
}

// A frame that stops arriving is cut at QUEEN_BODY_TIMEOUT_MS: its link is
// closed, and what it held is given back (docs/gateway.md, "Client
// links", "Bounds").
func TestClientLinkFrameStalledClosedByTheBodyTimeout(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink, c.BodyTimeout = true, 300*time.Millisecond })
	l := dialTestLink(t, g.Addr().String())
	b, _ := link.AppendRequest(nil, 0, linkPushOf("q"))
	if _, err := l.nc.Write(b[:link.HeaderLen+4]); err != nil { // its whole header, then 4 bytes
		t.Fatal(err)
	}
	_ = l.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := l.br.Read(make([]byte, 64)); err != io.EOF {
		t.Fatalf("the link whose frame stopped arriving: read %d bytes, %v; want it closed", n, err)
	}
	brokertest.Eventually(t, 10*time.Second, "what the link held given back", func() bool { return g.inflight.Load() == 0 })
}

// Frames sent behind the upgrade, in the same write, are read at once, and
// the link goes on.
func TestClientLinkFramesBehindTheUpgrade(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	nc, err := net.Dial("tcp", g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	frames, _ := link.AppendRequest(nil, 0, linkPushOf("q"))
	if _, err := nc.Write(append([]byte("GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"), frames...)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v, want 101", resp, err)
	}
	l := &testLink{nc: nc, br: br, next: 1}
	if typ, id, p := l.readFrame(t); typ != link.FrameAnswer || id != 0 || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("the push behind the upgrade: frame %d of stream %d %q, want its 201", typ, id, p)
	}
	if typ, p := l.roundTrip(t, linkPushOf("q")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("a push after it: frame %d %q, want a 201", typ, p)
	}
}

// On the tick, a client link is closed for what the docs name and nothing
// else (docs/gateway.md, "Client links"): a frame arriving in pieces within
// QUEEN_BODY_TIMEOUT_MS is not cut, and a link whose token expired is kept
// while it carries a call, up to the longest pop wait and 10 s after exp:
// its waiting pop, parked before exp, is served after two ticks past exp.
func TestClientLinkKeptAcrossTicks(t *testing.T) {
	g := startFront(t, nil, func(c *Config) { c.Loops = 1 })
	tok := frontToken(t, "acme", "read-write")
	exp := time.Now().Unix() + 2
	soon, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "front", "tenant": "acme", "role": "read-write", "exp": exp}).SignedString([]byte(frontJWTSecret))
	if err != nil {
		t.Fatal(err)
	}
	arriving := dialTestLink(t, g.Addr().String(), tok)
	frame, _ := link.AppendRequest(nil, 0, linkPushOf("q"))
	if _, err := arriving.nc.Write(frame[:link.HeaderLen+4]); err != nil {
		t.Fatal(err)
	}
	expiring := dialTestLink(t, g.Addr().String(), soon)
	pop, _ := link.AppendRequest(nil, 0, &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=exp&wait=true&timeout=30000&autoAck=true")})
	if _, err := expiring.nc.Write(pop); err != nil {
		t.Fatal(err)
	}
	expiring.next = 1
	brokertest.Eventually(t, 10*time.Second, "the pop parked", func() bool { return g.tenant("acme").parked.Load() == 1 })
	brokertest.Eventually(t, 10*time.Second, "the token's exp passed", func() bool { return time.Now().Unix() >= exp })
	if typ, p := expiring.roundTrip(t, linkPushOf("q")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 401") {
		t.Fatalf("a request after exp: frame %d %q, want 401", typ, p)
	}
	for range 2 { // two ticks: the links are tended in each
		now := g.now.Load()
		brokertest.Eventually(t, 10*time.Second, "a tick", func() bool { return g.now.Load() > now })
	}
	if _, err := arriving.nc.Write(frame[link.HeaderLen+4:]); err != nil {
		t.Fatal(err)
	}
	if typ, _, p := arriving.readFrame(t); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("the frame that arrived across ticks: frame %d %q, want the push's 201", typ, p)
	}
	pusher := dialTestLink(t, g.Addr().String(), tok)
	if typ, p := pusher.roundTrip(t, linkPushOf("exp")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("the push for the waiting pop: frame %d %q", typ, p)
	}
	if typ, id, p := expiring.readFrame(t); typ != link.FrameAnswer || id != 0 || !strings.HasPrefix(string(p), "HTTP/1.1 200") {
		t.Fatalf("the pop parked before exp: frame %d of stream %d %q, want its 200", typ, id, p)
	}
	// Carrying nothing now, it is closed at the next tick.
	_ = expiring.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := expiring.br.Read(make([]byte, 64)); err != io.EOF {
		t.Fatalf("the expired link once it carries nothing: read %d bytes, %v; want it closed", n, err)
	}
}

// A client link that leaves answers unread holds them at the gateway,
// counted against the bound on bytes in flight; past 1 MiB its next
// frames wait, and it stalls, but it is not closed while its unread
// answers stay under 8 MiB and it has been stalled for less than 10 s
// (docs/gateway.md, "Client links", "Bounds"): the client reads them all
// after two ticks, then the pong of the frame that waited.
func TestClientLinkUnreadAnswersUnderTheHardBound(t *testing.T) {
	const answerSize, answers = 512 << 10, 14 // 7 MiB
	g := startGatewayWith(t, bigAnswerBroker(t, answerSize), func(c *Config) { c.NoLink = true })
	l := dialSlowLink(t, g)
	nc := l.nc
	var frames []byte
	for i := range answers {
		frames, _ = link.AppendRequest(frames, uint64(i), linkPushOf("q"))
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	// The kernel's buffers take up to about 4 MiB: the gateway holds the rest.
	brokertest.Eventually(t, 10*time.Second, "the unread answers counted", func() bool { return g.inflight.Load() > outboundSoft })
	if _, err := nc.Write(link.AppendHeader(nil, link.FramePing, 0, 0)); err != nil { // waits: the link stalls
		t.Fatal(err)
	}
	for range 2 { // two ticks: the links are tended in each
		now := g.now.Load()
		brokertest.Eventually(t, 10*time.Second, "a tick", func() bool { return g.now.Load() > now })
	}
	for i := range answers {
		if typ, _, p := l.readFrame(t); typ != link.FrameAnswer || len(p) < answerSize {
			t.Fatalf("answer %d: frame %d of %d bytes, want a whole answer", i, typ, len(p))
		}
	}
	if typ, _, _ := l.readFrame(t); typ != link.FramePong {
		t.Fatalf("after the answers: frame %d, want the pong", typ)
	}
}

// A request a client link sends over HTTP that gets a broker connection of
// its own (a status read) gives it back to the pool when answered: the next
// one takes it without a dial (docs/gateway.md, "Connections to the
// brokers").
func TestClientLinkOwnConnectionPooled(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(c *Config) { c.NoLink = true })
	l := dialTestLink(t, g.Addr().String())
	status := &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/queues")}
	if typ, p := l.roundTrip(t, status); typ != link.FrameAnswer {
		t.Fatalf("a status read: frame %d %q", typ, p)
	}
	dials := g.m.dials.Get()
	if typ, p := l.roundTrip(t, status); typ != link.FrameAnswer {
		t.Fatalf("the next status read: frame %d %q", typ, p)
	}
	if n := g.m.dials.Get() - dials; n != 0 {
		t.Fatalf("the next status read dialled %d connections, want the pooled one", n)
	}
}

// A client link's push, pop and ack go on the loop's link to the broker,
// anything else (a status read) over HTTP (docs/gateway.md, "Client
// links").
func TestClientLinkWhatGoesOnTheBrokerLink(t *testing.T) {
	fb := startFakeBroker(t)
	g := startGatewayWith(t, fb.url, func(*Config) {})
	l := dialTestLink(t, g.Addr().String())
	for deadline := time.Now().Add(10 * time.Second); g.links.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the link to the broker never opened")
		}
		if typ, p := l.roundTrip(t, linkPushOf("warm")); typ != link.FrameAnswer { // opens it (over HTTP meanwhile)
			t.Fatalf("a push: frame %d %q", typ, p)
		}
	}
	n := len(fb.requests())
	for _, rq := range []*link.Request{
		linkPushOf("q"),
		{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=q")},
		{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/ack"), Body: []byte(`{"queue":"q","acks":[{"id":"e:1:Default:0"}]}`)},
		{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/queues")},
	} {
		if typ, p := l.roundTrip(t, rq); typ != link.FrameAnswer {
			t.Fatalf("%s %s: frame %d %q", rq.Method, rq.Target, typ, p)
		}
	}
	want := []string{"link POST /api/v1/ephemeral/push", "link GET /api/v1/ephemeral/pop", "link POST /api/v1/ephemeral/ack", "http GET /api/v1/ephemeral/queues"}
	got := slices.DeleteFunc(fb.requests()[n:], func(s string) bool { return s == "http GET "+cellViewPath }) // the gateway's view reads
	if !slices.Equal(got, want) {
		t.Fatalf("the broker received %q, want %q", got, want)
	}
}

// bigAnswerBroker is a broker over HTTP answering every request 201 with a
// body of size bytes.
func bigAnswerBroker(t *testing.T, size int) string {
	t.Helper()
	answer := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n" + strings.Repeat("x", size)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// dialSlowLink opens a client link whose socket receives into a 64 KiB
// buffer, so that what it leaves unread is held at the gateway.
func dialSlowLink(t *testing.T, g *Gateway) *testLink {
	t.Helper()
	nc, err := net.DialTCP("tcp", nil, g.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetReadBuffer(64 << 10)
	if _, err := io.WriteString(nc, "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v, want 101", resp, err)
	}
	return &testLink{nc: nc, br: br}
}

// What a stalled client link sends meanwhile waits unread in the gateway,
// holding its length of the bound on request bytes in flight once past
// queuedFree, up to a frame's worth and queuedFree more: exactly that much
// is held and the link kept; one byte more closes it (docs/gateway.md,
// "Client links", "Bounds").
func TestStalledClientLinkHoldsWhatItSends(t *testing.T) {
	const answerSize, answers = 512 << 10, 14 // 7 MiB of answers the client never reads
	g := startGatewayWith(t, bigAnswerBroker(t, answerSize), func(c *Config) { c.NoLink, c.MaxBodyBytes = true, 1<<10 })
	l := dialSlowLink(t, g)
	var frames []byte
	for i := range answers {
		frames, _ = link.AppendRequest(frames, uint64(i), linkPushOf("q"))
	}
	if _, err := l.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	// The link, as its loop sees it: the answers it has not written yet
	// (the kernel's buffers take up to about 4 MiB; the gateway holds the
	// rest) and what it holds of the bound for what it sent.
	state := func() (links int, unwritten, held int64) {
		onLoops(t, g, func(ls *loopState) {
			for cl := range ls.clientLinks {
				links++
				unwritten, held = int64(cl.c.OutboundBuffered()), cl.reserved
			}
		})
		return
	}
	brokertest.Eventually(t, 10*time.Second, "the link stalled", func() bool {
		_, unwritten, _ := state()
		return unwritten > outboundSoft
	})
	bound := int64(1<<10+linkHeadRoom) + link.HeaderLen + queuedFree
	if _, err := l.nc.Write(make([]byte, bound)); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "what the stalled link sent held, the link kept", func() bool {
		links, _, held := state()
		return links == 1 && held == bound
	})
	if _, err := l.nc.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the link closed one byte past the bound", func() bool { return g.clientLinks.Load() == 0 })
}

// One answer larger than 8 MiB, alone, is given whole to a client link
// that reads it slowly: a link is closed past 8 MiB of unread answers only
// with answers already waiting (docs/gateway.md, "Client links",
// "Bounds").
func TestClientLinkOneAnswerPast8MiB(t *testing.T) {
	const answerSize = 16 << 20
	g := startGatewayWith(t, bigAnswerBroker(t, answerSize), func(c *Config) { c.NoLink = true })
	l := dialSlowLink(t, g)
	b, _ := link.AppendRequest(nil, 0, linkPushOf("q"))
	if _, err := l.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 10*time.Second, "the unread answer held", func() bool { return g.inflight.Load() > 8<<20 })
	if typ, _, p := l.readFrame(t); typ != link.FrameAnswer || len(p) < answerSize {
		t.Fatalf("the answer: frame %d of %d bytes, want it whole", typ, len(p))
	}
}
