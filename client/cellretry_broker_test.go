package client

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cellProxy stands in front of a real broker as a cell member whose relay
// keeps failing: it refuses every third request with 503 owner_moved or
// ephemeral_forward_failed (alternately) without forwarding it, and
// forwards the others. It counts the refusals per route.
type cellProxy struct {
	*httptest.Server
	n       atomic.Int64
	mu      sync.Mutex
	refused map[string]int
}

func startCellProxy(t *testing.T, broker string) *cellProxy {
	t.Helper()
	u, err := url.Parse(broker)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// A pop parked behind a refused push is cancelled when the client
	// closes that connection: expected, not worth a log line.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p := &cellProxy{refused: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := p.n.Add(1)
		if n%3 != 0 {
			rp.ServeHTTP(w, r)
			return
		}
		route := strings.TrimPrefix(r.URL.Path, apiPrefix)
		p.mu.Lock()
		p.refused[route]++
		p.mu.Unlock()
		code := CodeOwnerMoved
		if n%2 == 0 {
			code = CodeForwardFailed
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		fmt.Fprintf(w, `{"error":"the cell is moving","code":%q}`, code)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *cellProxy) refusals(route string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[route]
}

// TestCellRefusalsAgainstBroker: every verb, and the loops on top, through
// a member that refuses a third of all requests, to a real broker: what the
// broker holds afterwards is exactly what was sent, once each (nothing lost
// to a refusal, nothing appended twice by a retry), and no caller saw a
// refusal.
func TestCellRefusalsAgainstBroker(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	p := startCellProxy(t, b.URL())
	c := newHTTPClient(t, p.URL, WithBuffer(BufferOptions{MessageCount: 16, Time: 5 * time.Millisecond}))
	ctx := testCtx(t)

	// Unbuffered pushes, popped with a lease and acked.
	const n = 60
	for i := range n {
		if _, err := c.Push(ctx, "plain", []any{i}, PushOptions{}); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	// Buffered pushes.
	for i := range 300 {
		if _, err := c.Push(ctx, "buffered", []any{i}, PushOptions{Buffered: true}); err != nil {
			t.Fatalf("buffered push %d: %v", i, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	drain := func(queue string, want int, autoAck bool) {
		t.Helper()
		var got []int
		for len(got) < want {
			res, err := c.Pop(ctx, queue, PopOptions{Group: "g", Batch: 50, Wait: true, Timeout: time.Second, AutoAck: autoAck})
			if err != nil {
				t.Fatalf("pop %s: %v", queue, err)
			}
			if len(res.Messages) == 0 {
				t.Fatalf("%s: %d messages, want %d", queue, len(got), want)
			}
			for _, m := range res.Messages {
				var v int
				if err := m.Decode(&v); err != nil {
					t.Fatal(err)
				}
				got = append(got, v)
			}
			if !autoAck {
				acks, err := c.Ack(ctx, queue, res.Messages, AckOptions{Group: "g"})
				if err != nil {
					t.Fatalf("ack %s: %v", queue, err)
				}
				for _, a := range acks.Results {
					if a.Outcome != OutcomeAcked {
						t.Fatalf("ack %s: %+v", queue, a)
					}
				}
			}
		}
		for i, v := range got {
			if v != i {
				t.Fatalf("%s: message %d is %d, want each of 0..%d once, in order", queue, i, v, want-1)
			}
		}
		res, err := c.Pop(ctx, queue, PopOptions{Group: "g", Batch: 50})
		if err != nil || len(res.Messages) != 0 {
			t.Fatalf("%s after draining: %v %v, want nothing left", queue, res, err)
		}
	}
	drain("plain", n, false)
	drain("buffered", 300, true)

	// Request/reply with Serve, and a consume loop.
	sctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var reported []error
	onErr := func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}
	done := make(chan error, 2)
	go func() {
		done <- c.Serve(sctx, "rpc", ServeOptions{Wait: 200 * time.Millisecond, OnError: onErr}, serveDouble)
	}()
	requestDoubles(t, c, "rpc", 30)

	handled := map[int]int{}
	go func() {
		done <- c.Consume(sctx, "work", ConsumeOptions{Group: "w", Concurrency: 4, Wait: 200 * time.Millisecond, OnError: onErr}, func(_ context.Context, m Message) error {
			var v int
			_ = m.Decode(&v)
			mu.Lock()
			handled[v]++
			mu.Unlock()
			return nil
		})
	}()
	for i := range 40 {
		if _, err := c.Push(ctx, "work", []any{i}, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Every message handled, and every ack applied: group w has nothing
	// left to settle (read on the broker itself, past the proxy). A
	// duplicate, pushed twice or delivered again after a lost ack, would
	// have been handled before its own ack settled it, so counting the
	// handled now is final.
	direct := newClient(t, b.URL())
	awaitCond(t, 30*time.Second, "every work message handled and acked", func() bool {
		mu.Lock()
		k := len(handled)
		mu.Unlock()
		d, err := direct.Depth(ctx, "work", DepthOptions{Group: "w"})
		return k == 40 && err == nil && d.Pending == 0
	})
	stop()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("loop: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range 40 {
		if handled[i] != 1 {
			t.Fatalf("work: message %d handled %d times", i, handled[i])
		}
	}
	// The loops report a refused pop (Serve's own, or a Pop that ran out
	// of its wait); nothing else is a refusal they survived.
	for _, err := range reported {
		if code := CodeOf(err); (code != CodeOwnerMoved && code != CodeForwardFailed) || !strings.Contains(err.Error(), "/pop") {
			t.Fatalf("a loop reported %v", err)
		}
	}
	for _, route := range []string{"/push", "/pop", "/ack"} {
		if p.refusals(route) == 0 {
			t.Fatalf("no %s was refused: the test proves nothing", route)
		}
	}
	t.Logf("refused: %v, of %d requests", p.refused, p.n.Load())
}
