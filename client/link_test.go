package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// The SDK on links (link.go, linkcall.go): against the real broker, and
// against fakes for the refusals and failures a broker cannot be made to
// give on cue.

// Request/reply under concurrency rides at most linksPerURL connections
// per client: the broker counts the links, and no HTTP connection of the
// clients'.
func TestLinkRequestReplySharesTwoConnections(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	requester, responder := newClient(t, b.URL()), newClient(t, b.URL())
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- responder.Serve(ctx, "rpc", ServeOptions{}, func(_ context.Context, m Message) (any, error) {
			env, err := ParseRequest(m)
			return env.Payload, err
		})
	}()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				want := fmt.Sprint(i*100 + j)
				m, err := requester.Request(ctx, "rpc", want, RequestOptions{Timeout: 20 * time.Second})
				if err != nil || string(m.Payload) != `"`+want+`"` {
					failed.Add(1)
					t.Errorf("request %s: %v %s", want, err, m.Payload)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	links := brokerGauge(t, b, "queen_ephemeral_client_links")
	conns := brokerGauge(t, b, "queen_ephemeral_connections") // the metrics read's own
	if links < 1 || links > 2*linksPerURL || conns > 1 {
		t.Fatalf("%v links and %v connections for two clients, want at most %d links and no connection", links, conns, 2*linksPerURL)
	}
	cancel()
	<-served
}

// A waiting pop whose caller gives up is let go on the broker at once: the
// link stays, and nothing is parked there any more.
func TestLinkCancelledPopLeavesNothingParked(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	// Without the view read, which would ride the second link: the link
	// count below is the pop's alone.
	c := newClient(t, b.URL(), withoutCellView())
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.Pop(ctx, "idle", PopOptions{Wait: true, Timeout: 30 * time.Second})
		done <- err
	}()
	brokertest.Eventually(t, 10*time.Second, "the pop parked", func() bool { return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled pop: %v, want context.Canceled", err)
	}
	brokertest.Eventually(t, 10*time.Second, "the pop let go", func() bool { return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 0 })
	if n := brokerGauge(t, b, "queen_ephemeral_client_links"); n != 1 {
		t.Fatalf("%v links after a cancel, want the one kept", n)
	}
	// A pop whose timeout passes on the broker answers empty, as over HTTP.
	res, err := c.Pop(testCtx(t), "idle", PopOptions{Wait: true, Timeout: 50 * time.Millisecond})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("a pop that waits out its timeout: %+v %v", res, err)
	}
}

// oldBroker answers the upgrade as a broker without links would (404
// not_found), and every other request with a push's answer.
func oldBroker(t *testing.T, upgrades *atomic.Int32) *fakeServer {
	return startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if strings.HasSuffix(req.target, "/link") {
				upgrades.Add(1)
				io.WriteString(nc, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 48\r\n\r\n"+`{"error":"no such route","code":"not_found"}    `)
				continue
			}
			io.WriteString(nc, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n"+`{"queue":"q","pushed":1}   `)
		}
	})
}

// A broker that refuses the upgrade is spoken to over HTTP from then on:
// the upgrade is tried once per URL, not once per call.
func TestLinkFallsBackToHTTPAndRemembers(t *testing.T) {
	t.Parallel()
	var upgrades atomic.Int32
	f := oldBroker(t, &upgrades)
	c := newClient(t, f.URL())
	for i := range 5 {
		if res, err := c.Push(testCtx(t), "q", []any{i}, PushOptions{}); err != nil || res.Pushed != 1 {
			t.Fatalf("push %d: %+v %v", i, res, err)
		}
	}
	if n := upgrades.Load(); n != 1 {
		t.Fatalf("%d upgrades asked for, want 1", n)
	}
	ep := c.eps[0].(*linkEndpoint)
	if wait := time.Until(time.Unix(0, ep.retryAt.Load())); wait <= refusedFor || wait > unsupportedFor {
		t.Fatalf("after a 404 upgrade: the link is tried again in %v; want after %v (an identity refusal's wait), within %v", wait, refusedFor, unsupportedFor)
	}
	// A minute later the upgrade is tried once more (the broker behind
	// the URL may have been upgraded meanwhile).
	ep.retryAt.Store(time.Now().UnixNano())
	if _, err := c.Push(testCtx(t), "q", []any{"later"}, PushOptions{}); err != nil || upgrades.Load() != 2 {
		t.Fatalf("after the wait: %v, %d upgrades asked for, want 2", err, upgrades.Load())
	}
	// WithHTTPOnly never asks.
	upgrades.Store(0)
	h := newHTTPClient(t, f.URL())
	if _, err := h.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil || upgrades.Load() != 0 {
		t.Fatalf("WithHTTPOnly: %v, %d upgrades", err, upgrades.Load())
	}
}

// An upgrade refused for the identity is not "links unsupported": the call
// is answered the route's own refusal (over HTTP), and later calls try the
// link again.
func TestLinkUpgradeIdentityRefusal(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "link-test-secret"})
	c := newClient(t, b.URL(), WithToken("not-a-jwt"))
	_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
	wantCode(t, "a push with a bad token", err, 401, CodeUnauthorized)
	ep := c.eps[0].(*linkEndpoint)
	if wait := time.Until(time.Unix(0, ep.retryAt.Load())); wait <= 0 || wait > refusedFor {
		t.Fatalf("after a 401 upgrade: the link is tried again in %v; want within %v", wait, refusedFor)
	}
}

// A call on a link that is never answered ends at its timeout as one that
// may have been applied (its frame was written), and one whose context is
// cancelled meanwhile ends with the context's error alone.
func TestLinkCallUnansweredEndsByItsBound(t *testing.T) {
	t.Parallel()
	f := linkServer(t, func(net.Conn, uint64, *link.Request) {}) // reads, never answers
	c := newClient(t, f.URL(), WithTimeout(300*time.Millisecond))
	_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
	var ce *connError
	if !errors.As(err, &ce) || !ce.maybeApplied || !errors.Is(err, errLinkTimeout) {
		t.Fatalf("a push never answered: %v, want the call's timeout, maybe applied", err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: 10 * time.Second})
	if !errors.Is(err, context.Canceled) || errors.As(err, &ce) {
		t.Fatalf("a waiting pop cancelled: %v, want context.Canceled alone", err)
	}

	// WithTimeout(0) is no bound: an answer 100 ms late is taken.
	late := linkServer(t, func(nc net.Conn, id uint64, _ *link.Request) {
		time.Sleep(100 * time.Millisecond)
		a := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n" + `{"pushed":1}`
		_, _ = nc.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(a)), a...))
	})
	c = newClient(t, late.URL(), WithTimeout(0))
	if res, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil || res.Pushed != 1 {
		t.Fatalf("a push answered late under WithTimeout(0): %+v %v", res, err)
	}
}

// parseAnswer reads an answer frame's HTTP answer: status, Retry-After and
// the body, whose Content-Length (when given) must be the bytes the frame
// holds after the head; a header is read whichever line it is on.
func TestParseAnswerFrame(t *testing.T) {
	for _, tc := range []struct {
		name, in   string
		status     int
		retryAfter string
		body       string
		err        bool
	}{
		{"framed", "HTTP/1.1 201 Created\r\nContent-Length: 12\r\n\r\n{\"pushed\":1}", 201, "", `{"pushed":1}`, false},
		{"no Content-Length", "HTTP/1.1 200 OK\r\nX: y\r\n\r\nall", 200, "", "all", false},
		{"Retry-After last", "HTTP/1.1 503 Busy\r\nContent-Length: 2\r\nRetry-After: 7\r\n\r\n{}", 503, "7", "{}", false},
		{"a line ended by a bare LF", "HTTP/1.1 503 Busy\r\nRetry-After: 7\nContent-Length: 2\r\n\r\n{}", 503, "7", "{}", false},
		{"Retry-After first", "HTTP/1.1 503 Busy\r\nretry-after:  3 \r\nContent-Length: 2\r\n\r\n{}", 503, "3", "{}", false},
		{"Content-Length 0 and a body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n{}", 0, "", "", true},
		{"Content-Length over the frame", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}", 0, "", "", true},
		{"Content-Length under the frame, last", "HTTP/1.1 200 OK\r\nX: y\r\nContent-Length: 1\r\n\r\n{}", 0, "", "", true},
		{"a bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 0, "", "", true},
		{"no head's end", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", 0, "", "", true},
		{"not HTTP", "HTTP/2.0 200 OK\r\n\r\n", 0, "", "", true},
		{"a status with a letter", "HTTP/1.1 2x0 OK\r\n\r\n", 0, "", "", true},
	} {
		a, body, err := parseAnswer([]byte(tc.in), nil)
		if tc.err {
			if !errors.Is(err, errFraming) {
				t.Errorf("%s: %v, want a framing error", tc.name, err)
			}
			continue
		}
		if err != nil || a.status != tc.status || a.retryAfter != tc.retryAfter || string(body) != tc.body {
			t.Errorf("%s: %d %q %q %v; want %d %q %q", tc.name, a.status, a.retryAfter, body, err, tc.status, tc.retryAfter, tc.body)
		}
	}
}

// linkServer is a fake broker that upgrades and then hands each request
// frame to answer, which writes what it likes on the link.
func linkServer(t *testing.T, answer func(nc net.Conn, id uint64, r *link.Request)) *fakeServer {
	return startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err != nil {
			return
		}
		serveLinkRequests(nc, br, func(id uint64, r *link.Request) bool {
			answer(nc, id, r)
			return true
		})
	})
}

// readLinkFrame reads one whole frame, as a test's broker end of a link.
func readLinkFrame(r io.Reader) (typ byte, id uint64, p []byte, err error) {
	var h [link.HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	typ, id, n := link.ParseHeader(h[:])
	p = make([]byte, n)
	_, err = io.ReadFull(r, p)
	return typ, id, p, err
}

// serveLinkRequests answers an upgrade with 101 and hands each request
// frame that follows to each (other frames skipped), until the link ends,
// a frame does not decode or each answers false.
func serveLinkRequests(nc net.Conn, br *bufio.Reader, each func(id uint64, r *link.Request) bool) {
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: queen-link/1\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		return
	}
	for {
		typ, id, p, err := readLinkFrame(br)
		if err != nil {
			return
		}
		if typ != link.FrameRequest {
			continue
		}
		var r link.Request
		if link.DecodeRequest(p, &r) != nil || !each(id, &r) {
			return
		}
	}
}

// A push whose link fails after its frame was written is reported as
// maybe applied, and never sent again (on this link or another); a
// listing, safe to repeat, is sent again and answered.
func TestLinkLostAnswerIsNeverRepeated(t *testing.T) {
	t.Parallel()
	var pushes, listings atomic.Int32
	f := linkServer(t, func(nc net.Conn, id uint64, r *link.Request) {
		switch {
		case strings.HasSuffix(string(r.Target), "/push"):
			pushes.Add(1)
			nc.Close() // the broker died with the push in hand
		case strings.HasSuffix(string(r.Target), "/queues"):
			if listings.Add(1) == 1 {
				nc.Close()
				return
			}
			ans := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n" + `{"queues":[],"totalCount":0,"cellBytes":0}   `
			nc.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(ans)), ans...))
		}
	})
	c := newClient(t, f.URL())
	_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
	if err == nil || !strings.Contains(err.Error(), "may have applied") {
		t.Fatalf("the push whose answer was lost: %v, want 'may have applied'", err)
	}
	if n := pushes.Load(); n != 1 {
		t.Fatalf("the push reached the broker %d times, want once", n)
	}
	if _, err := c.Queues(testCtx(t)); err != nil || listings.Load() != 2 {
		t.Fatalf("the listing: %v after %d sends, want answered on the second", err, listings.Load())
	}
}

// A stream refused "busy" was not served: it is sent again after a pause.
func TestLinkBusyIsSentAgain(t *testing.T) {
	t.Parallel()
	var pushes atomic.Int32
	f := linkServer(t, func(nc net.Conn, id uint64, r *link.Request) {
		if pushes.Add(1) == 1 {
			nc.Write(append(link.AppendHeader(nil, link.FrameRefuse, id, 1), link.RefuseBusy))
			return
		}
		ans := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 24\r\n\r\n" + `{"queue":"q","pushed":1}`
		nc.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(ans)), ans...))
	})
	c := newClient(t, f.URL())
	if res, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil || res.Pushed != 1 {
		t.Fatalf("push after a busy refusal: %+v %v", res, err)
	}
	if n := pushes.Load(); n != 2 {
		t.Fatalf("%d sends, want 2", n)
	}
}

// The system routes are not the family's: they go over HTTP even when
// links are on.
func TestLinkSystemRoutesGoOverHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_ADMIN_TOKEN": "admin-secret"})
	// Without the view read, which would ride the second link: the
	// count below is the push's alone.
	c := newClient(t, b.URL(), WithToken("admin-secret"), withoutCellView())
	if _, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetGrant(testCtx(t), Grant{Tenant: "acme", MaxQueues: 5}); err != nil {
		t.Fatalf("a grant: %v", err)
	}
	ep := c.eps[0].(*linkEndpoint)
	open := 0
	for i := range ep.slots {
		if m := ep.slots[i].mux; m != nil && m.Err() == nil {
			open++
		}
	}
	if open != 1 || ep.retryAt.Load() != 0 {
		t.Fatalf("%d links open (retry at %d): the push did not ride a link", open, ep.retryAt.Load())
	}
}

// kill -9 of the broker with pushes in flight on links: every push either
// succeeded or failed, none hangs, and a counting proxy between the client
// and the broker sees each push frame exactly once (a push whose answer
// was lost is reported, never sent again).
func TestLinkBrokerKilledMidFlight(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	var frames sync.Map // target → count of request frames seen for it
	proxy := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		up, err := net.Dial("tcp", b.Addr())
		if err != nil {
			return
		}
		defer up.Close()
		go func() { io.Copy(nc, up); nc.Close() }()
		req, err := readRequest(br) // the upgrade, passed on as it came
		if err != nil {
			return
		}
		fmt.Fprintf(up, "%s %s HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n", req.method, req.target)
		for {
			typ, id, p, err := readLinkFrame(br)
			if err != nil {
				return
			}
			if typ == link.FrameRequest {
				var r link.Request
				if link.DecodeRequest(p, &r) == nil && strings.HasSuffix(string(r.Target), "/push") {
					// Each push carries its own number: count by body.
					v, _ := frames.LoadOrStore(string(r.Body), new(atomic.Int32))
					v.(*atomic.Int32).Add(1)
				}
			}
			if _, err := up.Write(append(link.AppendHeader(nil, typ, id, len(p)), p...)); err != nil {
				return
			}
		}
	})
	c := newClient(t, proxy.URL(), WithTimeout(10*time.Second))
	var ok, lost, other atomic.Int32
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := c.Push(context.Background(), "q", []any{g*100000 + i}, PushOptions{})
				switch {
				case err == nil:
					ok.Add(1)
					if ok.Load() > 200 {
						once.Do(func() { close(started) })
					}
					continue
				case strings.Contains(err.Error(), "may have applied"):
					lost.Add(1)
				default:
					other.Add(1)
				}
				return
			}
		}()
	}
	<-started
	b.Kill()
	wg.Wait()
	frames.Range(func(k, v any) bool {
		if n := v.(*atomic.Int32).Load(); n != 1 {
			t.Errorf("push %s sent %d times", k, n)
		}
		return true
	})
	t.Logf("%d pushes answered, %d lost (may have applied), %d failed otherwise", ok.Load(), lost.Load(), other.Load())
	if lost.Load()+other.Load() != 8 {
		t.Fatalf("%d of 8 pushers ended", lost.Load()+other.Load())
	}
}

// An https:// URL: TLS, then the same upgrade; the calls ride the link
// through a TLS-terminating proxy that passes bytes on.
func TestLinkOverTLS(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // for its certificate and client trust; its listener is replaced
	cert := srv.TLS.Certificates[0]
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	srv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				up, err := net.Dial("tcp", b.Addr())
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, nc)
				io.Copy(nc, up)
			}()
		}
	}()
	c := newClient(t, "https://"+ln.Addr().String())
	ep := c.eps[0].(*linkEndpoint)
	ep.tls.RootCAs = roots
	ep.tls.ServerName = "example.com" // the test certificate's name
	if _, err := c.Push(testCtx(t), "tls", []any{"over tls"}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Pop(testCtx(t), "tls", PopOptions{Wait: true, Timeout: time.Second, AutoAck: true})
	if err != nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != `"over tls"` {
		t.Fatalf("pop over TLS: %+v %v", res, err)
	}
	if n := brokerGauge(t, b, "queen_ephemeral_client_links"); n < 1 || ep.retryAt.Load() != 0 {
		t.Fatalf("%v links (retry at %d): the calls did not ride a link", n, ep.retryAt.Load())
	}
}

// A server that accepts and never answers the upgrade costs a call no more
// than its timeout, as over HTTP: the upgrade is bounded by it.
func TestLinkSilentServerBoundedByTheCallTimeout(t *testing.T) {
	t.Parallel()
	silent := brokertest.SilentServer(t)
	c := newClient(t, "http://"+silent, WithTimeout(300*time.Millisecond))
	start := time.Now()
	_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("push to a silent server: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("took %v: the upgrade was not bounded by the call's 300 ms", d)
	}
}
