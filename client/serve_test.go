package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// serveDouble answers {"n", "double"} to a request whose payload is n.
func serveDouble(_ context.Context, m Message) (any, error) {
	env, err := ParseRequest(m)
	if err != nil {
		return nil, err
	}
	var n int
	if err := json.Unmarshal(env.Payload, &n); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("no answer to a negative number")
	}
	return map[string]int{"n": n, "double": 2 * n}, nil
}

// requestDoubles sends n concurrent requests to queue and checks every answer.
func requestDoubles(t *testing.T, c *Client, queue string, n int) {
	t.Helper()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := c.Request(ctx, queue, i, RequestOptions{Timeout: 10 * time.Second})
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
				return
			}
			var r struct{ N, Double int }
			if err := m.Decode(&r); err != nil || r.N != i || r.Double != 2*i {
				errs <- fmt.Errorf("request %d answered %s (%v)", i, m.Payload, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestServe: two Serve loops answer 200 concurrent requests, each its own
// answer; a request the responder fails, and a message that is no request,
// are reported to OnError and the loop goes on; cancelling ends Serve with
// nil.
func TestServe(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	ctx := testCtx(t)
	sctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var reported []string
	opts := ServeOptions{Batch: 8, Wait: 200 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		reported = append(reported, err.Error())
		mu.Unlock()
	}}
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- c.Serve(sctx, "rpc", opts, serveDouble) }()
	}
	requestDoubles(t, c, "rpc", 200)

	if _, err := c.Request(ctx, "rpc", -1, RequestOptions{Timeout: 300 * time.Millisecond}); !errors.Is(err, ErrRequestTimeout) {
		t.Fatalf("a request the responder fails: %v, want ErrRequestTimeout", err)
	}
	if _, err := c.Push(ctx, "rpc", []any{map[string]int{"x": 1}}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	requestDoubles(t, c, "rpc", 10)
	stop()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(reported, "\n")
	if len(reported) != 2 || !strings.Contains(all, "no answer to a negative number") || !strings.Contains(all, "carries no replyTo") {
		t.Fatalf("OnError got %q, want the responder's error and the message without replyTo", reported)
	}
}

// brokerAndClientOver starts a broker and a client of it over transport:
// "link" (the default) or "http" (WithHTTPOnly).
func brokerAndClientOver(t *testing.T, transport string) (*brokertest.Broker, *Client) {
	t.Helper()
	b := startBroker(t, nil)
	var opts []Option
	if transport == "http" {
		opts = append(opts, WithHTTPOnly())
	}
	return b, newClient(t, b.URL(), opts...)
}

// TestServeSendsRepliesMadeBeforeStop: a reply made by a responder while
// Serve is being stopped still goes to its requester, and Serve ends with
// nil, over a link and over HTTP/1.1 (where the reply is read back before
// the stop may cut anything short).
func TestServeSendsRepliesMadeBeforeStop(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"link", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			_, c := brokerAndClientOver(t, transport)
			ctx := testCtx(t)
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- c.Serve(sctx, "rpc", ServeOptions{Wait: 200 * time.Millisecond}, func(ctx context.Context, m Message) (any, error) {
					stop() // the loop ends after this batch
					return "last words", nil
				})
			}()
			m, err := c.Request(ctx, "rpc", "hello", RequestOptions{Timeout: 5 * time.Second})
			if err != nil || string(m.Payload) != `"last words"` {
				t.Fatalf("the reply made while stopping: %v %v", m, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

// TestServeStopCutsTheWaitingPopShort: stopping Serve while its waiting
// pop is parked behind a batch's replies ends it at once, not when the
// pop's minute-long wait would have ended, over HTTP/1.1 (where the pop
// shares a write with the replies) and over a link.
func TestServeStopCutsTheWaitingPopShort(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"http", "link"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			b, c := brokerAndClientOver(t, transport)
			ctx := testCtx(t)
			sctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Serve(sctx, "rpc", ServeOptions{Wait: time.Minute}, serveDouble) }()
			requestDoubles(t, c, "rpc", 1) // its reply goes with the next waiting pop
			awaitCond(t, 10*time.Second, "the pop behind the reply parked", func() bool {
				return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 1
			})
			stop()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Serve: %v", err)
				}
			case <-time.After(30 * time.Second): // half the pop's wait
				t.Fatal("Serve still waiting 30 s after it was stopped: its pop's wait was not cut short")
			}
		})
	}
}

// TestServeThroughNetHTTP: with WithHTTPClient the same loop sends its
// replies and pop one after the other.
func TestServeThroughNetHTTP(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL(), WithHTTPClient(&http.Client{}))
	ctx := testCtx(t)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Serve(sctx, "rpc", ServeOptions{Wait: 200 * time.Millisecond}, serveDouble) }()
	requestDoubles(t, c, "rpc", 20)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestServeRefusedForGood: a pop refused with a 400 (an invalid queue
// name) ends Serve with that error.
func TestServeRefusedForGood(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c := newClient(t, b.URL())
	err := c.Serve(testCtx(t), "bad\x01name", ServeOptions{}, serveDouble)
	wantCode(t, "Serve on an invalid name", err, 400, CodeBadRequest)
}
