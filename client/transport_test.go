package client

// The transport's failure paths (docs/sdk-transport.md, "Go client"):
// against the real broker where it can produce the condition, against a
// scripted server on a real TCP listener where it cannot.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// fakeServer is a scripted HTTP/1.1 server: serve runs for each accepted
// connection. It counts connections.
type fakeServer struct {
	ln    net.Listener
	conns atomic.Int32
}

func startFake(t *testing.T, serve func(n int, nc net.Conn, br *bufio.Reader)) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{ln: ln}
	fakeURLs.Store(f.URL(), true)
	t.Cleanup(func() { fakeURLs.Delete(f.URL()) })
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(f.conns.Add(1))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				serve(n, nc, bufio.NewReader(nc))
			}()
		}
	}()
	return f
}

func (f *fakeServer) URL() string { return "http://" + f.ln.Addr().String() }

// fakeURLs holds the URLs of the fake servers running: a client made on
// one by newClient reads no cell view (withoutCellView), as the fakes
// script every request they answer and count them.
var fakeURLs sync.Map

// withoutCellView keeps a client from reading the cell's view (owner.go),
// for the fake servers, which script every request.
func withoutCellView() Option { return func(c *Client) { c.cell.watching.Store(true) } }

// fakeRequest is one request read by a fake server.
type fakeRequest struct {
	method, target string
	header         http.Header
	body           []byte
}

func readRequest(br *bufio.Reader) (*fakeRequest, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	return &fakeRequest{method: req.Method, target: req.RequestURI, header: req.Header, body: body}, nil
}

// response renders a 2xx/4xx answer with a Content-Length body.
func response(status int, extra, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), extra, len(body), body)
}

// TestResponseSplitAcrossSegments: answers written one byte per TCP segment
// (Content-Length and chunked), to calls pipelined on one connection.
func TestResponseSplitAcrossSegments(t *testing.T) {
	t.Parallel()
	listing := `{"queues":[{"queue":"a","tier":"implicit","depth":1}],"count":1,"cellBytes":10}`
	var chunked strings.Builder
	chunked.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	for i := 0; i < len(listing); i += 7 {
		part := listing[i:min(i+7, len(listing))]
		fmt.Fprintf(&chunked, "%x;ext=1\r\n%s\r\n", len(part), part)
	}
	chunked.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		_ = nc.(*net.TCPConn).SetNoDelay(true)
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			var ans string
			switch {
			case strings.HasPrefix(req.target, "/api/v1/ephemeral/push"):
				ans = "HTTP/1.1 100 Continue\r\n\r\n" + response(201, "", `{"pushed":1}`)
			case strings.HasPrefix(req.target, "/api/v1/ephemeral/reset"):
				// A proxy's bodiless answer: no framing header, no close.
				ans = "HTTP/1.1 204 No Content\r\n\r\n"
			case strings.HasPrefix(req.target, "/api/v1/ephemeral/pop"):
				ans = response(200, "X-Extra: yes\r\n", `{"queue":"q","messages":[{"id":"e:1:P:1","partition":"P","attempts":2,"payload":{"s":"]}\"{["}}]}`)
			default:
				ans = chunked.String()
			}
			for i := range len(ans) {
				if _, err := nc.Write([]byte{ans[i]}); err != nil {
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i >= 30 {
				// Read as an answer without body (so the connection's
				// framing holds for the calls behind it), which the reset
				// then fails to decode.
				if _, err := c.Reset(ctx, "q"); err == nil || !strings.Contains(err.Error(), "decoding the answer") {
					errs <- fmt.Errorf("reset answered 204: %v", err)
				}
				return
			}
			switch i % 3 {
			case 0:
				res, err := c.Push(ctx, "q", []any{i}, PushOptions{})
				if err != nil || res.Pushed != 1 {
					errs <- fmt.Errorf("push: %+v %v", res, err)
				}
			case 1:
				res, err := c.Pop(ctx, "q", PopOptions{})
				if err != nil || len(res.Messages) != 1 || res.Messages[0].ID != "e:1:P:1" || res.Messages[0].Attempts != 2 || string(res.Messages[0].Payload) != `{"s":"]}\"{["}` {
					errs <- fmt.Errorf("pop: %+v %v", res, err)
				}
			default:
				res, err := c.Queues(ctx)
				if err != nil || res.Count != 1 || len(res.Queues) != 1 || res.Queues[0].Queue != "a" || res.CellBytes != 10 {
					errs <- fmt.Errorf("queues: %+v %v", res, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A pipelined connection that dies with several pushes in flight fails
// each of them once, as a call that may have been applied, and sends none
// again.
func TestPipelinedConnectionDiesWithCallsInFlight(t *testing.T) {
	t.Parallel()
	const n = 8
	var read atomic.Int32
	all := make(chan struct{})
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		go func() {
			select { // every connection dies once all the pushes were read, none answered
			case <-all:
			case <-time.After(10 * time.Second):
			}
			_ = nc.Close()
		}()
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			if read.Add(1) == n {
				close(all)
			}
		}
	})
	c := newHTTPClient(t, f.URL())
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err == nil || !strings.Contains(err.Error(), "may have applied") {
			t.Fatalf("a push whose connection died unanswered: %v, want one that may have been applied", err)
		}
	}
	if read.Load() != n {
		t.Fatalf("the server read %d pushes, want %d (each once)", read.Load(), n)
	}
	t.Logf("%d requests read on %d connections", read.Load(), f.conns.Load())
}

// TestConnectionCloseFromServer: the scripted server answers the first
// request of each connection with "Connection: close" and closes it,
// ignoring whatever was pipelined behind: those calls, which the server
// never read, are sent again on a fresh connection, pushes included.
func TestConnectionCloseFromServer(t *testing.T) {
	t.Parallel()
	var served atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err != nil {
			return
		}
		served.Add(1)
		time.Sleep(2 * time.Millisecond) // let more calls pile up behind it
		_, _ = io.WriteString(nc, response(201, "Connection: close\r\n", `{"pushed":1}`))
		// A lingering close, as servers do: closing with unread requests
		// would reset the connection and could destroy the answer.
		_ = nc.(*net.TCPConn).CloseWrite()
		_ = nc.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, br)
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := c.Push(ctx, "q", []any{1}, PushOptions{}); err != nil || res.Pushed != 1 {
				failed.Add(1)
				t.Errorf("push: %+v %v", res, err)
			}
		}()
	}
	wg.Wait()
	if served.Load() != 12 {
		t.Fatalf("the server applied %d pushes, want 12 (once each)", served.Load())
	}
	t.Logf("%d connections for 12 pushes", f.conns.Load())
}

// TestConnectionCloseFromBroker: the real broker closes the connection after
// refusing a body over QUEEN_MAX_BODY_BYTES; the client reports the 400 and
// the next calls go through.
func TestConnectionCloseFromBroker(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_MAX_BODY_BYTES": "4096"})
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	_, err := c.Push(ctx, "q", []any{strings.Repeat("x", 8000)}, PushOptions{})
	wantCode(t, "a body over the broker's bound", err, 400, CodeBadRequest)
	// Over a link, one longer than a frame may be too (the bound and 64 KiB).
	_, err = c.Push(ctx, "q", []any{strings.Repeat("x", 100<<10)}, PushOptions{})
	wantCode(t, "a body over the link's frame limit", err, 400, CodeBadRequest)
	for i := range 3 {
		if res, err := c.Push(ctx, "q", []any{i}, PushOptions{}); err != nil || res.Pushed != 1 {
			t.Fatalf("push %d after the close: %+v %v", i, res, err)
		}
	}
	if d, err := c.Depth(ctx, "q", DepthOptions{}); err != nil || d.Pending != 3 {
		t.Fatalf("depth: %+v %v", d, err)
	}
}

// TestSlowServer: a large answer trickled in small pieces is read whole; a
// trickle that outlasts WithTimeout fails with a timeout, never a hang.
func TestSlowServer(t *testing.T) {
	t.Parallel()
	payload := `"` + strings.Repeat("y", 256<<10) + `"`
	body := `{"queue":"q","messages":[{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":` + payload + `}]}`
	ans := response(200, "", body)
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			for i := 0; i < len(ans); i += 16 << 10 {
				if _, err := io.WriteString(nc, ans[i:min(i+16<<10, len(ans))]); err != nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	ctx := testCtx(t)
	c := newHTTPClient(t, f.URL())
	res, err := c.Pop(ctx, "q", PopOptions{})
	if err != nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != payload {
		t.Fatalf("trickled pop: %v", err)
	}
	short := newHTTPClient(t, f.URL(), WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err = short.Pop(ctx, "q", PopOptions{})
	// The rule is a time, WithTimeout's 50 ms; 10 s is a loaded machine's
	// margin (a trickle that kept the call alive would end by success).
	if err == nil || !isTimeout(err) || time.Since(start) > 50*time.Millisecond+10*time.Second {
		t.Fatalf("a trickle past the timeout: %v after %v", err, time.Since(start))
	}
	// The connection that timed out was dropped: the next call works.
	short2 := newHTTPClient(t, f.URL(), WithTimeout(5*time.Second))
	if _, err := short2.Pop(ctx, "q", PopOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionResetDuringParkedPop: the server resets the connection (RST)
// under a parked pop: the pop fails at once with a transport error (not an
// *Error), the request is not repeated, and the next pop works.
func TestConnectionResetDuringParkedPop(t *testing.T) {
	t.Parallel()
	var pops atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if pops.Add(1) == 1 {
				time.Sleep(100 * time.Millisecond) // parked
				_ = nc.(*net.TCPConn).SetLinger(0)
				return // close with linger 0: RST
			}
			_ = req
			_, _ = io.WriteString(nc, response(200, "", `{"queue":"q","messages":[]}`))
		}
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	start := time.Now()
	_, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: 20 * time.Second})
	// At once, not at the pop's 20 s timeout: the bound is the timeout.
	if err == nil || CodeOf(err) != "" || time.Since(start) >= 20*time.Second {
		t.Fatalf("pop under a reset: %v after %v", err, time.Since(start))
	}
	if !strings.Contains(err.Error(), "may have applied") {
		t.Fatalf("the error does not say the pop may have been applied: %v", err)
	}
	if pops.Load() != 1 {
		t.Fatalf("the pop was sent %d times, want once", pops.Load())
	}
	res, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: time.Second})
	if err != nil || len(res.Messages) != 0 {
		t.Fatalf("pop after the reset: %+v %v", res, err)
	}
}

// TestBrokerRestartedMidRequest: the broker is killed under a parked pop,
// a parked Request and a pipelined push: each fails promptly with an
// error; once the broker is back on the same port the same client works,
// its idle connections to the old process detected and dropped.
func TestBrokerRestartedMidRequest(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	// Warm connections of both kinds: three exclusive ones, so one stays
	// at rest across the restart (the parked pop and Request take two).
	if _, err := c.Push(ctx, "q", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	var warm sync.WaitGroup
	for range 3 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if _, err := c.Pop(ctx, "warm", PopOptions{Wait: true, Timeout: 100 * time.Millisecond}); err != nil {
				t.Error(err)
			}
		}()
	}
	warm.Wait()
	warmed := time.Now() // the idle connection rests from here
	errs := make(chan error, 2)
	go func() {
		_, err := c.Pop(ctx, "empty", PopOptions{Wait: true, Timeout: 20 * time.Second})
		errs <- err
	}()
	go func() {
		_, err := c.Request(ctx, "nobody", 1, RequestOptions{Timeout: 20 * time.Second})
		errs <- err
	}()
	awaitCond(t, 20*time.Second, "the pop and the Request's pop parked at the broker", func() bool {
		return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 2
	})
	start := time.Now()
	b.Kill()
	for range 2 {
		select {
		case err := <-errs:
			if err == nil || CodeOf(err) != "" || errors.Is(err, ErrRequestTimeout) {
				t.Fatalf("a parked call under a killed broker answered %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a parked call hung after the broker died")
		}
	}
	t.Logf("parked calls failed %v after the kill", time.Since(start))
	b.StartOn(t, b.Port())
	// Only a connection that rested checkAfter is checked before it is
	// leased again (pool.go: a younger one fails its call as a call in
	// flight at the restart would); the rule is that time, so the test
	// lets the idle connection rest that long, no more.
	if d := checkAfter - time.Since(warmed); d > 0 {
		time.Sleep(d)
	}
	if res, err := c.Push(ctx, "q", []any{2}, PushOptions{}); err != nil || res.Pushed != 1 {
		t.Fatalf("push after the restart: %+v %v", res, err)
	}
	res, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: time.Second})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("waiting pop after the restart: %+v %v", res, err)
	}
	if _, err := c.Request(ctx, "nobody", 1, RequestOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("request after the restart: %v", err)
	}
	if _, err := c.Queues(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPushNotRepeatedAfterLostAnswer: the server reads a push and closes
// without answering: the push may have been applied, so it is reported,
// not sent again. A listing (safe to repeat) in the same position is sent
// again and succeeds.
func TestPushNotRepeatedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	var pushes, listings atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if strings.HasSuffix(req.target, "/push") {
				if pushes.Add(1) == 1 {
					return // applied, answer lost
				}
				_, _ = io.WriteString(nc, response(201, "", `{"pushed":1}`))
				continue
			}
			if listings.Add(1) == 1 {
				return
			}
			_, _ = io.WriteString(nc, response(200, "", `{"queues":[],"count":0,"cellBytes":0}`))
		}
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	_, err := c.Push(ctx, "q", []any{1}, PushOptions{})
	if err == nil || !strings.Contains(err.Error(), "may have applied") || pushes.Load() != 1 {
		t.Fatalf("push with a lost answer: %v, sent %d times", err, pushes.Load())
	}
	if _, err := c.Queues(ctx); err != nil || listings.Load() != 2 {
		t.Fatalf("listing with a lost answer: %v, sent %d times", err, listings.Load())
	}
	if _, err := c.Push(ctx, "q", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestFailoverBetweenURLs: the first URL refuses connections; every kind of
// call (shared, waiting pop, Request's pair) goes to the second, which
// becomes the one in use.
func TestFailoverBetweenURLs(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	dead := fmt.Sprintf("http://127.0.0.1:%d", brokertest.Port(t))
	ctx := testCtx(t)
	for _, first := range []string{"push", "pop", "request", "push through net/http"} {
		c := newClient(t, dead, WithURLs(b.URL()))
		if first == "push through net/http" {
			c = newClient(t, dead, WithURLs(b.URL()), WithHTTPClient(&http.Client{}))
		}
		switch first {
		case "push", "push through net/http":
			if _, err := c.Push(ctx, "fo", []any{1}, PushOptions{}); err != nil {
				t.Fatal(err)
			}
		case "pop":
			if _, err := c.Pop(ctx, "fo", PopOptions{Wait: true, Timeout: 100 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
		case "request":
			_, err := c.Request(ctx, "nobody", 1, RequestOptions{Timeout: 100 * time.Millisecond})
			if !errors.Is(err, ErrRequestTimeout) {
				t.Fatalf("request through failover: %v", err)
			}
		}
		if c.URL() != b.URL() {
			t.Fatalf("after a %s the client is on %s, want %s", first, c.URL(), b.URL())
		}
	}
}

// TestResetDuringParkedPop: a reset of the queue a pop is parked on leaves
// the pop parked; the next push wakes it.
func TestResetDuringParkedPop(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	if _, err := c.Push(ctx, "parked", []any{"old"}, PushOptions{Partition: "other"}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *PopResult, 1)
	go func() {
		res, err := c.Pop(ctx, "parked", PopOptions{Partition: "p", Wait: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	awaitCond(t, 20*time.Second, "the pop parked at the broker", func() bool {
		return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 1
	})
	if res, err := c.Reset(ctx, "parked"); err != nil || res.Dropped != 1 {
		t.Fatalf("reset: %+v %v", res, err)
	}
	// A reset that ended the pop would have unparked it before answering.
	if n := brokerGauge(t, b, "queen_ephemeral_parked_pops"); n != 1 {
		t.Fatalf("%v pops parked after the reset, want the one still parked", n)
	}
	select {
	case res := <-got:
		t.Fatalf("the reset ended the parked pop: %+v", res)
	default:
	}
	if _, err := c.Push(ctx, "parked", []any{"new"}, PushOptions{Partition: "p"}); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if res == nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != `"new"` {
			t.Fatalf("woken pop: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the push did not wake the parked pop")
	}
}

// TestChunkedListing: above 256 queues the broker streams the listing
// chunked; it decodes whole, and calls pipelined behind it are answered.
func TestChunkedListing(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	const n = 300
	for i := range n {
		if _, err := c.Push(ctx, fmt.Sprintf("q-%03d", i), []any{i}, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			res, err := c.Queues(ctx)
			if err != nil || res.Count != n || len(res.Queues) != n {
				t.Errorf("listing: count %d, %d entries, %v", res.Count, len(res.Queues), err)
			}
		}()
		go func() {
			defer wg.Done()
			if d, err := c.Depth(ctx, "q-007", DepthOptions{}); err != nil || d.Pending != 1 {
				t.Errorf("depth behind the listing: %+v %v", d, err)
			}
		}()
	}
	wg.Wait()
}

// TestRequestRefusedPush: a Request whose push is refused answers the
// push's refusal; the pop written with it is dropped with its connection.
func TestRequestRefusedPush(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	if _, err := c.Configure(ctx, "full", QueueOptions{MaxLength: 1, Policy: PolicyReject}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "full", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Request(ctx, "full", 2, RequestOptions{Timeout: 20 * time.Second})
	wantCode(t, "a request to a full queue", err, 429, CodeQueueFull)
	// Answered with the refusal, not after waiting out its 20 s timeout.
	if time.Since(start) >= 20*time.Second {
		t.Fatalf("the refused request took %v, its whole timeout", time.Since(start))
	}
	// The pop written with the push reached the broker and made the inbox
	// (implicit, empty: collected when idle, D8 in docs/engine.md); its connection
	// was closed, so nothing waits on it and the client goes on.
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.Queues {
		if strings.HasPrefix(q.Queue, "inbox-") && (q.Tier != "implicit" || q.Depth != 0) {
			t.Fatalf("inbox after a refused request: %+v", q)
		}
	}
	if _, err := c.Request(ctx, "nobody", 1, RequestOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("the next request: %v", err)
	}
}

// TestAlive: an idle connection the peer closed is seen as gone before it
// is reused; one still open is kept.
func TestAlive(t *testing.T) {
	t.Parallel()
	closeIt := make(chan struct{})
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		if n == 1 {
			<-closeIt
			return
		}
		_, _ = br.ReadByte()
	})
	open, err := net.Dial("tcp", f.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if !alive(open) {
		t.Fatal("an open idle connection is reported gone")
	}
	close(closeIt)
	deadline := time.Now().Add(2 * time.Second)
	for alive(open) {
		if time.Now().After(deadline) {
			t.Fatal("a connection the peer closed is still reported alive")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCancelledCalls: a caller's context still ends its call: a waiting pop
// on its own connection, and a short call pipelined on a shared one whose
// answer comes late (the connection's reader recycles it).
func TestCancelledCalls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			<-release
			_, _ = io.WriteString(nc, response(200, "", `{"queue":"q","messages":[]}`))
		}
	})
	c := newHTTPClient(t, f.URL())
	for _, wait := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err := c.Pop(ctx, "q", PopOptions{Wait: wait, Timeout: 10 * time.Second})
		cancel()
		// The rule is a time, the context's 100 ms; 10 s is a loaded
		// machine's margin (the fake never answers by itself).
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 100*time.Millisecond+10*time.Second {
			t.Fatalf("wait %v: %v after %v", wait, err, time.Since(start))
		}
	}
	close(release)
	ctx := testCtx(t)
	if _, err := c.Pop(ctx, "q", PopOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWithHTTPClientAndPrefix: WithHTTPClient routes every call through
// net/http, Request included; a path prefix reaches the broker through a
// proxy that strips it, on both transports.
func TestWithHTTPClientAndPrefix(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	var proxied atomic.Int32
	proxy := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		up, err := net.Dial("tcp", strings.TrimPrefix(b.URL(), "http://"))
		if err != nil {
			return
		}
		defer up.Close()
		go func() { _, _ = io.Copy(nc, up) }()
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if !strings.HasPrefix(req.RequestURI, "/queen/api/") {
				return
			}
			proxied.Add(1)
			// As a proxy does unless told otherwise (nginx's default):
			// hop-by-hop fields are not passed on, so an upgrade to a link
			// reaches the broker as a plain GET, refused 426, and the
			// client falls back to HTTP.
			req.Header.Del("Upgrade")
			req.Header.Del("Connection")
			req.RequestURI = ""
			req.URL.Path = strings.TrimPrefix(req.URL.Path, "/queen")
			req.URL.RawPath = ""
			if err := req.Write(up); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	hc := &http.Client{Transport: &http.Transport{}}
	for _, opts := range [][]Option{nil, {WithHTTPClient(hc)}} {
		c := newClient(t, proxy.URL()+"/queen/", opts...)
		if _, err := c.Push(ctx, "px", []any{json.RawMessage(`{ "a" : 1 }`)}, PushOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := c.Pop(ctx, "px", PopOptions{Wait: true, Timeout: time.Second, AutoAck: true})
		if err != nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != `{"a":1}` {
			t.Fatalf("pop through the prefix: %+v %v", res, err)
		}
		// A second, not 50 ms: through net/http the pop follows the push,
		// and on a loaded machine a push can take the whole of 50 ms,
		// leaving no time for the pop (then not sent, and not counted).
		if _, err := c.Request(ctx, "nobody", 1, RequestOptions{Timeout: time.Second}); !errors.Is(err, ErrRequestTimeout) {
			t.Fatalf("request through the prefix: %v", err)
		}
	}
	if proxied.Load() < 8 {
		t.Fatalf("%d requests through the proxy", proxied.Load())
	}
}

// TestSharedConnectionsBounded: a burst of first calls dials at most
// maxShared shared connections (the rest go exclusive and rest in the
// pool), and the pool then serves from those.
func TestSharedConnectionsBounded(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newHTTPClient(t, b.URL())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Push(ctx, "burst", []any{i}, PushOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	p := c.eps[0].(*pool)
	p.mu.Lock()
	shared, idle := len(p.shared), len(p.idle)
	p.mu.Unlock()
	if shared < 1 || shared > maxShared || idle > maxIdle {
		t.Fatalf("%d shared connections (at most %d), %d idle", shared, maxShared, idle)
	}
	if d, err := c.Depth(ctx, "burst", DepthOptions{}); err != nil || d.Pending != 64 {
		t.Fatalf("depth: %+v %v", d, err)
	}
	t.Logf("%d shared, %d idle exclusive connections after a burst of 64", shared, idle)
}

// A safe call whose connection closes before its answer is sent again, on
// a fresh connection, maxAttempts times in all, then fails. Kills
// transport.go:261's `attempt > limit` (a fourth try).
func TestSafeCallTriedMaxAttempts(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	f := startFake(t, func(_ int, _ net.Conn, br *bufio.Reader) {
		if _, err := readRequest(br); err == nil {
			got.Add(1) // and closed, unanswered
		}
	})
	c, err := New(f.URL(), WithHTTPOnly(), withoutCellView())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Queues(testCtx(t)); err == nil {
		t.Fatal("a listing never answered succeeded")
	}
	if n := got.Load(); n != maxAttempts {
		t.Fatalf("the listing was sent %d times; want %d", n, maxAttempts)
	}
}

// Calls made one after another share one connection: a shared connection
// carrying fewer than sharedBusy calls takes the next rather than another
// being dialled. Kills pool.go:320's `load >= sharedBusy` (each call
// dialled another, up to maxShared).
func TestSequentialCallsShareOneConnection(t *testing.T) {
	t.Parallel()
	var dialled atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		dialled.Add(1)
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(nc, response(201, "", `{"pushed":1}`))
		}
	})
	c, err := New(f.URL(), WithHTTPOnly(), withoutCellView())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := testCtx(t)
	for i := range maxShared + 2 {
		if _, err := c.Push(ctx, "q", []any{i}, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := dialled.Load(); n != 1 {
		t.Fatalf("%d connections for %d pushes one after another; want one", n, maxShared+2)
	}
}

// When another shared connection cannot be dialled, a call goes on the
// busy one (below maxPipeline) rather than fail: with sharedBusy pushes
// held on the only connection and the server taking no more connections,
// one more push is carried on it and answered. Kills pool.go:336's
// `best.pending.Load() >= maxPipeline` (the dial's error answered).
func TestBusySharedConnectionBeatsAFailedDial(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	release := make(chan struct{})
	listener := make(chan net.Listener, 1)
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		if n == 1 {
			(<-listener).Close() // every later dial is refused
		}
		// Requests are read (and counted) as they come; their answers,
		// in order, the first at once, the others once released.
		answers := make(chan struct{}, 256)
		defer close(answers)
		go func() {
			n := 0
			for range answers {
				if n++; n > 1 {
					<-release
				}
				_, _ = io.WriteString(nc, response(201, "", `{"pushed":1}`))
			}
		}()
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			got.Add(1)
			answers <- struct{}{}
		}
	})
	listener <- f.ln
	c, err := New(f.URL(), WithHTTPOnly(), withoutCellView())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := testCtx(t)
	if _, err := c.Push(ctx, "q", []any{"first"}, PushOptions{}); err != nil { // the connection
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range sharedBusy {
		wg.Go(func() {
			if _, err := c.Push(ctx, "q", []any{i}, PushOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	awaitCond(t, 10*time.Second, "the busy pushes sent", func() bool { return got.Load() == 1+sharedBusy })
	one := make(chan error, 1)
	go func() { _, err := c.Push(ctx, "q", []any{"one more"}, PushOptions{}); one <- err }()
	awaitCond(t, 10*time.Second, "one more push sent, or failed", func() bool {
		select {
		case err := <-one:
			one <- err
			return true
		default:
			return got.Load() == 1+sharedBusy+1
		}
	})
	close(release)
	wg.Wait()
	if err := <-one; err != nil {
		t.Errorf("a push with the only connection busy and no other to be dialled: %v; want it carried on the busy one", err)
	}
}

// At most maxIdle exclusive connections are kept at rest: waiting pops
// that each held one, answered together, leave maxIdle open and the rest
// closed. Kills pool.go:287's `len(p.idle) <= maxIdle` (one more kept).
func TestIdleExclusiveConnectionsBounded(t *testing.T) {
	t.Parallel()
	const pops = maxIdle + 2
	var open, parked atomic.Int32
	release := make(chan struct{})
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		open.Add(1)
		defer open.Add(-1)
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			parked.Add(1)
			<-release
			_, _ = io.WriteString(nc, response(200, "", `{"queue":"q","messages":[]}`))
		}
	})
	c, err := New(f.URL(), WithHTTPOnly(), withoutCellView())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for range pops {
		wg.Go(func() {
			if _, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: 30 * time.Second}); err != nil {
				t.Error(err)
			}
		})
	}
	awaitCond(t, 10*time.Second, "every pop parked", func() bool { return parked.Load() == pops })
	close(release)
	wg.Wait()
	awaitCond(t, 10*time.Second, fmt.Sprintf("the connections down to the %d kept at rest", maxIdle), func() bool { return open.Load() == maxIdle })
}

// TestCloseEndsConnections: after Close, a connection that carried a call
// when Close came is closed once the call is answered; the client still
// answers calls made after Close (except pushes, ErrClosed).
func TestCloseEndsConnections(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var open atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		open.Add(1)
		defer open.Add(-1)
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			<-gate
			_, _ = io.WriteString(nc, response(200, "", `{"queues":[],"count":0,"cellBytes":0}`))
		}
	})
	c, err := New(f.URL(), WithHTTPOnly(), withoutCellView())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	done := make(chan error, 1)
	go func() { _, err := c.Queues(ctx); done <- err }()
	for open.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at Close: %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connection stayed open after its call was answered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.Queues(ctx); err != nil {
		t.Fatalf("a listing after Close: %v", err)
	}
	if _, err := c.Push(ctx, "q", []any{1}, PushOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a push after Close: %v", err)
	}
}

// TestReadAnswer: the answer reader on every framing the transport
// accepts (docs/sdk-transport.md, "Answers"): 1xx skipped, 204 and 304
// without a body whatever they say, HTTP/1.0 and "Connection: close" as a
// close, an answer without framing read to the end, chunks with extensions
// and trailers, Retry-After; and each malformed answer a framing error.
func TestReadAnswer(t *testing.T) {
	type want struct {
		status     int
		body       string
		close      bool
		retryAfter string
	}
	ok := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	for _, tc := range []struct {
		name    string
		in      string
		answers []want
		err     bool // after the answers
	}{
		{"1xx skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 199 Early\r\nX: y\r\n\r\n" + ok("a"), []want{{status: 200, body: "a"}}, false},
		{"204 without a body", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + ok("next"), []want{{status: 204}, {status: 200, body: "next"}}, false},
		{"304 without a body", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n" + ok("next"), []want{{status: 304}, {status: 200, body: "next"}}, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", []want{{status: 200, body: "ok", close: true}}, false},
		{"Connection: close", "HTTP/1.1 200 OK\r\nconnection:  Close \r\nContent-Length: 0\r\n\r\n", []want{{status: 200, close: true}}, false},
		{"Connection: keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n" + ok(""), []want{{status: 200}, {status: 200}}, false},
		{"Retry-After", "HTTP/1.1 503 Busy\r\nRETRY-AFTER:  7 \r\nContent-Length: 0\r\n\r\n", []want{{status: 503, retryAfter: "7"}}, false},
		{"no framing", "HTTP/1.1 200 OK\r\n\r\nto the end", []want{{status: 200, body: "to the end", close: true}}, false},
		{"no framing, longer than a read", "HTTP/1.1 200 OK\r\n\r\n" + strings.Repeat("0123456789", 2000), []want{{status: 200, body: strings.Repeat("0123456789", 2000), close: true}}, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5;x=1\r\nhello\r\nA \r\n, world!!!\r\n0\r\nTrailer: t\r\n\r\n" + ok("b"), []want{{status: 200, body: "hello, world!!!"}, {status: 200, body: "b"}}, false},
		{"a status line without digits", "HTTP/1.1 2x0 OK\r\n\r\n", nil, true},
		{"a status line with a letter after the digits", "HTTP/1.1 20:\r\n\r\n", nil, true},
		{"a status line too short", "HTTP/1.1 20\r\n", nil, true},
		{"not HTTP/1", "HTTP/2.0 200 OK\r\n\r\n", nil, true},
		{"no space after the version", "HTTP/1.1_200 OK\r\n\r\n", nil, true},
		{"a header without a name", "HTTP/1.1 200 OK\r\n: x\r\nContent-Length: 0\r\n\r\n", nil, true},
		{"a header without a colon", "HTTP/1.1 200 OK\r\nX\r\nContent-Length: 0\r\n\r\n", nil, true},
		{"a bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", nil, true},
		{"an answer over 256 MiB", "HTTP/1.1 200 OK\r\nContent-Length: 268435457\r\n\r\n", nil, true},
		{"another Transfer-Encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", nil, true},
		{"a bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", nil, true},
		{"a chunk not followed by CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", nil, true},
		{"a header line over 16 KiB", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("x", 16<<10) + "\r\n\r\n", nil, true},
		{"cut in the body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", nil, true},
		{"cut in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nshort", nil, true},
		{"cut in the trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nT: 1\r\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			go func() {
				_, _ = io.WriteString(server, tc.in)
				server.Close()
			}()
			defer client.Close()
			// The answers are read on a goroutine of their own, so that a
			// reader that never returns fails the row instead of the run.
			type read struct {
				a    answer
				body []byte
				err  error
			}
			reads := make(chan read, len(tc.answers)+1)
			go func() {
				w := newWireConn(client)
				for range len(tc.answers) + 1 {
					a, body, err := w.readAnswer(nil)
					reads <- read{a, body, err}
					if err != nil {
						return
					}
				}
			}()
			next := func(i int) read {
				select {
				case r := <-reads:
					return r
				case <-time.After(10 * time.Second):
					t.Fatalf("answer %d: the reader did not return", i)
					return read{}
				}
			}
			for i, want := range tc.answers {
				r := next(i)
				a, body, err := r.a, r.body, r.err
				if err != nil {
					t.Fatalf("answer %d: %v", i, err)
				}
				if a.status != want.status || string(body) != want.body || a.close != want.close || a.retryAfter != want.retryAfter {
					t.Fatalf("answer %d: %d %.64q (%d bytes) close %v retry-after %q; want %d %.64q (%d bytes) close %v retry-after %q",
						i, a.status, body, len(body), a.close, a.retryAfter, want.status, want.body, len(want.body), want.close, want.retryAfter)
				}
			}
			err := next(len(tc.answers)).err
			if tc.err {
				if err == nil || errors.Is(err, io.EOF) && !strings.HasPrefix(tc.name, "cut") {
					t.Fatalf("after the answers: %v, want a framing error", err)
				}
			} else if !errors.Is(err, io.EOF) {
				t.Fatalf("after the answers: %v, want the end of the stream", err)
			}
		})
	}
}

// The 256 MiB bound of an answer's body, at its exact byte: a body that
// fills it is taken, one byte more is refused, whether the body is framed
// by a length, by chunks (the bound counts what the earlier chunks
// brought) or by the close (never reading more than the byte past it, even
// from a reader that hands over its data with EOF). The buffers are made,
// not written: the kernel maps their untouched pages lazily.
func TestAnswerBoundAtItsByte(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's shadow of 256 MiB buffers")
	}
	full := make([]byte, maxAnswer-8, maxAnswer+8192)
	got, err := readN(strings.NewReader("12345678"), full, 8)
	if err != nil || len(got) != maxAnswer || string(got[maxAnswer-8:]) != "12345678" {
		t.Fatalf("readN filling the bound exactly: %d bytes, %v", len(got), err)
	}
	if _, err := readN(strings.NewReader("123456789"), full, 9); !errors.Is(err, errFraming) {
		t.Fatalf("readN one byte past the bound: %v, want a framing error", err)
	}
	got, err = readAll(strings.NewReader("12345678"), full)
	if err != nil || len(got) != maxAnswer || string(got[maxAnswer-8:]) != "12345678" {
		t.Fatalf("readAll reaching the bound exactly: %d bytes, %v", len(got), err)
	}
	r := iotest.DataErrReader(strings.NewReader("123456789 and more"))
	if got, err := readAll(r, full); !errors.Is(err, errFraming) || len(got) != maxAnswer+1 {
		t.Fatalf("readAll past the bound: %d bytes, %v; want a framing error after one byte past it", len(got), err)
	}
}

// TestEvery2xxIsSuccess: any 2xx answer is a success and any other final
// status a refusal, on the routes read by encoding/json, by hand (push,
// pop) and on the system routes.
func TestEvery2xxIsSuccess(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			body := `{"queues":[]}`
			switch {
			case strings.HasSuffix(req.target, "/push"):
				body = `{"pushed":1}`
			case strings.Contains(req.target, "/pop"):
				body = `{"messages":[]}`
			case strings.HasPrefix(req.target, systemPrefix):
				body = `{"enabled":true,"retryAfterSeconds":1}`
			}
			if _, err := io.WriteString(nc, response(int(status.Load()), "", body)); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	c := newClient(t, f.URL())
	calls := map[string]func() error{
		"queues":      func() error { _, err := c.Queues(ctx); return err },
		"push":        func() error { _, err := c.Push(ctx, "q", []any{1}, PushOptions{}); return err },
		"pop":         func() error { _, err := c.Pop(ctx, "q", PopOptions{}); return err },
		"kill switch": func() error { _, err := c.KillSwitch(ctx); return err },
	}
	for _, st := range []int{200, 299, 300, 399} {
		status.Store(int32(st))
		for name, call := range calls {
			err := call()
			var e *Error
			if st < 300 && err != nil || st >= 300 && (!errors.As(err, &e) || e.Status != st) {
				t.Fatalf("%s answered %d: %v", name, st, err)
			}
		}
	}
}

// TestSafeCallSentAgainOnExclusiveConnection: the retry rule on an
// exclusive connection. The cell view's waiting read (owner.go) is safe to
// repeat and takes a connection of its own; the server reads it and closes
// the connection without a byte of its answer, so the read is sent again
// at once, as it was (after=1), on a fresh connection; it is not failed
// and read again later as a new read.
func TestSafeCallSentAgainOnExclusiveConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var views []string // the view reads' queries, in order
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			ans := response(200, "", `{"queues":[],"totalCount":0}`)
			if path, query, _ := strings.Cut(req.target, "?"); strings.HasSuffix(path, "/cell") {
				mu.Lock()
				views = append(views, query)
				n := len(views)
				mu.Unlock()
				switch {
				case n == 2:
					return // read, and closed before any byte of its answer
				case n > 2 && query != "":
					continue // a waiting read, parked until the client closes
				}
				ans = response(200, "", `{"generation":1,"tenant":"","self":"a","members":[{"id":"a","url":""}]}`)
			}
			if _, err := io.WriteString(nc, ans); err != nil {
				return
			}
		}
	})
	c, err := New(f.URL(), WithHTTPOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	if _, err := c.Queues(testCtx(t)); err != nil { // starts the view's watch
		t.Fatal(err)
	}
	awaitCond(t, 10*time.Second, "a third view read", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(views) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if !strings.HasPrefix(views[1], "after=1&") || views[2] != views[1] {
		t.Fatalf("view reads %q: want the second (after=1) sent again as it was", views)
	}
}

// TestExclusiveConnectionKeptAcrossAnswers: an exclusive connection whose
// answers were all read goes back to rest and serves the next call, a
// refusal included: two waiting pops refused with a 429, then two Requests
// whose push is answered with a 2xx other than 201 (any 2xx is a success)
// and whose inbox pop, written behind the push, is read on the same
// connection, never sent again. One connection for all four.
func TestExclusiveConnectionKeptAcrossAnswers(t *testing.T) {
	t.Parallel()
	var pushStatus, inboxPops atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			var ans string
			switch {
			case strings.HasSuffix(req.target, "/push"):
				ans = response(int(pushStatus.Load()), "", `{"pushed":1}`)
			case strings.Contains(req.target, "queue=inbox-"):
				inboxPops.Add(1)
				ans = response(200, "", `{"queue":"i","messages":[{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":"reply"}]}`)
			default:
				ans = response(429, "", `{"error":"slow down","code":"rate_limited"}`)
			}
			if _, err := io.WriteString(nc, ans); err != nil {
				return
			}
		}
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	for i := range 2 {
		_, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: time.Second})
		wantCode(t, fmt.Sprintf("waiting pop %d", i+1), err, 429, CodeRateLimited)
	}
	for i, st := range []int32{200, 299} {
		pushStatus.Store(st)
		m, err := c.Request(ctx, "q", 1, RequestOptions{Timeout: 5 * time.Second})
		if err != nil || string(m.Payload) != `"reply"` {
			t.Fatalf("request %d (push answered %d): %+v %v", i+1, st, m, err)
		}
		if n := inboxPops.Load(); n != int32(i+1) {
			t.Fatalf("after request %d (push answered %d): %d inbox pops, want %d", i+1, st, n, i+1)
		}
	}
	if n := f.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1: a connection whose answers were all read is kept", n)
	}
}
