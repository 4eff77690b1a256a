package conformance

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestKeepAlive: one connection carries every route, answers made off the
// loop (configure, delete) and refusals included (docs/server.md).
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient()
	defer c.CloseIdleConnections()
	var (
		n  int
		mu sync.Mutex
	)
	ctx := countConns(context.Background(), &n, &mu)
	do := func(method, path, body string, status int) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, b.url(path), rd)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status || resp.Close {
			t.Fatalf("%s %s: %d (close %v) %s; want %d on a kept-alive connection", method, path, resp.StatusCode, resp.Close, data, status)
		}
	}
	for i := 0; i < 3; i++ {
		do("GET", "/health", "", 200)
		do("POST", "/api/v1/ephemeral/configure", `{"queue":"ka","options":{"maxLength":2}}`, 201)
		do("POST", "/api/v1/ephemeral/push", `{"queue":"ka","messages":[{"payload":1},{"payload":2}]}`, 201)
		do("POST", "/api/v1/ephemeral/push", `{"queue":"ka","messages":[{"payload":3}]}`, 429)
		do("GET", "/api/v1/ephemeral/pop?queue=ka&batch=2&autoAck=true", "", 200)
		do("POST", "/api/v1/ephemeral/ack", `{"queue":"ka","acks":[{"id":"x"}]}`, 200)
		do("GET", "/api/v1/ephemeral/queues", "", 200)
		do("GET", "/api/v1/ephemeral/queues/ka/depth", "", 200)
		do("POST", "/api/v1/ephemeral/reset", `{"queue":"ka"}`, 200)
		do("DELETE", "/api/v1/ephemeral/queue/ka", "", 200)
		do("GET", "/api/v1/ephemeral/queues/ka/depth", "", 404)
		do("POST", "/api/v1/ephemeral/push", `{"queue":""}`, 400)
		do("GET", "/nope", "", 404)
		do("PUT", "/api/v1/ephemeral/push", "", 405)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections for 42 requests; want 1 (keep-alive)", n)
	}
}

// TestPipelining: requests written back to back are answered in request
// order, a request split across reads anywhere included (D13).
func TestPipelining(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	t.Run("every route", func(t *testing.T) {
		r := b.dial(t)
		r.send(httpReq("POST", "/api/v1/ephemeral/push", string(pushBody("pipe", "", "1", "2"))) +
			httpReq("GET", "/api/v1/ephemeral/pop?queue=pipe&autoAck=true", "") +
			httpReq("GET", "/api/v1/ephemeral/pop?queue=pipe&autoAck=true", "") +
			httpReq("GET", "/api/v1/ephemeral/pop?queue=pipe&autoAck=true", "") +
			httpReq("POST", "/api/v1/ephemeral/configure", `{"queue":"pipe-decl"}`) +
			httpReq("GET", "/api/v1/ephemeral/queues/pipe-decl/depth", "") +
			httpReq("DELETE", "/api/v1/ephemeral/queue/pipe-decl", "") +
			httpReq("GET", "/api/v1/ephemeral/queues/pipe-decl/depth", "") +
			httpReq("POST", "/api/v1/ephemeral/push", `{"queue":7}`) +
			httpReq("GET", "/health", ""))
		var pushed struct{ Pushed int }
		r.read().want(t, 201, &pushed)
		for i, want := range [][]string{{"1"}, {"2"}, {}} {
			if p := r.readPop(t); !equalStrings(p.payloads(), want) {
				t.Fatalf("pipelined pop %d got %v, want %v", i, p.payloads(), want)
			}
		}
		r.read().want(t, 201, nil)
		var d depthResp
		r.read().want(t, 200, &d)
		if d.Tier != "declared" {
			t.Fatalf("depth after the pipelined configure: %+v", d)
		}
		var del deleted
		r.read().want(t, 200, &del)
		if del != (deleted{"pipe-decl", true, true}) {
			t.Fatalf("pipelined delete: %+v", del)
		}
		r.read().wantErr(t, 404, "ephemeral_queue_not_found")
		r.read().wantErr(t, 400, "ephemeral_bad_request")
		var h health
		r.read().want(t, 200, &h)
		if pushed.Pushed != 2 || h.Status != "ok" {
			t.Fatalf("pushed %d, health %+v", pushed.Pushed, h)
		}
	})

	t.Run("200 requests in random fragments", func(t *testing.T) {
		r := b.dial(t)
		var all strings.Builder
		for i := 0; i < 200; i++ {
			k := i%5 + 1
			pl := make([]string, k)
			for j := range pl {
				pl[j] = fmt.Sprintf(`{"i":%d,"j":%d}`, i, j)
			}
			all.WriteString(httpReq("POST", "/api/v1/ephemeral/push", string(pushBody("frag", fmt.Sprintf("p%d", i%3), pl...))))
		}
		text := all.String()
		rng := rand.New(rand.NewSource(4))
		go func() {
			for len(text) > 0 {
				n := min(1+rng.Intn(97), len(text))
				if _, err := io.WriteString(r.c, text[:n]); err != nil {
					return
				}
				text = text[n:]
			}
		}()
		for i := 0; i < 200; i++ {
			var out struct{ Pushed int }
			r.read().want(t, 201, &out)
			if out.Pushed != i%5+1 {
				t.Fatalf("answer %d: pushed %d, want %d (answers out of order?)", i, out.Pushed, i%5+1)
			}
		}
		if d := b.depth(t, "frag", ""); d.Pending != 600 {
			t.Fatalf("pending %d, want 600", d.Pending)
		}
	})
}

// TestPipeliningBehindParkedPop: requests pipelined behind a parked pop
// are answered after it, in order, and the pop is woken by a push from
// another connection (D13).
func TestPipeliningBehindParkedPop(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	r := b.dial(t)
	r.send(httpReq("GET", "/api/v1/ephemeral/pop?queue=parked&wait=true&timeout=10000", "") +
		httpReq("POST", "/api/v1/ephemeral/push", string(pushBody("elsewhere", "", "1"))) +
		httpReq("GET", "/health", ""))
	r.expectNothing(400 * time.Millisecond)
	b.push(t, "parked", "", `"woken"`)
	if p := r.readPop(t); !equalStrings(p.payloads(), []string{`"woken"`}) {
		t.Fatalf("parked pop got %v", p.payloads())
	}
	var out struct{ Pushed int }
	r.read().want(t, 201, &out)
	var h health
	r.read().want(t, 200, &h)
	if out.Pushed != 1 || h.Status != "ok" {
		t.Fatalf("answers behind the pop: pushed %d, health %+v", out.Pushed, h)
	}
}

// TestChunkedBodies: Transfer-Encoding: chunked bodies, arriving in pieces,
// with chunk extensions and trailers, from raw TCP and from net/http; bad
// chunk framing and smuggling shapes are 400 and close the connection.
func TestChunkedBodies(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	head := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

	t.Run("in pieces", func(t *testing.T) {
		r := b.dial(t)
		body := string(pushBody("chunky", "", "1", "2", "3"))
		r.send(head)
		for _, part := range []string{body[:7], body[7:30], body[30:]} {
			time.Sleep(20 * time.Millisecond)
			r.send(chunk(part))
		}
		time.Sleep(20 * time.Millisecond)
		r.send("0\r\n\r\n")
		var out struct{ Pushed int }
		if r.read().want(t, 201, &out); out.Pushed != 3 {
			t.Fatalf("pushed %d", out.Pushed)
		}
		// Extensions are ignored, trailers accepted; the connection stays.
		body = string(pushBody("chunky", "", "4"))
		r.send(head + fmt.Sprintf("%x;name=value\r\n%s\r\n", 5, body[:5]) + chunk(body[5:]) + "0\r\nX-Trailer: 1\r\n\r\n")
		if r.read().want(t, 201, &out); out.Pushed != 1 {
			t.Fatalf("pushed %d", out.Pushed)
		}
		r.send(httpReq("GET", "/health", ""))
		r.read().want(t, 200, nil)
	})
	t.Run("net/http", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			body := pushBody("chunky", "", "5", "6")
			for _, c := range body {
				_, _ = pw.Write([]byte{c})
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", b.url("/api/v1/ephemeral/push"), pr)
		resp, err := b.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || string(data) != `{"pushed":2}` {
			t.Fatalf("chunked push from net/http: %d %s", resp.StatusCode, data)
		}
	})
	if d := b.depth(t, "chunky", ""); d.Pending != 6 {
		t.Fatalf("pending %d, want 6", d.Pending)
	}

	for _, c := range []struct{ name, req string }{
		{"bare LF in a chunk line", head + "5\n{\"que\r\n0\r\n\r\n"},
		{"chunk data longer than its size", head + "2\r\nabc\r\n0\r\n\r\n"},
		{"a chunk size that is not hex", head + "zz\r\nab\r\n0\r\n\r\n"},
		{"Content-Length with Transfer-Encoding", "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"two Content-Lengths", "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := b.dial(t)
			r.send(c.req + httpReq("GET", "/health", ""))
			a := r.read()
			a.wantErr(t, 400, "ephemeral_bad_request")
			if !a.close {
				t.Errorf("a framing refusal must say Connection: close")
			}
			r.expectEOF(2 * time.Second)
		})
	}
}

// TestConnectionClose: a request with Connection: close is answered with
// Connection: close and the connection is closed; a request pipelined
// behind it is not served.
func TestConnectionClose(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	r := b.dial(t)
	r.send(httpReq("GET", "/health", "", "Connection: close") + httpReq("POST", "/api/v1/ephemeral/push", string(pushBody("after-close", "", "1"))))
	a := r.read()
	a.want(t, 200, nil)
	if !a.close {
		t.Fatalf("the answer to Connection: close lacks Connection: close (%v)", a.header)
	}
	r.expectEOF(2 * time.Second)
	if _, ok := b.queues(t).find("after-close"); ok {
		t.Fatalf("a request after Connection: close was served")
	}
}

// TestHTTP10: an HTTP/1.0 request is answered and the connection closed,
// unless it asks for keep-alive, which the answer confirms.
func TestHTTP10(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	r := b.dial(t)
	r.send("GET /health HTTP/1.0\r\n\r\n")
	r.read().want(t, 200, nil)
	r.expectEOF(2 * time.Second)

	r = b.dial(t)
	body := string(pushBody("ten", "", "1"))
	r.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	a := r.read()
	a.want(t, 200, nil)
	if got := a.header.Get("Connection"); !strings.EqualFold(got, "keep-alive") {
		t.Fatalf("answer to an HTTP/1.0 keep-alive request: Connection %q, want keep-alive", got)
	}
	r.send(fmt.Sprintf("POST /api/v1/ephemeral/push HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	r.read().want(t, 201, nil)
	r.send("GET /api/v1/ephemeral/queues/ten/depth HTTP/1.0\r\n\r\n")
	var d depthResp
	r.read().want(t, 200, &d)
	if d.Pending != 1 {
		t.Fatalf("depth %+v", d)
	}
	r.expectEOF(2 * time.Second)
}

// TestExpectContinue: "Expect: 100-continue" gets an interim 100 before the
// body is sent, from raw TCP and from net/http.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	body := string(pushBody("cont", "", "1"))
	r := b.dial(t)
	r.send(fmt.Sprintf("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(body)))
	if a := r.read(); a.status != 100 {
		t.Fatalf("want an interim 100 Continue before the body, got %s", a)
	}
	r.send(body)
	r.read().want(t, 201, nil)

	got100 := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { got100 = true }})
	req, _ := http.NewRequestWithContext(ctx, "POST", b.url("/api/v1/ephemeral/push"), strings.NewReader(body))
	req.Header.Set("Expect", "100-continue")
	c := newClient()
	c.Transport.(*http.Transport).ExpectContinueTimeout = 10 * time.Second
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 || !got100 {
		t.Fatalf("net/http with Expect: status %d, got 100 %v", resp.StatusCode, got100)
	}
	if d := b.depth(t, "cont", ""); d.Pending != 2 {
		t.Fatalf("pending %d, want 2", d.Pending)
	}
}

// TestBodyLimit: a body over QUEEN_MAX_BODY_BYTES is a 400 and the
// connection is closed (D7); a body of exactly the limit is served.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_MAX_BODY_BYTES": "1024"})
	base := len(pushBody("big", "", `""`))
	exact := pushBody("big", "", `"`+strings.Repeat("x", 1024-base)+`"`)
	if len(exact) != 1024 {
		t.Fatalf("test bug: body of %d bytes", len(exact))
	}
	b.do(t, "POST", "/api/v1/ephemeral/push", exact).want(t, 201, nil)

	over := pushBody("big", "", `"`+strings.Repeat("x", 1025-base)+`"`)
	t.Run("Content-Length", func(t *testing.T) {
		r := b.dial(t)
		r.send(httpReq("POST", "/api/v1/ephemeral/push", string(over)))
		a := r.read()
		a.wantErr(t, 400, "ephemeral_bad_request")
		if !a.close {
			t.Errorf("the refusal lacks Connection: close")
		}
		r.expectEOF(2 * time.Second)
	})
	t.Run("Content-Length announced with Expect", func(t *testing.T) {
		r := b.dial(t)
		r.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
		r.read().wantErr(t, 400, "ephemeral_bad_request") // not a 100
		r.expectEOF(2 * time.Second)
	})
	t.Run("chunked", func(t *testing.T) {
		r := b.dial(t)
		half := string(over[:600])
		r.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(half), half) + fmt.Sprintf("%x\r\n%s\r\n", len(over)-600, over[600:]) + "0\r\n\r\n")
		r.read().wantErr(t, 400, "ephemeral_bad_request")
		r.expectEOF(2 * time.Second)
	})
	t.Run("net/http", func(t *testing.T) {
		c := newClient()
		defer c.CloseIdleConnections()
		rep := b.doWith(t, c, "POST", "/api/v1/ephemeral/ack", `{"queue":"big","acks":[`+strings.Repeat(`{"id":"x"},`, 200)+`{"id":"x"}]}`)
		rep.wantErr(t, 400, "ephemeral_bad_request")
	})
	if d := b.depth(t, "big", ""); d.Pending != 1 {
		t.Fatalf("pending %d: only the push at the limit was served", d.Pending)
	}
}

// TestClosedConnectionUnparksPop: a parked pop whose connection closes is
// removed at once, and messages are never handed to it (D13): the next
// consumer of the group gets them, with attempts 0.
func TestClosedConnectionUnparksPop(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	for i := 0; i < 5; i++ {
		r := b.parkRaw(t, popq{"queue": "gone", "group": "g", "wait": "true", "timeout": "20000"})
		r.c.Close()
	}
	time.Sleep(300 * time.Millisecond)
	b.push(t, "gone", "", `"for the living"`)
	p := b.pop(t, popq{"queue": "gone", "group": "g"})
	if len(p.Messages) != 1 || p.Messages[0].Attempts != 0 {
		t.Fatalf("after the parked pops' connections closed: %+v; want the message, attempts 0, not leased to a closed connection", p.Messages)
	}
}

// TestLongPollWokenByPush: a waiting pop parks and a push from another
// connection answers it; one with nothing answers an empty batch at its
// timeout (docs/routes.md, pop).
func TestLongPollWokenByPush(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	anyPart := b.asyncPop(popq{"queue": "lp", "group": "g", "wait": "true", "timeout": "10000"})
	room := b.asyncPop(popq{"queue": "lp", "partition": "room", "group": "h", "wait": "true", "timeout": "10000"})
	other := b.asyncPop(popq{"queue": "lp", "partition": "elsewhere", "group": "i", "wait": "true", "timeout": "1000"})
	time.Sleep(300 * time.Millisecond)
	pushed := time.Now()
	b.push(t, "lp", "room", `"hello"`)
	for name, ch := range map[string]<-chan popResult{"without partition": anyPart, "on the partition": room} {
		r := waitPop(t, ch, 5*time.Second)
		if !equalStrings(r.resp.payloads(), []string{`"hello"`}) || r.took < 200*time.Millisecond {
			t.Fatalf("pop %s: %v after %v; want hello, parked until the push", name, r.resp.payloads(), r.took)
		}
		if since := time.Since(pushed); since > 3*time.Second {
			t.Fatalf("pop %s answered %v after the push", name, since)
		}
	}
	r := waitPop(t, other, 5*time.Second)
	if len(r.resp.Messages) != 0 || r.took < 950*time.Millisecond {
		t.Fatalf("a pop on another partition: %v after %v; want empty at its 1 s timeout", r.resp.payloads(), r.took)
	}
}

// TestSIGTERM: SIGTERM answers parked pops with an empty batch and the
// broker exits 0 within 2 s (cmd/queen).
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	viaHTTP := b.asyncPop(popq{"queue": "term", "wait": "true", "timeout": "60000"})
	raw := b.parkRaw(t, popq{"queue": "term2", "group": "g", "wait": "true", "timeout": "60000"})
	time.Sleep(100 * time.Millisecond)
	code, took := b.signal(t, syscall.SIGTERM, 5*time.Second)
	if code != 0 || took > 2*time.Second {
		t.Fatalf("SIGTERM: exit code %d after %v; want 0 within 2 s", code, took)
	}
	r := waitPop(t, viaHTTP, 3*time.Second)
	if r.resp.Queue != "term" || len(r.resp.Messages) != 0 {
		t.Fatalf("parked pop at SIGTERM: %+v; want an empty batch", r.resp)
	}
	rr, err := raw.readWithin(3 * time.Second)
	if err != nil {
		t.Fatalf("the raw parked pop got no answer before the exit: %v", err)
	}
	var p popResp
	rr.want(t, 200, &p)
	if p.Queue != "term2" || p.Messages == nil || len(p.Messages) != 0 {
		t.Fatalf("raw parked pop at SIGTERM: %s", rr.body)
	}
}

// TestHeadLimits: a request head over the header byte cap (16 KiB) or the
// header count cap (100), or a request target that cannot be decoded, is
// refused with 400 ephemeral_bad_request and the connection is closed (the
// caps and the 400 rather than a 431 are our own choices, wire/decisions.md).
func TestHeadLimits(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	many := strings.Repeat("X-Filler: 1\r\n", 100) // and Host: 101 lines
	cases := []struct{ name, req string }{
		{"head over 16 KiB", "GET /health HTTP/1.1\r\nHost: test\r\nX-Big: " + strings.Repeat("b", 17<<10) + "\r\n\r\n"},
		{"101 header lines", "GET /health HTTP/1.1\r\nHost: test\r\n" + many + "\r\n"},
		{"malformed percent-escape", "GET /api/v1/ephemeral/queues/a%zz/depth HTTP/1.1\r\nHost: test\r\n\r\n"},
		{"bare LF line ends", "GET /health HTTP/1.1\nHost: test\n\n"},
		{"unsupported version", "GET /health HTTP/2.0\r\nHost: test\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := b.dial(t)
			r.send(c.req)
			a := r.read()
			a.wantErr(t, 400, "ephemeral_bad_request")
			if !a.close {
				t.Errorf("the refusal lacks Connection: close")
			}
			r.expectEOF(2 * time.Second)
		})
	}
	t.Run("100 header lines are served", func(t *testing.T) {
		r := b.dial(t)
		r.send("GET /health HTTP/1.1\r\nHost: test\r\n" + strings.Repeat("X-Filler: 1\r\n", 99) + "\r\n")
		r.read().want(t, 200, nil)
	})
}

// TestConnectionTimeouts: a request head that does not complete within
// QUEEN_HEADER_TIMEOUT_MS and a keep-alive connection idle for
// QUEEN_IDLE_TIMEOUT_S are closed; a parked pop is not idle (docs/server.md,
// connection hygiene).
func TestConnectionTimeouts(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_HEADER_TIMEOUT_MS": "300", "QUEEN_IDLE_TIMEOUT_S": "1"})

	slow := b.dial(t)
	slow.send("GET /health HTTP/1.1\r\nHost: te")
	idle := b.dial(t)
	idle.send(httpReq("GET", "/health", ""))
	idle.read().want(t, 200, nil)
	parked := b.dial(t)
	parked.send(httpReq("GET", "/api/v1/ephemeral/pop?queue=slow&wait=true&timeout=3500", ""))

	slow.expectEOF(3 * time.Second)
	idle.expectEOF(4 * time.Second)
	start := time.Now()
	if p := parked.readPop(t); len(p.Messages) != 0 {
		t.Fatalf("parked pop %+v", p)
	}
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("the parked pop was answered early; want its 3.5 s timeout")
	}
}
