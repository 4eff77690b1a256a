package client

// Cell refusals (cellretry.go; docs/sdk-transport.md, "Cell refusals"): a
// scripted broker on a real TCP listener answers 503 owner_moved or 503
// ephemeral_forward_failed (which only a cell of several brokers sends) a
// few times and then serves; every test counts exactly what it was sent.

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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// cellReq is one request a cellBroker read.
type cellReq struct {
	route string // the path under apiPrefix, without the query: "/push"
	query url.Values
	body  []byte
	at    time.Time
}

// cellBroker is a scripted broker: handle answers each request, given how
// many requests of its route were read so far (1 for the first). Requests
// of one connection are answered in order, as a broker answers a pipeline.
// It refuses the upgrade to a link (404, as handle answers a route it does
// not know) unless started by startCellBrokerOver with links.
type cellBroker struct {
	*fakeServer
	mu     sync.Mutex
	reqs   []cellReq
	handle func(r cellReq, nth int) string
}

func startCellBroker(t *testing.T, handle func(r cellReq, nth int) string) *cellBroker {
	return startCellBrokerOver(t, false, handle)
}

// startCellBrokerOver is startCellBroker, speaking links when links is
// true: it accepts the upgrade, and answers each request frame on a
// goroutine of its own (a stream waits for no other, as on a broker), in
// the order handle returns.
func startCellBrokerOver(t *testing.T, links bool, handle func(r cellReq, nth int) string) *cellBroker {
	t.Helper()
	b := &cellBroker{handle: handle}
	b.fakeServer = startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if links && strings.HasSuffix(req.target, "/link") {
				b.serveLink(nc, br)
				return
			}
			r, nth, ok := b.record(req.target, req.body)
			if !ok {
				return
			}
			if _, err := io.WriteString(nc, b.handle(r, nth)); err != nil {
				return
			}
		}
	})
	return b
}

// record notes a request read and answers it as handle sees it.
func (b *cellBroker) record(target string, body []byte) (cellReq, int, bool) {
	u, err := url.Parse(target)
	if err != nil {
		return cellReq{}, 0, false
	}
	r := cellReq{route: strings.TrimPrefix(u.Path, apiPrefix), query: u.Query(), body: body, at: time.Now()}
	b.mu.Lock()
	defer b.mu.Unlock()
	nth := 1
	for _, x := range b.reqs {
		if x.route == r.route {
			nth++
		}
	}
	b.reqs = append(b.reqs, r)
	return r, nth, true
}

// serveLink switches nc to a link and serves its request frames.
func (b *cellBroker) serveLink(nc net.Conn, br *bufio.Reader) {
	var wmu sync.Mutex
	serveLinkRequests(nc, br, func(id uint64, lr *link.Request) bool {
		r, nth, ok := b.record(string(lr.Target), lr.Body)
		if ok {
			go func() {
				a := b.handle(r, nth)
				wmu.Lock()
				defer wmu.Unlock()
				_, _ = nc.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(a)), a...))
			}()
		}
		return ok
	})
}

// sent answers the requests read on route, in order.
func (b *cellBroker) sent(route string) []cellReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []cellReq
	for _, r := range b.reqs {
		if r.route == route {
			out = append(out, r)
		}
	}
	return out
}

// settled checks that nothing more reaches b on route after the call
// returned: a success is never followed by another send.
func (b *cellBroker) settled(t *testing.T, route string, want int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	if n := len(b.sent(route)); n != want {
		t.Fatalf("%s: %d requests, want %d", route, n, want)
	}
}

// refusal renders a cell refusal, with Retry-After when retryAfter is not
// empty.
func refusal(code, retryAfter string) string {
	extra := ""
	if retryAfter != "" {
		extra = "Retry-After: " + retryAfter + "\r\n"
	}
	return response(503, extra, `{"error":"the cell is moving","code":"`+code+`"}`)
}

const popOne = `{"queue":"q","messages":[{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":7}]}`

// TestCellRefusalRetriedPerVerb: push, pop (waiting and not) and ack
// refused three times, by each code, then served: sent exactly four times,
// with exponential backoff between sends, the same request each time (a
// waiting pop with what is left of its wait), and never again after the
// success.
func TestCellRefusalRetriedPerVerb(t *testing.T) {
	t.Parallel()
	verbs := []struct {
		name, route, ok string
		call            func(ctx context.Context, c *Client) error
	}{
		{"push", "/push", response(201, "", `{"pushed":2}`), func(ctx context.Context, c *Client) error {
			res, err := c.Push(ctx, "q", []any{1, 2}, PushOptions{})
			if err == nil && res.Pushed != 2 {
				err = fmt.Errorf("pushed %d", res.Pushed)
			}
			return err
		}},
		{"pop", "/pop", response(200, "", popOne), func(ctx context.Context, c *Client) error {
			res, err := c.Pop(ctx, "q", PopOptions{Group: "g", Batch: 1})
			if err == nil && (len(res.Messages) != 1 || res.Messages[0].ID != "e:1:Default:1") {
				err = fmt.Errorf("popped %+v", res.Messages)
			}
			return err
		}},
		{"waiting pop", "/pop", response(200, "", popOne), func(ctx context.Context, c *Client) error {
			res, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: 5 * time.Second})
			if err == nil && len(res.Messages) != 1 {
				err = fmt.Errorf("popped %+v", res.Messages)
			}
			return err
		}},
		{"ack", "/ack", response(200, "", `{"results":[{"id":"e:1:Default:1","outcome":"stale"}]}`), func(ctx context.Context, c *Client) error {
			res, err := c.Ack(ctx, "q", []Message{{ID: "e:1:Default:1"}}, AckOptions{Group: "g"})
			if err == nil && (len(res.Results) != 1 || res.Results[0].Outcome != OutcomeStale) {
				err = fmt.Errorf("acked %+v", res.Results)
			}
			return err
		}},
	}
	for _, v := range verbs {
		for _, code := range []string{CodeOwnerMoved, CodeForwardFailed} {
			t.Run(v.name+"/"+code, func(t *testing.T) {
				t.Parallel()
				b := startCellBroker(t, func(r cellReq, nth int) string {
					if nth <= 3 {
						return refusal(code, "")
					}
					return v.ok
				})
				c := newHTTPClient(t, b.URL())
				if err := v.call(testCtx(t), c); err != nil {
					t.Fatal(err)
				}
				b.settled(t, v.route, 4)
				sent := b.sent(v.route)
				for i := 1; i < len(sent); i++ {
					// Jitter keeps a wait within [backoff/2, backoff], the
					// backoff starting at 10 ms and doubling.
					if gap, least := sent[i].at.Sub(sent[i-1].at), cellBackoffMin<<(i-1)/2; gap < least {
						t.Fatalf("send %d came %v after the previous, want at least %v", i+1, gap, least)
					}
					if !bytes.Equal(sent[i].body, sent[0].body) {
						t.Fatalf("send %d: body %s, first %s", i+1, sent[i].body, sent[0].body)
					}
					if v.name != "waiting pop" {
						if sent[i].query.Encode() != sent[0].query.Encode() {
							t.Fatalf("send %d: query %s, first %s", i+1, sent[i].query, sent[0].query)
						}
						continue
					}
					prev, _ := strconv.Atoi(sent[i-1].query.Get("timeout"))
					cur, _ := strconv.Atoi(sent[i].query.Get("timeout"))
					if sent[i].query.Get("wait") != "true" || cur >= prev || cur < 4500 {
						t.Fatalf("waiting pop re-issued with %s after %d ms", sent[i].query, prev)
					}
				}
				if v.name == "waiting pop" && sent[0].query.Get("timeout") != "5000" {
					t.Fatalf("first waiting pop: %s", sent[0].query)
				}
			})
		}
	}
}

// TestCellRefusalRetryAfter: a refusal with Retry-After is sent again no
// sooner than it says, for a push and for a waiting pop (whose wait shrinks
// by the time spent).
func TestCellRefusalRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, route string }{{"push", "/push"}, {"waiting pop", "/pop"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := startCellBroker(t, func(r cellReq, nth int) string {
				switch {
				case nth == 1:
					return refusal(CodeForwardFailed, "1")
				case r.route == "/push":
					return response(201, "", `{"pushed":1}`)
				}
				return response(200, "", popOne)
			})
			c := newHTTPClient(t, b.URL())
			ctx := testCtx(t)
			var err error
			if tc.route == "/push" {
				_, err = c.Push(ctx, "q", []any{1}, PushOptions{})
			} else {
				_, err = c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: 10 * time.Second})
			}
			if err != nil {
				t.Fatal(err)
			}
			b.settled(t, tc.route, 2)
			sent := b.sent(tc.route)
			if gap := sent[1].at.Sub(sent[0].at); gap < 950*time.Millisecond || gap > 3*time.Second {
				t.Fatalf("sent again after %v, Retry-After said 1 s", gap)
			}
			if tc.route == "/pop" {
				if ms, _ := strconv.Atoi(sent[1].query.Get("timeout")); ms > 9050 || ms < 7000 {
					t.Fatalf("re-issued with timeout=%d ms after waiting 1 s of 10 s", ms)
				}
			}
		})
	}
}

// TestCellRefusalBounds: the retries end with the last refusal (its code,
// and how many sends it took) when the call's bound or its context ends
// first, and nothing is sent after.
func TestCellRefusalBounds(t *testing.T) {
	t.Parallel()
	always := func(code, retryAfter string) func(cellReq, int) string {
		return func(cellReq, int) string { return refusal(code, retryAfter) }
	}
	check := func(t *testing.T, b *cellBroker, route string, err error, code string, took, within time.Duration) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Status != 503 || e.Code != code {
			t.Fatalf("err = %v, want 503 %s", err, code)
		}
		if took > within {
			t.Fatalf("gave up after %v, want within %v", took, within)
		}
		n := len(b.sent(route))
		if e.Attempts != n || n < 2 {
			t.Fatalf("Attempts = %d, the broker read %d", e.Attempts, n)
		}
		b.settled(t, route, n)
	}

	t.Run("WithTimeout", func(t *testing.T) {
		t.Parallel()
		b := startCellBroker(t, always(CodeOwnerMoved, ""))
		c := newHTTPClient(t, b.URL(), WithTimeout(300*time.Millisecond))
		start := time.Now()
		_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
		check(t, b, "/push", err, CodeOwnerMoved, time.Since(start), 400*time.Millisecond)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v: the context did not end", err)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		t.Parallel()
		b := startCellBroker(t, always(CodeForwardFailed, ""))
		c := newHTTPClient(t, b.URL())
		ctx, cancel := context.WithTimeout(testCtx(t), 250*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Ack(ctx, "q", []Message{{ID: "x"}}, AckOptions{})
		check(t, b, "/ack", err, CodeForwardFailed, time.Since(start), 250*time.Millisecond)
	})
	t.Run("context cancelled in a wait", func(t *testing.T) {
		t.Parallel()
		b := startCellBroker(t, always(CodeOwnerMoved, "5"))
		c := newHTTPClient(t, b.URL())
		ctx, cancel := context.WithCancel(testCtx(t))
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, err := c.Pop(ctx, "q", PopOptions{})
		if !errors.Is(err, context.Canceled) || CodeOf(err) != CodeOwnerMoved || time.Since(start) > time.Second {
			t.Fatalf("err = %v after %v, want the refusal and context.Canceled at once", err, time.Since(start))
		}
		var e *Error
		if errors.As(err, &e); e.Attempts != 1 {
			t.Fatalf("Attempts = %d", e.Attempts)
		}
		b.settled(t, "/pop", 1)
	})
	t.Run("waiting pop's timeout", func(t *testing.T) {
		t.Parallel()
		b := startCellBroker(t, always(CodeOwnerMoved, ""))
		c := newHTTPClient(t, b.URL())
		start := time.Now()
		_, err := c.Pop(testCtx(t), "q", PopOptions{Wait: true, Timeout: 300 * time.Millisecond})
		check(t, b, "/pop", err, CodeOwnerMoved, time.Since(start), 400*time.Millisecond)
		prev := 301
		for _, r := range b.sent("/pop") {
			ms, _ := strconv.Atoi(r.query.Get("timeout"))
			if ms >= prev || ms < 1 {
				t.Fatalf("timeouts of the re-issued pops: %d after %d", ms, prev)
			}
			prev = ms
		}
	})
	t.Run("waiting pop leaving its timeout to the broker", func(t *testing.T) {
		// Bounded by WithTimeout, as a pop that does not wait.
		t.Parallel()
		b := startCellBroker(t, always(CodeForwardFailed, ""))
		c := newClient(t, b.URL(), WithTimeout(300*time.Millisecond))
		start := time.Now()
		_, err := c.Pop(testCtx(t), "q", PopOptions{Wait: true})
		check(t, b, "/pop", err, CodeForwardFailed, time.Since(start), 400*time.Millisecond)
		for _, r := range b.sent("/pop") {
			if r.query.Has("timeout") || r.query.Get("wait") != "true" {
				t.Fatalf("a re-issued pop's query %v, want the first's", r.query)
			}
		}
	})
	t.Run("Retry-After past the bound", func(t *testing.T) {
		// The broker's Retry-After: 1 against a 400 ms bound: the wait is
		// capped by what the bound leaves, so the call is sent once more at
		// its end rather than given up at once.
		t.Parallel()
		b := startCellBroker(t, always(CodeOwnerMoved, "1"))
		c := newHTTPClient(t, b.URL(), WithTimeout(400*time.Millisecond))
		start := time.Now()
		_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
		check(t, b, "/push", err, CodeOwnerMoved, time.Since(start), 500*time.Millisecond)
		sent := b.sent("/push")
		if gap := sent[1].at.Sub(sent[0].at); gap < 250*time.Millisecond {
			t.Fatalf("sent again after %v, want at the end of the bound (about 350 ms)", gap)
		}
	})
	t.Run("no WithTimeout: the context alone", func(t *testing.T) {
		// WithTimeout(0) is no bound: the refusals are waited out as long
		// as ctx lasts.
		t.Parallel()
		b := startCellBroker(t, func(_ cellReq, nth int) string {
			if nth <= 2 {
				return refusal(CodeOwnerMoved, "")
			}
			return response(201, "", `{"pushed":1}`)
		})
		c := newClient(t, b.URL(), WithTimeout(0))
		if _, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil || len(b.sent("/push")) != 3 {
			t.Fatalf("err = %v after %d sends, want success at the third", err, len(b.sent("/push")))
		}
	})
	t.Run("a re-sent call keeps the first send's bound", func(t *testing.T) {
		// Refused with Retry-After: 5 under a 2 s WithTimeout, the push is
		// sent again about 1.95 s in, and that send, which the server never
		// answers, is cut at the bound (2 s), not WithTimeout after it (4 s);
		// 3.3 s leaves a loaded machine room (-race and a load of 30 took
		// 1.26 s for a 600 ms bound).
		t.Parallel()
		hold := make(chan struct{})
		b := startCellBroker(t, func(_ cellReq, nth int) string {
			if nth == 1 {
				return refusal(CodeOwnerMoved, "5")
			}
			<-hold
			return ""
		})
		t.Cleanup(func() { close(hold) }) // before the server's, which waits for this handler
		c := newClient(t, b.URL(), WithTimeout(2*time.Second))
		start := time.Now()
		_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
		took := time.Since(start)
		if err == nil || !isTimeout(err) || len(b.sent("/push")) != 2 {
			t.Fatalf("err = %v after %d sends, want the second send's timeout", err, len(b.sent("/push")))
		}
		if took > 3300*time.Millisecond {
			t.Fatalf("gave up after %v, want at the 2 s bound (the second send bounded by what was left)", took)
		}
	})
	t.Run("Request's timeout", func(t *testing.T) {
		t.Parallel()
		b := startCellBroker(t, always(CodeForwardFailed, ""))
		c := newHTTPClient(t, b.URL())
		start := time.Now()
		_, err := c.Request(testCtx(t), "rpc", "hi", RequestOptions{Timeout: 300 * time.Millisecond})
		check(t, b, "/push", err, CodeForwardFailed, time.Since(start), 400*time.Millisecond)
	})
}

// The waits between sends after cell refusals: half the backoff to all of
// it, the backoff doubling from 10 ms to 1 s; Retry-After instead when the
// refusal carries one; either capped by what the call's bound and the
// context's deadline leave less cellReserve (docs/sdk-transport.md, "Cell
// refusals"). Computed, not slept: many trials see the jitter's range.
func TestCellRetryWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for trial := 0; trial < 200; trial++ {
		r := newCellRetry(time.Now(), 0)
		b := cellBackoffMin
		for k := 0; k < 9; k++ {
			if w := r.next(ctx, &Error{}); w < b/2 || w > b {
				t.Fatalf("trial %d, wait %d: %v, want within [%v, %v]", trial, k, w, b/2, b)
			}
			b = min(2*b, cellBackoffMax)
		}
		if b != cellBackoffMax {
			t.Fatalf("the backoff after nine waits: %v, want its cap %v", b, cellBackoffMax)
		}
	}
	r := newCellRetry(time.Now(), 0)
	if w := r.next(ctx, &Error{RetryAfter: 3 * time.Second}); w != 3*time.Second {
		t.Fatalf("with Retry-After: 3 s: a wait of %v", w)
	}
	if w := r.next(ctx, &Error{}); w < 10*time.Millisecond || w > 20*time.Millisecond {
		t.Fatalf("after a Retry-After the backoff still doubled once: a wait of %v, want within [10ms, 20ms]", w)
	}
	r = newCellRetry(time.Now(), 400*time.Millisecond)
	if w := r.next(ctx, &Error{RetryAfter: time.Second}); w > 400*time.Millisecond-cellReserve || w < 300*time.Millisecond-cellReserve {
		t.Fatalf("Retry-After: 1 s under a 400 ms bound: a wait of %v, want what the bound leaves less %v", w, cellReserve)
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	r = newCellRetry(time.Now(), 0)
	if w := r.next(dctx, &Error{RetryAfter: time.Second}); w > 300*time.Millisecond-cellReserve || w < 200*time.Millisecond-cellReserve {
		t.Fatalf("Retry-After: 1 s under a 300 ms context: a wait of %v, want what the deadline leaves less %v", w, cellReserve)
	}
	r = newCellRetry(time.Now().Add(-time.Second), 500*time.Millisecond)
	if w := r.next(ctx, &Error{}); w > 0 {
		t.Fatalf("a bound already past: a wait of %v, want none (<= 0)", w)
	}

	// The view read after a refusal ends cellReserve before the bound.
	start := time.Now()
	r = newCellRetry(start, 2*time.Second)
	if end, ok := r.refreshEnd(); !ok || !end.Equal(start.Add(2*time.Second-cellReserve)) {
		t.Fatalf("refreshEnd under a 2 s bound: %v %v, want %v", end.Sub(start), ok, 2*time.Second-cellReserve)
	}
	r = newCellRetry(start, 0)
	if _, ok := r.refreshEnd(); ok {
		t.Fatal("refreshEnd without a bound: want none")
	}

	// The loops' pause (Consume, Serve) draws from the same range, or
	// takes Retry-After.
	for trial := 0; trial < 200; trial++ {
		for b := cellBackoffMin; b <= cellBackoffMax; b *= 2 {
			if w := pause(b, errors.New("lost")); w < b/2 || w > b {
				t.Fatalf("pause(%v): %v, want within [%v, %v]", b, w, b/2, b)
			}
		}
	}
	if w := pause(10*time.Millisecond, fmt.Errorf("pop: %w", &Error{Status: 503, RetryAfter: 2 * time.Second})); w != 2*time.Second {
		t.Fatalf("pause after a refusal with Retry-After: 2 s: %v", w)
	}
}

// TestOtherRefusalsNotRetried: a 503 or 429 with any other code is answered
// at once, sent once: only the cell's two codes are retried by the calls.
func TestOtherRefusalsNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		code   string
	}{{503, CodeUnavailable}, {503, CodeDisabled}, {429, CodeRateLimited}, {429, CodeQueueFull}, {503, ""}} {
		t.Run(fmt.Sprintf("%d %s", tc.status, tc.code), func(t *testing.T) {
			t.Parallel()
			b := startCellBroker(t, func(cellReq, int) string {
				return response(tc.status, "Retry-After: 1\r\n", `{"error":"no","code":"`+tc.code+`"}`)
			})
			c := newHTTPClient(t, b.URL())
			_, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{})
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code || e.Attempts != 1 {
				t.Fatalf("err = %v", err)
			}
			b.settled(t, "/push", 1)
		})
	}
}

// requestInbox reads the inbox of a request's push body.
func requestInbox(t *testing.T, body []byte) string {
	t.Helper()
	var p struct {
		Messages []struct {
			Payload RequestEnvelope `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &p); err != nil || len(p.Messages) != 1 || p.Messages[0].Payload.ReplyTo == "" {
		t.Fatalf("request body %s: %v", body, err)
	}
	return p.Messages[0].Payload.ReplyTo
}

// TestRequestCellRefusals: a request whose push is refused by the cell is
// pushed again with a fresh inbox (nothing was delivered); one whose inbox
// pop is refused is not pushed again, its inbox is parked on again.
func TestRequestCellRefusals(t *testing.T) {
	t.Parallel()
	reply := response(200, "", `{"queue":"i","messages":[{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":"answer"}]}`)
	for _, transport := range []string{"own", "net/http"} {
		opts := []Option{}
		if transport == "net/http" {
			opts = append(opts, WithHTTPClient(&http.Client{}))
		}
		t.Run("push refused/"+transport, func(t *testing.T) {
			t.Parallel()
			var accepted atomic.Value // the inbox whose push was applied
			b := startCellBroker(t, func(r cellReq, nth int) string {
				if r.route == "/push" {
					if nth <= 2 {
						return refusal([]string{CodeOwnerMoved, CodeForwardFailed}[nth-1], "")
					}
					accepted.Store(requestInbox(t, r.body))
					return response(201, "", `{"pushed":1}`)
				}
				if in, _ := accepted.Load().(string); in != "" && r.query.Get("queue") == in {
					return reply
				}
				return response(200, "", `{"queue":"x","messages":[]}`) // the pop behind a refused push
			})
			c := newHTTPClient(t, b.URL(), opts...)
			m, err := c.Request(testCtx(t), "rpc", "hi", RequestOptions{Timeout: 5 * time.Second})
			if err != nil || string(m.Payload) != `"answer"` {
				t.Fatalf("Request: %v %v", m, err)
			}
			b.settled(t, "/push", 3)
			inboxes := map[string]bool{}
			for _, r := range b.sent("/push") {
				inboxes[requestInbox(t, r.body)] = true
			}
			if len(inboxes) != 3 {
				t.Fatalf("pushes used %d inboxes, want a fresh one each: %v", len(inboxes), inboxes)
			}
			final := accepted.Load().(string)
			n := 0
			for _, r := range b.sent("/pop") {
				if r.query.Get("queue") == final {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d pops on the delivered request's inbox, want 1", n)
			}
		})
		t.Run("inbox pop refused/"+transport, func(t *testing.T) {
			t.Parallel()
			b := startCellBroker(t, func(r cellReq, nth int) string {
				if r.route == "/push" {
					return response(201, "", `{"pushed":1}`)
				}
				if nth <= 2 {
					return refusal(CodeForwardFailed, "")
				}
				return reply
			})
			c := newHTTPClient(t, b.URL(), opts...)
			m, err := c.Request(testCtx(t), "rpc", "hi", RequestOptions{Timeout: 5 * time.Second})
			if err != nil || string(m.Payload) != `"answer"` {
				t.Fatalf("Request: %v %v", m, err)
			}
			b.settled(t, "/push", 1)
			b.settled(t, "/pop", 3)
			inbox := requestInbox(t, b.sent("/push")[0].body)
			for _, r := range b.sent("/pop") {
				if r.query.Get("queue") != inbox || r.query.Get("wait") != "true" || r.query.Get("autoAck") != "true" {
					t.Fatalf("pop %s, want a waiting autoAck pop on %s", r.query, inbox)
				}
			}
		})
		// Parked again after the refusal, the inbox's pops end empty (their
		// wait over) and no reply ever comes: the request ends with
		// ErrRequestTimeout, not with a message. Kills reqreply.go:130's
		// `len(res.Messages) >= 0` (a panic on the empty answer).
		t.Run("inbox pop refused, then no reply/"+transport, func(t *testing.T) {
			t.Parallel()
			b := startCellBroker(t, func(r cellReq, nth int) string {
				switch {
				case r.route == "/push":
					return response(201, "", `{"pushed":1}`)
				case nth == 1:
					return refusal(CodeForwardFailed, "")
				}
				return response(200, "", `{"queue":"i","messages":[]}`)
			})
			c := newHTTPClient(t, b.URL(), opts...)
			m, err := c.Request(testCtx(t), "rpc", "hi", RequestOptions{Timeout: 500 * time.Millisecond})
			if !errors.Is(err, ErrRequestTimeout) || m != nil {
				t.Fatalf("Request: %v %v, want ErrRequestTimeout", m, err)
			}
			if n := len(b.sent("/pop")); n < 2 {
				t.Fatalf("%d pops, want the inbox parked on again after the refusal", n)
			}
		})
	}
}

// pushedPayloads reads the payloads (numbers) of a push body.
func pushedPayloads(t *testing.T, body []byte) []int {
	t.Helper()
	var p struct {
		Messages []struct {
			Payload int `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("push body %s: %v", body, err)
	}
	out := make([]int, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.Payload
	}
	return out
}

// TestBufferedPushDrainsThroughCellRefusals: buffered batches refused by
// the cell (interleaved with a queue_full that halves a batch) are sent
// again whole, and what the broker accepted is never sent again: every
// message is appended exactly once, in order, with no FlushError.
func TestBufferedPushDrainsThroughCellRefusals(t *testing.T) {
	t.Parallel()
	t.Run("scripted", func(t *testing.T) {
		t.Parallel()
		// By push request: the cell refuses 1, 3, 4 and 7, and 6 is a
		// queue_full (its batch of 4 then goes as 2 and 2).
		script := map[int]string{1: CodeOwnerMoved, 3: CodeForwardFailed, 4: CodeOwnerMoved, 6: CodeQueueFull, 7: CodeOwnerMoved}
		var mu sync.Mutex
		var appended []int
		b := startCellBroker(t, func(r cellReq, nth int) string {
			switch code := script[nth]; code {
			case "":
			case CodeQueueFull:
				return response(429, "", `{"error":"full","code":"queue_full"}`)
			default:
				return refusal(code, "")
			}
			msgs := pushedPayloads(t, r.body)
			mu.Lock()
			appended = append(appended, msgs...)
			mu.Unlock()
			return response(201, "", fmt.Sprintf(`{"pushed":%d}`, len(msgs)))
		})
		c := newHTTPClient(t, b.URL(), WithBuffer(BufferOptions{MessageCount: 4, Time: time.Hour}))
		ctx := testCtx(t)
		payloads := make([]any, 20)
		for i := range payloads {
			payloads[i] = i
		}
		if _, err := c.Push(ctx, "q", payloads, PushOptions{Buffered: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		b.settled(t, "/push", 11) // 5 batches, one halved: 6 accepted, 5 refused
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(appended) != fmt.Sprint(payloads) {
			t.Fatalf("appended %v, want each of 0..19 once, in order", appended)
		}
		if n := c.flushRetries.Load(); n != 5 {
			t.Fatalf("%d retries, want 5", n)
		}
		sent := b.sent("/push")
		for nth, code := range script {
			if code != CodeQueueFull && !bytes.Equal(sent[nth-1].body, sent[nth].body) {
				t.Fatalf("push %d refused %s with %s, sent again as %s", nth, code, sent[nth-1].body, sent[nth].body)
			}
		}
	})
	t.Run("a membership change", func(t *testing.T) {
		t.Parallel()
		// Every push is refused for 300 ms from the first, alternately by
		// each code, as while a dead owner waits out the member timeout.
		var mu sync.Mutex
		var appended []int
		var first time.Time
		refused, accepted := 0, 0
		b := startCellBroker(t, func(r cellReq, nth int) string {
			mu.Lock()
			defer mu.Unlock()
			if nth == 1 {
				first = r.at
			}
			if r.at.Sub(first) < 300*time.Millisecond {
				refused++
				return refusal([]string{CodeOwnerMoved, CodeForwardFailed}[nth%2], "")
			}
			msgs := pushedPayloads(t, r.body)
			appended = append(appended, msgs...)
			accepted++
			return response(201, "", fmt.Sprintf(`{"pushed":%d}`, len(msgs)))
		})
		c := newHTTPClient(t, b.URL(), WithBuffer(BufferOptions{MessageCount: 10, Time: 5 * time.Millisecond, MaxPending: 30}))
		ctx := testCtx(t)
		var want []int
		for i := range 100 {
			// One at a time, blocking while 30 are held: the producer is
			// held back by the refusals, never dropped.
			if _, err := c.Push(ctx, "q", []any{i}, PushOptions{Buffered: true}); err != nil {
				t.Fatal(err)
			}
			want = append(want, i)
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(appended) != fmt.Sprint(want) {
			t.Fatalf("appended %v, want each of 0..99 once, in order", appended)
		}
		if n := len(b.sent("/push")); refused < 3 || int(c.flushRetries.Load()) != refused || n != refused+accepted {
			t.Fatalf("%d pushes: %d refused, %d accepted, %d retries", n, refused, accepted, c.flushRetries.Load())
		}
	})
}

// TestLoopsBackOffBetweenRefusedPops: Consume and Serve, their pops
// refused with a 503 that carries no Retry-After, wait the backoff between
// pops (at least half of 10 ms, doubling: 5 + 10 + 20 + 40 ms before the
// fifth pop), reporting each refusal to OnError; with Retry-After: 1 they
// wait that second. Lower bounds only: a loaded machine only waits longer.
func TestLoopsBackOffBetweenRefusedPops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter string
		pops       int
		atLeast    time.Duration
		okFirst    bool // the first pop is answered (the backoff starts again after it)
	}{
		{"backoff", "", 5, 75 * time.Millisecond, false},
		{"backoff after a success", "", 5, 75 * time.Millisecond, true},
		{"Retry-After", "1", 2, time.Second, false},
	} {
		for _, loop := range []string{"Consume", "Serve"} {
			t.Run(loop+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				b := startCellBroker(t, func(r cellReq, nth int) string {
					if tc.okFirst && r.route == "/pop" && nth == 1 {
						return response(200, "", `{"queue":"q","messages":[]}`)
					}
					return refusal(CodeUnavailable, tc.retryAfter)
				})
				c := newClient(t, b.URL())
				ctx, cancel := context.WithCancel(testCtx(t))
				defer cancel()
				var refusals atomic.Int32
				onErr := func(err error) {
					if CodeOf(err) != CodeUnavailable {
						t.Errorf("OnError: %v", err)
					}
					if refusals.Add(1) == int32(tc.pops) {
						cancel()
					}
				}
				var err error
				switch loop {
				case "Consume":
					err = c.Consume(ctx, "q", ConsumeOptions{OnError: onErr}, func(context.Context, Message) error { return nil })
				case "Serve":
					err = c.Serve(ctx, "q", ServeOptions{OnError: onErr}, func(context.Context, Message) (any, error) { return nil, nil })
				}
				if err != nil {
					t.Fatal(err)
				}
				sent := b.sent("/pop")
				if tc.okFirst && len(sent) > 0 {
					sent = sent[1:]
				}
				if len(sent) != tc.pops {
					t.Fatalf("%d pops, want %d", len(sent), tc.pops)
				}
				if took := sent[len(sent)-1].at.Sub(sent[0].at); took < tc.atLeast {
					t.Fatalf("%d pops in %v, want at least %v between the first and the last", len(sent), took, tc.atLeast)
				}
			})
		}
	}
}

// TestConsumeThroughCellRefusals: a consume loop whose waiting pops and
// acks are refused by the cell handles every message once and acks each
// once, and OnError sees nothing (Pop and Ack retried within their bounds).
func TestConsumeThroughCellRefusals(t *testing.T) {
	t.Parallel()
	two := `{"queue":"q","messages":[` +
		`{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":1},` +
		`{"id":"e:1:Default:2","partition":"Default","attempts":0,"payload":2}]}`
	b := startCellBroker(t, func(r cellReq, nth int) string {
		switch r.route {
		case "/pop":
			switch {
			case nth <= 2:
				return refusal([]string{CodeOwnerMoved, CodeForwardFailed}[nth-1], "")
			case nth == 3:
				return response(200, "", two)
			}
			ms, _ := strconv.Atoi(r.query.Get("timeout"))
			time.Sleep(time.Duration(min(ms, 50)) * time.Millisecond)
			return response(200, "", `{"queue":"q","messages":[]}`)
		case "/ack":
			if nth == 1 {
				return refusal(CodeForwardFailed, "")
			}
			var body struct {
				Acks []struct{ ID string } `json:"acks"`
			}
			_ = json.Unmarshal(r.body, &body)
			return response(200, "", `{"results":[{"id":"`+body.Acks[0].ID+`","outcome":"acked"}]}`)
		}
		return response(404, "", `{}`)
	})
	c := newHTTPClient(t, b.URL())
	ctx, stop := context.WithCancel(testCtx(t))
	var mu sync.Mutex
	var handled, reported []string
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "q", ConsumeOptions{Group: "g", Concurrency: 2, Wait: time.Second, OnError: func(err error) {
			mu.Lock()
			reported = append(reported, err.Error())
			mu.Unlock()
		}}, func(_ context.Context, m Message) error {
			mu.Lock()
			handled = append(handled, m.ID)
			mu.Unlock()
			return nil
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(b.sent("/ack")) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	b.settled(t, "/ack", 3)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 2 || handled[0] == handled[1] {
		t.Fatalf("handled %v, want each message once", handled)
	}
	if len(reported) != 0 {
		t.Fatalf("OnError got %q", reported)
	}
	acks := map[string]int{}
	sent := b.sent("/ack")
	for _, r := range sent[1:] {
		acks[string(r.body)]++
	}
	if len(acks) != 2 || !bytes.Equal(sent[0].body, sent[1].body) && !bytes.Equal(sent[0].body, sent[2].body) {
		t.Fatalf("acks %v: want the refused one sent again, and each id acked once", acks)
	}
	pops := b.sent("/pop")
	for _, r := range pops[:3] {
		if r.query.Get("wait") != "true" || r.query.Get("group") != "g" {
			t.Fatalf("pop %s", r.query)
		}
	}
}

// TestServeThroughCellRefusals: Serve's pop refused by the cell is sent
// again after a backoff (and reported); a reply refused by the cell is sent
// again at once, while the pop behind it is still parked, and delivered
// exactly once.
func TestServeThroughCellRefusals(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"own", "net/http", "link"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			requests := `{"queue":"rpc","messages":[` +
				`{"id":"e:1:Default:1","partition":"Default","attempts":0,"payload":{"replyTo":"inbox-a","payload":1}},` +
				`{"id":"e:1:Default:2","partition":"Default","attempts":0,"payload":{"replyTo":"inbox-b","payload":2}}]}`
			var inboxA atomic.Int32
			var parkedEnd atomic.Int64 // when the third pop was answered
			b := startCellBrokerOver(t, transport == "link", func(r cellReq, nth int) string {
				switch r.route {
				case "/pop":
					switch nth {
					case 1:
						return refusal(CodeOwnerMoved, "")
					case 2:
						return response(200, "", requests)
					}
					time.Sleep(500 * time.Millisecond)
					if nth == 3 {
						parkedEnd.Store(time.Now().UnixNano())
					}
					return response(200, "", `{"queue":"rpc","messages":[]}`)
				case "/push":
					var p struct {
						Queue string `json:"queue"`
					}
					_ = json.Unmarshal(r.body, &p)
					if p.Queue == "inbox-a" && inboxA.Add(1) == 1 {
						return refusal(CodeOwnerMoved, "")
					}
					return response(201, "", `{"pushed":1}`)
				}
				return response(404, "", `{}`)
			})
			var c *Client
			switch transport {
			case "net/http":
				c = newHTTPClient(t, b.URL(), WithHTTPClient(&http.Client{}))
			case "link":
				c = newClient(t, b.URL())
			default:
				c = newHTTPClient(t, b.URL())
			}
			ctx, stop := context.WithCancel(testCtx(t))
			var mu sync.Mutex
			var reported []error
			done := make(chan error, 1)
			go func() {
				done <- c.Serve(ctx, "rpc", ServeOptions{Wait: time.Second, OnError: func(err error) {
					mu.Lock()
					reported = append(reported, err)
					mu.Unlock()
				}}, func(_ context.Context, m Message) (any, error) { return "ok", nil })
			}()
			deadline := time.Now().Add(5 * time.Second)
			for parkedEnd.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			pushes := b.sent("/push")
			if len(pushes) != 3 || inboxA.Load() != 2 {
				t.Fatalf("%d replies sent (%d to inbox-a), want inbox-a twice (refused, then applied) and inbox-b once", len(pushes), inboxA.Load())
			}
			last := pushes[len(pushes)-1]
			if last.at.UnixNano() >= parkedEnd.Load() {
				t.Fatalf("the refused reply was sent again only after the parked pop was answered")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(reported) != 1 || CodeOf(reported[0]) != CodeOwnerMoved || !strings.Contains(reported[0].Error(), "/pop") {
				t.Fatalf("OnError got %v, want the pop's owner_moved alone", reported)
			}
			b.settled(t, "/push", 3)
		})
	}
}

// WithHTTPClient's transport bounds a call by WithTimeout as the others
// do, and WithTimeout(0) bounds nothing (an answer 100 ms late is taken).
func TestNetHTTPCallBoundedByItsTimeout(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	b := startCellBroker(t, func(r cellReq, nth int) string {
		if nth == 1 {
			<-stop // never answered while the test runs
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		return response(201, "", `{"pushed":1}`)
	})
	t.Cleanup(func() { close(stop) }) // before the server's own cleanup, which waits for this handler
	c := newHTTPClient(t, b.URL(), WithHTTPClient(&http.Client{}), WithTimeout(300*time.Millisecond))
	start := time.Now()
	if _, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a push never answered: %v after %v, want the call's timeout", err, time.Since(start))
	}
	c = newHTTPClient(t, b.URL(), WithHTTPClient(&http.Client{}), WithTimeout(0))
	if res, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil || res.Pushed != 1 {
		t.Fatalf("a push answered late under WithTimeout(0): %+v %v", res, err)
	}
}

// TestCellRefusalThroughNetHTTP: WithHTTPClient's transport retries the
// same way.
func TestCellRefusalThroughNetHTTP(t *testing.T) {
	t.Parallel()
	b := startCellBroker(t, func(r cellReq, nth int) string {
		if nth <= 2 {
			return refusal(CodeOwnerMoved, "")
		}
		return response(201, "", `{"pushed":1}`)
	})
	c := newHTTPClient(t, b.URL(), WithHTTPClient(&http.Client{}))
	if _, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	b.settled(t, "/push", 3)
}

// TestLoopPopQueries: the waiting pops Consume and Serve send, with their
// options' defaults (docs: ConsumeOptions, ServeOptions): Consume's batch
// is Concurrency by default and never more than the free handler slots,
// Serve's is 16; each waits 10 s unless Wait says otherwise; Serve's pops
// ack automatically, Consume's do not.
func TestLoopPopQueries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		consume *ConsumeOptions
		serve   *ServeOptions
		want    string // the first pop's query, less queue and wait
	}{
		{"Consume defaults", &ConsumeOptions{}, nil, "batch=1&timeout=10000"},
		{"Consume batch is Concurrency", &ConsumeOptions{Concurrency: 4}, nil, "batch=4&timeout=10000"},
		{"Consume batch below Concurrency", &ConsumeOptions{Concurrency: 4, Batch: 2}, nil, "batch=2&timeout=10000"},
		{"Consume batch above Concurrency", &ConsumeOptions{Concurrency: 2, Batch: 8, Group: "g"}, nil, "batch=2&group=g&timeout=10000"},
		{"Consume wait", &ConsumeOptions{Wait: 250 * time.Millisecond, Partition: "p"}, nil, "batch=1&partition=p&timeout=250"},
		{"Serve defaults", nil, &ServeOptions{}, "autoAck=true&batch=16&timeout=10000"},
		{"Serve options", nil, &ServeOptions{Batch: 3, Wait: 300 * time.Millisecond}, "autoAck=true&batch=3&timeout=300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			b := startCellBroker(t, func(r cellReq, _ int) string {
				if r.route == "/pop" {
					cancel() // the loop ends after this pop
				}
				return response(200, "", `{"queue":"q","messages":[]}`)
			})
			c := newClient(t, b.URL())
			var err error
			if tc.consume != nil {
				err = c.Consume(ctx, "q", *tc.consume, func(context.Context, Message) error { return nil })
			} else {
				err = c.Serve(ctx, "q", *tc.serve, func(context.Context, Message) (any, error) { return nil, nil })
			}
			if err != nil {
				t.Fatal(err)
			}
			sent := b.sent("/pop")
			if len(sent) == 0 {
				t.Fatal("no pop sent")
			}
			q := sent[0].query
			if q.Get("queue") != "q" || q.Get("wait") != "true" {
				t.Fatalf("pop query %v: want queue=q and wait=true", q)
			}
			q.Del("queue")
			q.Del("wait")
			if got := q.Encode(); got != tc.want {
				t.Fatalf("pop query %q, want %q", got, tc.want)
			}
		})
	}
}
