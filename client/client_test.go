package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// newHTTPClient is newClient kept on HTTP/1.1 (WithHTTPOnly): for the
// tests of the HTTP transport, and against fake brokers that speak only
// HTTP.
func newHTTPClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	return newClient(t, url, append([]Option{WithHTTPOnly()}, opts...)...)
}

func newClient(t *testing.T, url string, opts ...Option) *Client {
	t.Helper()
	if _, fake := fakeURLs.Load(url); fake {
		opts = append(opts, withoutCellView())
	}
	c, err := New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails t unless err is an *Error with status and code.
func wantCode(t *testing.T, what string, err error, status int, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: err = %v (%T), want *Error %d %s", what, err, err, status, code)
	}
	if e.Status != status || e.Code != code {
		t.Fatalf("%s: got %d %q (%s), want %d %q", what, e.Status, e.Code, e.Message, status, code)
	}
	if !errors.Is(err, &Error{Code: code}) {
		t.Fatalf("%s: errors.Is with code %q is false", what, code)
	}
}

type presence struct {
	User   string `json:"user"`
	Typing bool   `json:"typing"`
}

// TestEveryMethod is the specification's example 35 plus the edges of each
// verb: every method of the client against a real broker.
func TestEveryMethod(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL(), WithToken("ignored-in-mode-none"), WithHeader("X-Test", "1"))
	ctx := testCtx(t)

	cfg, err := c.Configure(ctx, "presence", QueueOptions{MaxLength: 1000, MaxBytes: 1 << 20, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := (QueueOptions{MaxLength: 1000, MaxBytes: 1 << 20, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3}); cfg.Queue != "presence" || cfg.Options != want {
		t.Fatalf("configure answered %s %+v", cfg.Queue, cfg.Options)
	}

	pushed, err := c.Push(ctx, "presence", []any{presence{"alice", true}, json.RawMessage(`{"user":"bob","typing":true}`)}, PushOptions{Partition: "room-7"})
	if err != nil || pushed.Pushed != 2 {
		t.Fatalf("push: %+v %v", pushed, err)
	}
	if p, err := c.Push(ctx, "presence", nil, PushOptions{Partition: "room-7"}); err != nil || p.Pushed != 0 {
		t.Fatalf("empty push: %+v %v", p, err)
	}

	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if qs.Count != 1 || len(qs.Queues) != 1 {
		t.Fatalf("listing: %+v", qs)
	}
	q := qs.Queues[0]
	if q.Queue != "presence" || q.Tier != "declared" || q.Depth != 2 || q.Partitions != 1 || q.Options.MaxLength != 1000 || q.Options.Policy != PolicyDropOldest || q.Options.WindowBuffer != nil {
		t.Fatalf("listing entry: %+v", q)
	}

	d, err := c.Depth(ctx, "presence", DepthOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Queue != "presence" || d.Group != nil || d.Tier != "declared" || d.Pending != 2 || d.PartitionsPending != 1 || len(d.Partitions) != 1 || d.Partitions[0].Partition != "room-7" {
		t.Fatalf("depth: %+v", d)
	}

	popped, err := c.Pop(ctx, "presence", PopOptions{Partition: "room-7", Group: "widget", Batch: 10, Wait: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range popped.Messages {
		var p presence
		if err := m.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if m.Queue != "presence" || m.Partition != "room-7" || m.Attempts != 0 || m.ID == "" {
			t.Fatalf("message: %+v", m)
		}
		users = append(users, p.User)
	}
	if strings.Join(users, ", ") != "alice, bob" {
		t.Fatalf("popped %v", users)
	}

	dg, err := c.Depth(ctx, "presence", DepthOptions{Group: "widget"})
	if err != nil || dg.Group == nil || *dg.Group != "widget" {
		t.Fatalf("depth with group: %+v %v", dg, err)
	}

	acked, err := c.Ack(ctx, "presence", popped.Messages, AckOptions{Group: "widget"})
	if err != nil {
		t.Fatal(err)
	}
	if len(acked.Results) != 2 || acked.Results[0].Outcome != OutcomeAcked || acked.Results[1].Outcome != OutcomeAcked || acked.Results[0].ID != popped.Messages[0].ID {
		t.Fatalf("ack: %+v", acked)
	}
	again, err := c.Ack(ctx, "presence", popped.Messages[:1], AckOptions{Group: "widget"})
	if err != nil || again.Results[0].Outcome != OutcomeUnknown {
		t.Fatalf("second ack: %+v %v", again, err)
	}

	audit, err := c.Pop(ctx, "presence", PopOptions{Partition: "room-7", Group: "audit", Batch: 10})
	if err != nil || len(audit.Messages) != 2 {
		t.Fatalf("audit pop: %+v %v", audit, err)
	}
	// failed: redelivered at once with attempts+1.
	res, err := c.Ack(ctx, "presence", audit.Messages[:1], AckOptions{Group: "audit", Status: StatusFailed})
	if err != nil || res.Results[0].Outcome != OutcomeRedelivered {
		t.Fatalf("failed ack: %+v %v", res, err)
	}
	if _, err := c.Ack(ctx, "presence", audit.Messages[1:], AckOptions{Group: "audit", Status: StatusCompleted}); err != nil {
		t.Fatal(err)
	}
	re, err := c.Pop(ctx, "presence", PopOptions{Partition: "room-7", Group: "audit", Batch: 10})
	if err != nil || len(re.Messages) != 1 || re.Messages[0].Attempts != 1 || re.Messages[0].ID != audit.Messages[0].ID {
		t.Fatalf("redelivery: %+v %v", re, err)
	}

	// An empty pop is an empty, non-nil slice; a waiting one waits.
	start := time.Now()
	empty, err := c.Pop(ctx, "presence", PopOptions{Group: "widget", Wait: true, Timeout: 200 * time.Millisecond})
	if err != nil || empty.Messages == nil || len(empty.Messages) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("empty waiting pop: %+v %v after %v", empty, err, time.Since(start))
	}

	// autoAck in queue mode.
	auto, err := c.Pop(ctx, "presence", PopOptions{Batch: 10, AutoAck: true})
	if err != nil || len(auto.Messages) != 2 {
		t.Fatalf("autoAck pop: %+v %v", auto, err)
	}

	reset, err := c.Reset(ctx, "presence")
	if err != nil || reset.Queue != "presence" || reset.Dropped != 2 {
		t.Fatalf("reset: %+v %v", reset, err)
	}
	del, err := c.Delete(ctx, "presence")
	if err != nil || !del.Deleted || !del.Declared || del.Queue != "presence" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	del, err = c.Delete(ctx, "presence")
	if err != nil || del.Deleted || del.Declared {
		t.Fatalf("second delete: %+v %v", del, err)
	}
	reset, err = c.Reset(ctx, "never-there")
	if err != nil || reset.Dropped != 0 {
		t.Fatalf("reset of nothing: %+v %v", reset, err)
	}
	// A name that needs escaping in the path.
	if _, err := c.Push(ctx, "a/b c?", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Depth(ctx, "a/b c?", DepthOptions{}); err != nil || d.Queue != "a/b c?" || d.Pending != 1 {
		t.Fatalf("depth of an escaped name: %+v %v", d, err)
	}
	if del, err := c.Delete(ctx, "a/b c?"); err != nil || !del.Deleted {
		t.Fatalf("delete of an escaped name: %+v %v", del, err)
	}
}

// TestErrorCodes provokes every refusal a broker in mode none can give.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)

	_, err := c.Push(ctx, "", []any{1}, PushOptions{})
	wantCode(t, "push without queue", err, 400, CodeBadRequest)
	_, err = c.Pop(ctx, "bad\x01name", PopOptions{})
	wantCode(t, "pop with a control character", err, 400, CodeBadRequest)
	_, err = c.Configure(ctx, "q", QueueOptions{Policy: "sometimes"})
	wantCode(t, "configure with a bad policy", err, 400, CodeBadRequest)
	_, err = c.Push(ctx, strings.Repeat("x", 513), []any{1}, PushOptions{})
	wantCode(t, "a name over 512 bytes", err, 400, CodeBadRequest)
	many := make([]any, 10001)
	for i := range many {
		many[i] = i
	}
	_, err = c.Push(ctx, "q", many, PushOptions{})
	wantCode(t, "10,001 messages", err, 400, CodeBadRequest)
	_, err = c.Ack(ctx, "q", make([]Message, 10001), AckOptions{})
	wantCode(t, "10,001 acks", err, 400, CodeBadRequest)

	_, err = c.Depth(ctx, "nope", DepthOptions{})
	wantCode(t, "depth of a missing queue", err, 404, CodeQueueNotFound)
	if !errors.Is(err, ErrQueueNotFound) {
		t.Fatal("errors.Is(err, ErrQueueNotFound) is false")
	}

	if _, err := c.Configure(ctx, "tiny", QueueOptions{MaxLength: 1, Policy: PolicyReject}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "tiny", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Push(ctx, "tiny", []any{2}, PushOptions{})
	wantCode(t, "push to a full reject queue", err, 429, CodeQueueFull)
	if !errors.Is(err, ErrQueueFull) || CodeOf(err) != CodeQueueFull || !err.(*Error).Temporary() {
		t.Fatalf("queue_full helpers: %v", err)
	}

	// A proxy that predates the routes: every route 404s, the depth read
	// with another code than its own.
	old := newClient(t, b.URL()+"/old-proxy")
	checks := map[string]func() error{
		"configure": func() error { _, err := old.Configure(ctx, "q", QueueOptions{}); return err },
		"push":      func() error { _, err := old.Push(ctx, "q", []any{1}, PushOptions{}); return err },
		"pop":       func() error { _, err := old.Pop(ctx, "q", PopOptions{}); return err },
		"ack":       func() error { _, err := old.Ack(ctx, "q", []Message{{ID: "x"}}, AckOptions{}); return err },
		"reset":     func() error { _, err := old.Reset(ctx, "q"); return err },
		"delete":    func() error { _, err := old.Delete(ctx, "q"); return err },
		"queues":    func() error { _, err := old.Queues(ctx); return err },
		"depth":     func() error { _, err := old.Depth(ctx, "q", DepthOptions{}); return err },
	}
	for name, f := range checks {
		wantCode(t, name+" through an old proxy", f(), 404, CodeUnsupported)
	}

	// A broker that cannot be reached is a transport error, not an *Error.
	port, _ := brokertest.FreePort()
	dead := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	if _, err := dead.Queues(ctx); err == nil || CodeOf(err) != "" {
		t.Fatalf("unreachable broker: %v", err)
	}
	if _, err := New("localhost:6632"); err == nil {
		t.Fatal("New accepted a URL without scheme")
	}
}

// TestBudgetRefusals: 503 at the broker's byte total, 403 at the tenant's
// queue allowance. The total counts each queue's charges too (about 700
// bytes for a queue with one small message, docs/engine.md, "What the
// budgets count"): 2048 holds two such queues but not a 2000-byte payload.
// A refused push leaves no queue (docs/engine.md, "A refused push changes
// nothing"), so an allowance of 1 queue admits "two" and refuses "three".
// Connections, which count against the total too, are left out.
func TestBudgetRefusals(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{
		"QUEEN_EPHEMERAL_MAX_BYTES":     "2048",
		"QUEEN_CONNECTION_CHARGE_BYTES": "0", // the client's connections are its own business
		// The queue bound must sit above the broker total, or it refuses first.
		"QUEEN_EPHEMERAL_CEILING_MAX_BYTES": "1048576",
		"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES":   "1048576",
		"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES": "1",
	})
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	big := strings.Repeat("x", 2000)
	_, err := c.Push(ctx, "one", []any{big}, PushOptions{})
	wantCode(t, "push past QUEEN_EPHEMERAL_MAX_BYTES", err, 503, CodeUnavailable)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatal("errors.Is(err, ErrUnavailable) is false")
	}
	if _, err := c.Push(ctx, "two", []any{1}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Push(ctx, "three", []any{1}, PushOptions{})
	wantCode(t, "a queue past the tenant's allowance", err, 403, CodeQuotaExceeded)
}

// TestBufferedBackpressure: a queue of maxLength 5 with reject, a buffer of
// batches of 8 bounded at 16 messages, a slow consumer: every message
// arrives once, in order, and the producer was held back.
func TestBufferedBackpressure(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL(), WithBuffer(BufferOptions{MessageCount: 8, Time: 5 * time.Millisecond, MaxPending: 16, MaxBackoff: 20 * time.Millisecond}))
	ctx := testCtx(t)
	if _, err := c.Configure(ctx, "bp", QueueOptions{MaxLength: 5, Policy: PolicyReject}); err != nil {
		t.Fatal(err)
	}
	const n = 400
	got := make(chan []int, 1)
	go func() {
		var seen []int
		for len(seen) < n && ctx.Err() == nil {
			res, err := c.Pop(ctx, "bp", PopOptions{Group: "g", Batch: 3, Wait: true, Timeout: time.Second})
			if err != nil {
				break
			}
			for _, m := range res.Messages {
				var v int
				_ = m.Decode(&v)
				seen = append(seen, v)
			}
			time.Sleep(time.Millisecond) // slow consumer
			if _, err := c.Ack(ctx, "bp", res.Messages, AckOptions{Group: "g"}); err != nil {
				break
			}
		}
		got <- seen
	}()
	for i := range n {
		if _, err := c.Push(ctx, "bp", []any{i}, PushOptions{Buffered: true}); err != nil {
			t.Fatalf("buffered push %d: %v", i, err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	seen := <-got
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("consumer saw %d messages, want 0..%d in order once each: %v", len(seen), n-1, seen)
	}
	if c.flushRetries.Load() == 0 {
		t.Fatal("no flush met queue_full: the test did not exercise backpressure")
	}
	qs, err := c.Queues(ctx)
	if err != nil || qs.Queues[0].Drops != (Drops{}) {
		t.Fatalf("drops: %+v %v", qs, err)
	}
	t.Logf("%d flush retries against queue_full", c.flushRetries.Load())
}

// TestBufferedFlushFailureReported: a flush that gives up is reported to the
// next buffered push, to Flush and to the handler, never silently dropped.
func TestBufferedFlushFailureReported(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	var handled atomic.Int32
	c := newClient(t, b.URL(), WithBuffer(BufferOptions{MessageCount: 10, Time: time.Millisecond, RetryTimeout: 150 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}),
		WithFlushErrorHandler(func(*FlushError) { handled.Add(1) }))
	ctx := testCtx(t)
	if _, err := c.Configure(ctx, "full", QueueOptions{MaxLength: 1, Policy: PolicyReject}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "full", []any{0}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "full", []any{1, 2, 3}, PushOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	err := c.Flush(ctx)
	var fe *FlushError
	if !errors.As(err, &fe) || fe.Queue != "full" || fe.Messages != 3 {
		t.Fatalf("flush: %v, want a FlushError for 3 messages", err)
	}
	wantCode(t, "the flush's cause", err, 429, CodeQueueFull)
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("a second flush reported again: %v", err)
	}

	// A permanent refusal fails at once, and the next buffered push to that
	// queue reports it.
	if _, err := c.Push(ctx, "bad\x01", []any{1}, PushOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Push(ctx, "bad\x01", []any{2}, PushOptions{Buffered: true})
		if err != nil {
			wantCode(t, "the next buffered push", err, 400, CodeBadRequest)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed flush was never reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for handled.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if handled.Load() < 2 {
		t.Fatalf("the handler saw %d failures, want at least 2", handled.Load())
	}
}

// TestBufferedRetriesArePaced: a flush refused again and again waits the
// backoff between sends (half of 10 ms at least, doubling up to
// MaxBackoff), from its first refusal and again after a part of its batch
// was accepted, so within its RetryTimeout it sends a bounded number of
// times: at most 1 + 300/10 retries with a MaxBackoff of 20 ms, whatever
// the load (a slower machine sends fewer). Queues of one message: one
// already full refuses every send; an empty one takes the first of two
// messages and refuses the second until the flush gives up.
func TestBufferedRetriesArePaced(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	ctx := testCtx(t)
	for _, tc := range []struct {
		queue    string
		prefill  bool
		messages []any
	}{
		{"full", true, []any{"a"}},
		{"one", false, []any{"a", "b"}},
	} {
		c := newClient(t, b.URL(), WithBuffer(BufferOptions{MessageCount: 10, Time: time.Millisecond, RetryTimeout: 300 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}))
		if _, err := c.Configure(ctx, tc.queue, QueueOptions{MaxLength: 1, Policy: PolicyReject}); err != nil {
			t.Fatal(err)
		}
		if tc.prefill {
			if _, err := c.Push(ctx, tc.queue, []any{"x"}, PushOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Push(ctx, tc.queue, tc.messages, PushOptions{Buffered: true}); err != nil {
			t.Fatal(err)
		}
		err := c.Flush(ctx)
		var fe *FlushError
		if !errors.As(err, &fe) || fe.Messages != 1 {
			t.Fatalf("%s: flush: %v, want a FlushError for one message", tc.queue, err)
		}
		wantCode(t, tc.queue+": the flush's cause", err, 429, CodeQueueFull)
		if d, err := c.Depth(ctx, tc.queue, DepthOptions{}); err != nil || d.Pending != 1 {
			t.Fatalf("%s: depth: %+v %v, want one message", tc.queue, d, err)
		}
		if n := c.flushRetries.Load(); n < 1 || n > 32 {
			t.Fatalf("%s: %d retries in a RetryTimeout of 300 ms, want at least 1 and at most 32", tc.queue, n)
		}
	}
}

// TestRetryAfterHonoured: a fake broker refuses with 429 rate_limited and
// Retry-After: 1 (a refusal the real broker in mode none never gives).
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	var first, second atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/ephemeral/push" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if calls.Add(1) == 1 {
			first.Store(time.Now().UnixNano())
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			fmt.Fprint(w, `{"error":"slow down","code":"rate_limited"}`)
			return
		}
		second.Store(time.Now().UnixNano())
		w.WriteHeader(201)
		fmt.Fprint(w, `{"pushed":1}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, WithBuffer(BufferOptions{Time: time.Millisecond}))
	ctx := testCtx(t)
	_, err := c.Push(ctx, "q", []any{1}, PushOptions{})
	wantCode(t, "unbuffered push", err, 429, CodeRateLimited)
	if err.(*Error).RetryAfter != time.Second {
		t.Fatalf("RetryAfter = %v", err.(*Error).RetryAfter)
	}
	calls.Store(0)
	if _, err := c.Push(ctx, "q", []any{1}, PushOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("%d push calls, want 2", calls.Load())
	}
	if gap := time.Duration(second.Load() - first.Load()); gap < 950*time.Millisecond {
		t.Fatalf("retried after %v, Retry-After said 1s", gap)
	}
}

// TestRequestReply100: one responder loop, 100 concurrent requesters, each
// gets its own answer; a request nobody answers times out.
func TestRequestReply100(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(cctx, "rpc", ConsumeOptions{Group: "workers", Concurrency: 16, Wait: time.Second}, func(ctx context.Context, m Message) error {
			env, err := ParseRequest(m)
			if err != nil {
				return err
			}
			var n int
			if err := json.Unmarshal(env.Payload, &n); err != nil {
				return err
			}
			return c.Reply(ctx, m, map[string]int{"n": n, "double": 2 * n})
		})
	}()
	requestDoubles(t, c, "rpc", 100)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}

	start := time.Now()
	_, err := c.Request(ctx, "nobody-listens", "hello", RequestOptions{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrRequestTimeout) || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("unanswered request: %v after %v", err, time.Since(start))
	}
	if err := c.Reply(ctx, Message{Payload: json.RawMessage(`{"x":1}`)}, 1); err == nil {
		t.Fatal("Reply to a message without replyTo succeeded")
	}
}

// A Request's push answered with any 2xx (200 and 299 here, not only the
// broker's 201) is a success, and its reply is waited for, over each
// transport: a link (the push and the inbox's pop in one write), HTTP/1.1
// (both on one connection) and net/http (one after the other).
func TestRequestAfterAny2xxPush(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"link", "http", "net/http"} {
		for _, status := range []int{200, 299} {
			t.Run(fmt.Sprint(transport, " ", status), func(t *testing.T) {
				t.Parallel()
				b := startCellBrokerOver(t, transport == "link", func(r cellReq, _ int) string {
					switch r.route {
					case "/push":
						return response(status, "", `{"pushed":1}`)
					case "/pop":
						return response(200, "", `{"queue":"`+r.query.Get("queue")+`","messages":[{"id":"e:1:Default:0","partition":"Default","attempts":0,"payload":"pong"}]}`)
					}
					return response(404, "", `{"error":"no such route","code":"not_found"}`)
				})
				var c *Client
				switch transport {
				case "link":
					c = newClient(t, b.URL())
				case "http":
					c = newHTTPClient(t, b.URL())
				default:
					c = newHTTPClient(t, b.URL(), WithHTTPClient(&http.Client{}))
				}
				m, err := c.Request(testCtx(t), "rpc", "ping", RequestOptions{}) // no Timeout: the default 30 s
				if err != nil || string(m.Payload) != `"pong"` {
					t.Fatalf("request: %v %v, want the reply", m, err)
				}
				if n := len(b.sent("/pop")); n != 1 {
					t.Fatalf("%d pops of the inbox, want 1", n)
				}
			})
		}
	}
}

// TestConsume: failures are acked failed and redelivered, successes
// completed; cancel stops the loop after the handlers in flight; Close
// stops a running loop too.
func TestConsume(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	const n = 20
	for i := range n {
		if _, err := c.Push(ctx, "jobs", []any{i}, PushOptions{Partition: fmt.Sprint("p", i%3)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	completed := map[int]int{}
	var failedOnce, running, peak atomic.Int32
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(cctx, "jobs", ConsumeOptions{Group: "g", Concurrency: 4, Batch: 8, Wait: 200 * time.Millisecond}, func(ctx context.Context, m Message) error {
			r := running.Add(1)
			defer running.Add(-1)
			for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
			}
			var v int
			_ = m.Decode(&v)
			time.Sleep(2 * time.Millisecond)
			if v%5 == 0 && m.Attempts == 0 {
				failedOnce.Add(1)
				return errors.New("first attempt fails")
			}
			if v == 7 && m.Attempts == 0 {
				panic("handler panics")
			}
			mu.Lock()
			completed[v]++
			full := len(completed) == n
			mu.Unlock()
			if full {
				cancel()
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Consume did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if completed[i] != 1 {
			t.Fatalf("message %d completed %d times: %v", i, completed[i], completed)
		}
	}
	if failedOnce.Load() != 4 || peak.Load() > 4 {
		t.Fatalf("failed once %d (want 4), peak concurrency %d (at most 4)", failedOnce.Load(), peak.Load())
	}
	d, err := c.Depth(ctx, "jobs", DepthOptions{Group: "g"})
	if err != nil || d.Pending != 0 {
		t.Fatalf("depth after the loop: %+v %v", d, err)
	}

	// Close stops a loop that is parked on an empty queue.
	c2, _ := New(b.URL())
	done2 := make(chan error, 1)
	go func() {
		done2 <- c2.Consume(ctx, "idle", ConsumeOptions{Wait: 5 * time.Second}, func(context.Context, Message) error { return nil })
	}()
	time.Sleep(100 * time.Millisecond)
	if err := c2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("Consume after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not stop Consume")
	}
	_, err = c2.Push(ctx, "idle", []any{1}, PushOptions{})
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("push after close: %v", err)
	}
}

// TestCloseFlushes: buffered messages waiting on a long timer are delivered
// by Close.
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c, err := New(b.URL(), WithBuffer(BufferOptions{MessageCount: 1000, Time: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 250 {
		if _, err := c.Push(ctx, "later", []any{i}, PushOptions{Buffered: true, Partition: fmt.Sprint("p", i%2)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "later", []any{1}, PushOptions{Buffered: true}); !errors.Is(err, ErrClosed) {
		t.Fatalf("buffered push after close: %v", err)
	}
	c2 := newClient(t, b.URL())
	d, err := c2.Depth(ctx, "later", DepthOptions{})
	if err != nil || d.Pending != 250 {
		t.Fatalf("depth after Close: %+v %v", d, err)
	}
}

// TestBufferedFlushWithoutFlush: a buffer sends by itself when a batch is
// full (MessageCount messages exactly, in one push, the timer an hour away)
// and when its oldest message has waited Time (one message, far from a
// batch), with no Flush or Close to push it. The server records the
// messages of each push per queue.
func TestBufferedFlushWithoutFlush(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	pushes := map[string][]int{} // queue -> messages per push, in order
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			if req.target != apiPrefix+"/push" {
				if _, err := io.WriteString(nc, response(200, "", `{"queues":[]}`)); err != nil {
					return
				}
				continue
			}
			var body struct {
				Queue    string            `json:"queue"`
				Messages []json.RawMessage `json:"messages"`
			}
			if err := json.Unmarshal(req.body, &body); err != nil {
				return
			}
			var i int
			if _, err := fmt.Sscanf(body.Queue, "slow-%d", &i); err == nil {
				time.Sleep(time.Duration(i) * 20 * time.Millisecond) // a slow broker
			}
			mu.Lock()
			pushes[body.Queue] = append(pushes[body.Queue], len(body.Messages))
			mu.Unlock()
			if _, err := io.WriteString(nc, response(201, "", fmt.Sprintf(`{"pushed":%d}`, len(body.Messages)))); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	sent := func(queue string) []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(pushes[queue])
	}
	total := func(queue string) (n int) {
		for _, k := range sent(queue) {
			n += k
		}
		return n
	}
	push := func(c *Client, queue string, v int) {
		t.Helper()
		if _, err := c.Push(ctx, queue, []any{v}, PushOptions{Buffered: true}); err != nil {
			t.Fatal(err)
		}
	}

	// Three of a batch of 4 are held; the fourth is pushed after a round
	// trip, with the buffer's loop at rest on its timer, so that it is
	// what wakes the loop.
	full := newClient(t, f.URL(), WithBuffer(BufferOptions{MessageCount: 4, Time: time.Hour}))
	for i := range 3 {
		push(full, "full-batch", i)
	}
	if _, err := full.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent("full-batch"); len(got) != 0 {
		t.Fatalf("pushes of %v messages with 3 of a batch of 4 buffered and Time an hour", got)
	}
	push(full, "full-batch", 3)
	awaitCond(t, 10*time.Second, "a full batch of 4 sent with the timer an hour away", func() bool { return total("full-batch") == 4 })
	if got := sent("full-batch"); !slices.Equal(got, []int{4}) {
		t.Fatalf("pushes of %v messages, want one of 4", got)
	}
	// A Flush is over when it returns: the next messages are held again.
	if err := full.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		push(full, "full-batch", 4+i)
	}
	if _, err := full.Queues(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent("full-batch"); !slices.Equal(got, []int{4}) {
		t.Fatalf("pushes of %v messages after a Flush, with 3 of a batch of 4 buffered and Time an hour", got)
	}

	// Flush waits for every buffer: the server answers queue slow-i's
	// push only after i*20 ms.
	many := newClient(t, f.URL(), WithBuffer(BufferOptions{MessageCount: 100, Time: time.Hour}))
	for i := range 5 {
		push(many, fmt.Sprint("slow-", i), i)
	}
	if err := many.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if n := total(fmt.Sprint("slow-", i)); n != 1 {
			t.Fatalf("slow-%d: %d messages when Flush returned, want 1", i, n)
		}
	}

	// The second message is pushed with the buffer's loop at rest (the
	// first was flushed), so that it is what wakes the loop.
	aged := newClient(t, f.URL(), WithBuffer(BufferOptions{MessageCount: 100, Time: 10 * time.Millisecond}))
	push(aged, "lone", 0)
	if err := aged.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	push(aged, "lone", 1)
	awaitCond(t, 10*time.Second, "a lone message sent once it waited Time", func() bool { return total("lone") == 2 })
}

// TestCloseGivingUpSendsNothingMore: when Close's context ends while a
// buffered push is unanswered and more messages wait behind it, every
// message is reported in FlushErrors that match ErrClosed, and none of
// those that waited is sent afterwards, over HTTP/1.1 and over a link. The
// server answers nothing until Close has returned, then answers every
// request it read; the client closes the connection once nothing on it is
// unanswered, and the server counts the pushes it read up to then. (Over a
// connection still open when Close gives up, a push started afterwards
// would be written: the flusher must stop rather than try them.)
func TestCloseGivingUpSendsNothingMore(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"http", "link"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			closeGivingUpSendsNothingMore(t, tr == "link")
		})
	}
}

// acceptUpgrade reads a link upgrade's request and switches protocols;
// false when the connection ended first.
func acceptUpgrade(nc net.Conn, br *bufio.Reader) bool {
	if _, err := readRequest(br); err != nil {
		return false
	}
	_, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: queen-link/1\r\nConnection: Upgrade\r\n\r\n")
	return err == nil
}

// nextRequest reads the next request a fake server is sent: a link's
// request frame (other frames skipped; id is its stream) or an HTTP/1.1
// request. ok is false once the connection has ended.
func nextRequest(br *bufio.Reader, overLink bool) (id uint64, ok bool) {
	if !overLink {
		_, err := readRequest(br)
		return 0, err == nil
	}
	for {
		var h [link.HeaderLen]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return 0, false
		}
		typ, sid, n := link.ParseHeader(h[:])
		if _, err := io.CopyN(io.Discard, br, int64(n)); err != nil {
			return 0, false
		}
		if typ == link.FrameRequest {
			return sid, true
		}
	}
}

// A call whose context has already ended sends nothing, over HTTP/1.1 and
// over a link, after a first call has opened the connection (a pipelined
// connection would otherwise write it while its caller is told it failed:
// Close giving up once had a buffer's next batch sent so).
func TestEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	for _, tr := range []string{"http", "link"} {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			overLink := tr == "link"
			var requests atomic.Int32
			answered := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n" + `{"pushed":1}`
			f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
				if overLink && !acceptUpgrade(nc, br) {
					return
				}
				for {
					id, ok := nextRequest(br, overLink)
					if !ok {
						return
					}
					out := []byte(answered)
					if overLink {
						out = append(link.AppendHeader(nil, link.FrameAnswer, id, len(answered)), answered...)
					}
					requests.Add(1)
					if _, err := nc.Write(out); err != nil {
						return
					}
				}
			})
			opts := []Option{withoutCellView()}
			if !overLink {
				opts = append(opts, WithHTTPOnly())
			}
			c, err := New(f.URL(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if _, err := c.Push(testCtx(t), "q", []any{1}, PushOptions{}); err != nil {
				t.Fatal(err)
			}
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := c.Push(ended, "q", []any{2}, PushOptions{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("push with an ended context: %v, want context.Canceled", err)
			}
			if _, err := c.Push(testCtx(t), "q", []any{3}, PushOptions{}); err != nil {
				t.Fatal(err)
			}
			if n := requests.Load(); n != 2 {
				t.Fatalf("the server read %d pushes, want 2: the one with an ended context was sent", n)
			}
		})
	}
}

func closeGivingUpSendsNothingMore(t *testing.T, overLink bool) {
	release := make(chan struct{})
	var pushes atomic.Int32
	final := make(chan int32, 4)
	answered := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n" + `{"pushed":1}`
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		read := make(chan uint64, 64)
		go func() {
			<-release
			for id := range read {
				out := []byte(answered)
				if overLink {
					out = append(link.AppendHeader(nil, link.FrameAnswer, id, len(answered)), answered...)
				}
				if _, err := nc.Write(out); err != nil {
					return
				}
			}
		}()
		defer func() { final <- pushes.Load() }()
		defer close(read)
		if overLink && !acceptUpgrade(nc, br) {
			return
		}
		for {
			id, ok := nextRequest(br, overLink)
			if !ok {
				return
			}
			pushes.Add(1)
			read <- id
		}
	})
	opts := []Option{WithTimeout(time.Minute), WithBuffer(BufferOptions{MessageCount: 2, Time: time.Millisecond, MaxPending: 8}), withoutCellView()}
	if !overLink {
		opts = append(opts, WithHTTPOnly())
	}
	c, err := New(f.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	for i := range 6 {
		if _, err := c.Push(ctx, "q", []any{i}, PushOptions{Buffered: true}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCond(t, 10*time.Second, "the first batch read by the server", func() bool { return pushes.Load() == 1 })
	closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = c.Close(closeCtx)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want ErrClosed and its context's end", err)
	}
	var reported int
	var walk func(error)
	walk = func(err error) {
		var fe *FlushError
		if errors.As(err, &fe) && err == error(fe) {
			reported += fe.Messages
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	if reported != 6 {
		t.Fatalf("FlushErrors count %d messages, want the 6 buffered: %v", reported, err)
	}
	close(release)
	select {
	case n := <-final:
		if n != 1 {
			t.Fatalf("the server read %d pushes, want 1: the messages queued behind the unanswered one were sent after Close gave up", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not close its connection once its push was answered")
	}
}

// TestAckIDs: ids kept apart from their messages settle as Ack does.
func TestAckIDs(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	if _, err := c.Push(ctx, "work", []any{1, 2}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Pop(ctx, "work", PopOptions{Group: "g", Batch: 2})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %+v %v", res, err)
	}
	ids := []string{res.Messages[0].ID, res.Messages[1].ID, "e:00:Default:9"}
	out, err := c.AckIDs(ctx, "work", ids, AckOptions{Group: "g"})
	if err != nil || len(out.Results) != 3 {
		t.Fatalf("AckIDs: %+v %v", out, err)
	}
	for i, want := range []string{OutcomeAcked, OutcomeAcked, OutcomeStale} {
		if r := out.Results[i]; r.ID != ids[i] || r.Outcome != want {
			t.Fatalf("result %d: %+v, want %s for %s", i, r, want, ids[i])
		}
	}
}

// Payloads pushes a typed slice: each element arrives as its own message,
// marshalled as encoding/json would, in order.
func TestPushPayloadsOfAType(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	type event struct {
		User   string `json:"user"`
		Typing bool   `json:"typing"`
	}
	events := []event{{"alice", true}, {"bob", false}}
	res, err := c.Push(ctx, "typed", Payloads(events...), PushOptions{})
	if err != nil || res.Pushed != 2 {
		t.Fatalf("Push = %+v, %v; want 2 pushed", res, err)
	}
	popped, err := c.Pop(ctx, "typed", PopOptions{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(popped.Messages) != 2 {
		t.Fatalf("popped %d messages, want 2", len(popped.Messages))
	}
	for i, m := range popped.Messages {
		want, _ := json.Marshal(events[i])
		if string(m.Payload) != string(want) {
			t.Errorf("message %d payload %s, want %s", i, m.Payload, want)
		}
	}
	if got := Payloads[int](); len(got) != 0 {
		t.Errorf("Payloads() = %v, want empty", got)
	}
}

// TestRequestTimeoutBoundsThePush: Request's timeout bounds its push as well
// as the wait for the reply. Against a server that never answers, a
// request with a 300 ms timeout on a client whose call timeout is a minute
// returns near 300 ms (it used to wait the minute).
func TestRequestTimeoutBoundsThePush(t *testing.T) {
	t.Parallel()
	silent := brokertest.SilentServer(t)
	c, err := New("http://"+silent, WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c.Close(ctx)
	}()
	start := time.Now()
	_, err = c.Request(context.Background(), "q", "x", RequestOptions{Timeout: 300 * time.Millisecond})
	took := time.Since(start)
	if err == nil {
		t.Fatal("a request to a silent server succeeded")
	}
	// The old bound was the call timeout (a minute): anything near the
	// request's own 300 ms, with room for a loaded machine, is the new one.
	// (Not 5 s or more: with the push bounded by the call timeout, the
	// link's upgrade bound ended it at 5.0 s; reqreply.go:170's
	// `left >= push.timeout` lived under a bound of 10 s.)
	if took < 290*time.Millisecond || took > 3*time.Second {
		t.Fatalf("returned after %v (%v), want about the request's 300 ms timeout", took, err)
	}
}

// TestNewRefusals: New refuses a URL it cannot reach a broker at and a
// header it cannot send (a name with a separator, an empty name, a line
// break in a value, the token's included), and keeps a path prefix without
// its trailing slashes.
func TestNewRefusals(t *testing.T) {
	for _, u := range []string{"localhost:6632", "ftp://h:1", "http://", "https://", "http://h:1/%zz"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted it", u)
		}
	}
	for _, o := range []struct {
		what string
		opt  Option
	}{
		{"a name with a space", WithHeader("X Bad", "v")},
		{"a name with a colon", WithHeader("X:Bad", "v")},
		{"a name with CR", WithHeader("X\rBad", "v")},
		{"a name with LF", WithHeader("X\nBad", "v")},
		{"an empty name", WithHeader("", "v")},
		{"a value with CR", WithHeader("X-Ok", "a\rb")},
		{"a value with LF", WithHeader("X-Ok", "a\nb")},
		{"a token with a line break", WithToken("t\r\nX-Evil: 1")},
	} {
		if _, err := New("http://127.0.0.1:1", o.opt); err == nil {
			t.Errorf("%s: New accepted it", o.what)
		}
	}
	for in, want := range map[string]string{
		"http://127.0.0.1:1/queen//": "http://127.0.0.1:1/queen",
		"https://example.test/":      "https://example.test",
		"http://127.0.0.1:1":         "http://127.0.0.1:1",
	} {
		c, err := New(in, WithHeader("X-Ok", "v: w"), WithToken("t"))
		if err != nil {
			t.Fatalf("New(%q): %v", in, err)
		}
		if c.URL() != want {
			t.Errorf("New(%q).URL() = %q, want %q", in, c.URL(), want)
		}
	}
}

// TestOptionDefaults: WithTimeout's default is 30 s; WithBuffer keeps the
// default of every field left zero (BufferOptions' docs), takes every
// field given, and a negative RetryTimeout (retry until Close).
func TestOptionDefaults(t *testing.T) {
	c, err := New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if c.timeout != 30*time.Second || c.buf != defaultBuffer || cap(c.slots) != defaultBuffer.MaxPending {
		t.Fatalf("defaults: timeout %v, buffer %+v, %d slots", c.timeout, c.buf, cap(c.slots))
	}
	want := BufferOptions{MessageCount: 100, Time: 100 * time.Millisecond, MaxPending: 10000, RetryTimeout: 30 * time.Second, MaxBackoff: time.Second}
	if defaultBuffer != want {
		t.Fatalf("default buffer %+v, want the documented %+v", defaultBuffer, want)
	}
	c, _ = New("http://127.0.0.1:1", WithBuffer(BufferOptions{}))
	if c.buf != want {
		t.Fatalf("WithBuffer of zero fields: %+v, want the defaults", c.buf)
	}
	set := BufferOptions{MessageCount: 1, Time: time.Nanosecond, MaxPending: 1, RetryTimeout: -1, MaxBackoff: time.Nanosecond}
	c, _ = New("http://127.0.0.1:1", WithBuffer(set))
	if c.buf != set || cap(c.slots) != 1 {
		t.Fatalf("WithBuffer(%+v): %+v, %d slots", set, c.buf, cap(c.slots))
	}
}

// TestRefusalDecoding: how a refusal's answer becomes an *Error: the code
// and prose of its body (a body that is not JSON is the message, cut at 512
// bytes), a 404 of a route that has its own 404 kept and any other 404
// CodeUnsupported, Retry-After in seconds or as an HTTP date (one past is
// 0), and the errors.Is and Temporary rules.
func TestRefusalDecoding(t *testing.T) {
	e := apiError(answer{status: 503}, []byte(`{"error":"moved","code":"owner_moved"}`), "POST", "/api/v1/ephemeral/push", "")
	if e.Status != 503 || e.Code != CodeOwnerMoved || e.Message != "moved" || e.Attempts != 1 || e.RetryAfter != 0 {
		t.Fatalf("%+v", e)
	}
	if got, want := e.Error(), "queen: POST /api/v1/ephemeral/push: 503 owner_moved: moved"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := ErrOwnerMoved.Error(); got != "queen: owner_moved" {
		t.Fatalf("a code's Error() = %q", got)
	}
	long := " " + strings.Repeat("x", 600)
	if e := apiError(answer{status: 502}, []byte(long), "GET", "/q", ""); e.Message != strings.Repeat("x", 511) || e.Code != "" {
		t.Fatalf("a body that is not JSON: %d bytes of message, code %q", len(e.Message), e.Code)
	}
	if e := apiError(answer{status: 502}, []byte("short"), "GET", "/q", ""); e.Message != "short" {
		t.Fatalf("a short body that is not JSON: %q", e.Message)
	}

	notFound := []byte(`{"error":"no such queue","code":"ephemeral_queue_not_found"}`)
	if e := apiError(answer{status: 404}, notFound, "GET", "/d", CodeQueueNotFound); e.Code != CodeQueueNotFound {
		t.Fatalf("the depth read's own 404: %q", e.Code)
	}
	if e := apiError(answer{status: 404}, notFound, "GET", "/p", ""); e.Code != CodeUnsupported {
		t.Fatalf("a 404 of a route without one: %q", e.Code)
	}
	if e := apiError(answer{status: 404}, []byte(`{"code":"other"}`), "GET", "/d", CodeQueueNotFound); e.Code != CodeUnsupported {
		t.Fatalf("a 404 with another code than the route's own: %q", e.Code)
	}
	if e := apiError(answer{status: 400}, []byte(`{"code":"ephemeral_bad_request"}`), "GET", "/p", ""); e.Code != CodeBadRequest {
		t.Fatalf("a 400: %q", e.Code)
	}

	for ra, want := range map[string]time.Duration{
		"2": 2 * time.Second, " 3 ": 3 * time.Second, "0": 0, "-1": 0, "soon": 0,
		time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat): 0,
	} {
		if e := apiError(answer{status: 429, retryAfter: ra}, nil, "POST", "/p", ""); e.RetryAfter != want {
			t.Errorf("Retry-After %q: %v, want %v", ra, e.RetryAfter, want)
		}
	}
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	if e := apiError(answer{status: 503, retryAfter: date}, nil, "POST", "/p", ""); e.RetryAfter <= 58*time.Minute || e.RetryAfter > time.Hour {
		t.Errorf("Retry-After %q (an hour from now): %v", date, e.RetryAfter)
	}

	full := &Error{Status: 429, Code: CodeQueueFull}
	for _, c := range []struct {
		target error
		want   bool
	}{
		{ErrQueueFull, true},
		{&Error{Status: 429, Code: CodeQueueFull}, true},
		{&Error{Status: 503, Code: CodeQueueFull}, false},
		{ErrRateLimited, false},
		{errors.New("queue_full"), false},
	} {
		if got := errors.Is(full, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %v) = %v", full, c.target, got)
		}
	}
	for status, want := range map[int]bool{429: true, 503: true, 500: false, 400: false, 502: false} {
		if got := (&Error{Status: status}).Temporary(); got != want {
			t.Errorf("Temporary() of a %d: %v", status, got)
		}
	}
}

// TestPopQuery: the pop's query as the route file names its parameters
// (docs/routes.md), and its bound: WithTimeout, a waiting pop's own timeout
// plus WithTimeout (WithTimeout's doc), none for a waiting pop that leaves
// its timeout to the broker (its context bounds it); a sub-millisecond
// timeout is sent as 1 ms, never as 0 (which would not wait).
func TestPopQuery(t *testing.T) {
	c, err := New("http://127.0.0.1:1", WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts      PopOptions
		target    string
		timeout   time.Duration
		exclusive bool
	}{
		{PopOptions{}, "?queue=q", 2 * time.Second, false},
		{PopOptions{Partition: "p 1", Group: "g/h", Batch: 5}, "?queue=q&partition=p+1&group=g%2Fh&batch=5", 2 * time.Second, false},
		{PopOptions{Batch: 1, Wait: true, Timeout: 1500 * time.Millisecond, AutoAck: true}, "?queue=q&batch=1&wait=true&timeout=1500&autoAck=true", 3500 * time.Millisecond, true},
		{PopOptions{Wait: true}, "?queue=q&wait=true", 0, true},
		{PopOptions{Wait: true, Timeout: 500 * time.Microsecond}, "?queue=q&wait=true&timeout=1", 2*time.Second + 500*time.Microsecond, true},
		{PopOptions{Timeout: time.Second}, "?queue=q&timeout=1000", 2 * time.Second, false},
	} {
		cl := c.popCall("q", tc.opts)
		if got, want := string(cl.target), apiPrefix+"/pop"+tc.target; got != want {
			t.Errorf("%+v: %s, want %s", tc.opts, got, want)
		}
		if cl.timeout != tc.timeout || cl.exclusive != tc.exclusive || cl.method != http.MethodGet {
			t.Errorf("%+v: %s, timeout %v, exclusive %v; want GET, %v, %v", tc.opts, cl.method, cl.timeout, cl.exclusive, tc.timeout, tc.exclusive)
		}
		putCall(cl)
	}
}

// TestPayloadsThatCannotBeSent: a payload json.Marshal refuses, or a
// json.RawMessage that is not JSON, is an error before anything is sent or
// buffered, for Push, a buffered Push and Request; a json.RawMessage with
// white space is sent compacted, as json.Marshal would. An https:// broker
// that cannot be reached is a transport error like any other.
func TestPayloadsThatCannotBeSent(t *testing.T) {
	t.Parallel()
	bodies := make(chan string, 16)
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			bodies <- string(req.body)
			if _, err := io.WriteString(nc, response(201, "", `{"pushed":1}`)); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	c := newHTTPClient(t, f.URL(), WithBuffer(BufferOptions{Time: time.Millisecond}))
	for _, p := range []any{make(chan int), json.RawMessage(`{"a":`), json.RawMessage(`{ "a": `)} {
		if _, err := c.Push(ctx, "q", []any{1, p}, PushOptions{}); err == nil {
			t.Fatalf("Push of %v: no error", p)
		}
		if _, err := c.Push(ctx, "q", []any{1, p}, PushOptions{Buffered: true}); err == nil {
			t.Fatalf("buffered Push of %v: no error", p)
		}
		if _, err := c.Request(ctx, "q", p, RequestOptions{Timeout: time.Second}); err == nil {
			t.Fatalf("Request of %v: no error", p)
		}
	}
	raw := json.RawMessage("{ \"a\" :\n [1, 2] }")
	if _, err := c.Push(ctx, "q", []any{raw}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Push(ctx, "b", []any{raw, 2}, PushOptions{Buffered: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"queue":"q","messages":[{"payload":{"a":[1,2]}}]}`, `{"queue":"b","messages":[{"payload":{"a":[1,2]}},{"payload":2}]}`} {
		if got := <-bodies; got != want {
			t.Fatalf("sent %s, want %s (nothing of the refused payloads, the raw one compacted)", got, want)
		}
	}

	port, _ := brokertest.FreePort()
	tls, err := New(fmt.Sprintf("https://127.0.0.1:%d", port), WithURLs(fmt.Sprintf("https://127.0.0.1:%d", port)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.Queues(ctx); err == nil || CodeOf(err) != "" {
		t.Fatalf("an https broker that cannot be reached: %v", err)
	}
}
