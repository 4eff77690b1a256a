package client

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPushNotSentAgainOnReusedExclusive: a push on a reused exclusive
// connection whose write fails is reported as maybe applied and never sent
// again (docs/sdk-transport.md, "The retry rule": only a call that is safe
// to repeat is sent again after its connection failed; a reused
// connection's failed write proves nothing more for a push).
//
// A push goes exclusive when every shared connection carries maxPipeline
// calls. The scripted server answers a waiting pop at once (its exclusive
// connection goes to rest), then holds maxShared*maxPipeline pushes
// unanswered, one placed at a time so that they fill the shared
// connections evenly. The next push, too large for the sockets' buffers,
// leases the connection at rest; the server reads its head and 64 KiB of
// its body and resets the connection, so that the client's write fails.
// The server counts the large push's heads and the times it was read
// whole: once, and never.
func TestPushNotSentAgainOnReusedExclusive(t *testing.T) {
	t.Parallel()
	const held = maxShared * maxPipeline
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	arrived := make(chan struct{}, held)
	var bigHeads, bigWhole atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		pending := make(chan struct{}, held)
		var writer sync.WaitGroup
		defer writer.Wait()
		defer close(pending)
		writer.Add(1)
		go func() { // the held pushes' answers, in order, once released
			defer writer.Done()
			for range pending {
				<-release
				_, _ = io.WriteString(nc, response(201, "", `{"pushed":1}`))
			}
		}()
		servedPop := false
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			switch {
			case strings.Contains(req.RequestURI, "/pop?"):
				_, _ = io.Copy(io.Discard, req.Body)
				servedPop = true
				// A small receive buffer on the connection the large push
				// will reuse: the sockets cannot take it in whole before
				// the server reads it, so the client is still writing
				// when the server resets the connection.
				_ = nc.(*net.TCPConn).SetReadBuffer(4096)
				if _, err := io.WriteString(nc, response(200, "", `{"queue":"q","messages":[]}`)); err != nil {
					return
				}
			case req.ContentLength > 1<<20:
				bigHeads.Add(1)
				if servedPop {
					_, _ = io.CopyN(io.Discard, req.Body, 64<<10)
					_ = nc.(*net.TCPConn).SetLinger(0)
					return // a reset while the client still writes
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				bigWhole.Add(1)
				if _, err := io.WriteString(nc, response(201, "", `{"pushed":1}`)); err != nil {
					return
				}
			default:
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				pending <- struct{}{}
				arrived <- struct{}{}
			}
		}
	})
	t.Cleanup(releaseHeld) // before the fake's cleanup waits for its connections
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)

	if _, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res, err := c.Push(ctx, "held", []any{i}, PushOptions{}); err != nil || res.Pushed != 1 {
				failed.Add(1)
				t.Errorf("held push %d: %+v %v", i, res, err)
			}
		}()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("held push %d never reached the server", i)
		}
	}
	p := c.eps[0].(*pool)
	p.mu.Lock()
	shared, idle := len(p.shared), len(p.idle)
	full := true
	for _, s := range p.shared {
		full = full && s.pending.Load() == maxPipeline
	}
	p.mu.Unlock()
	if shared != maxShared || !full || idle != 1 {
		t.Fatalf("before the push: %d shared connections (full: %v), %d at rest; want %d full and the pop's at rest", shared, full, idle, maxShared)
	}

	_, err := c.Push(ctx, "big", []any{strings.Repeat("x", 16<<20)}, PushOptions{})
	if err == nil || CodeOf(err) != "" || !strings.Contains(err.Error(), "may have applied") {
		t.Fatalf("a push whose write failed on a reused exclusive connection: %v; want an error saying the broker may have applied it", err)
	}
	if h, w := bigHeads.Load(), bigWhole.Load(); h != 1 || w != 0 {
		t.Fatalf("the server read the push's head %d times and the whole push %d times; want once and never (it was sent again)", h, w)
	}

	releaseHeld()
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d held pushes failed", n)
	}
}

// TestStrayAnswerNotTakenByNextLease: an exclusive connection that holds
// bytes nobody asked for once its call's answer is read (here a second,
// stray answer the server wrote behind the first) is not put at rest: the
// next call leased from the pool would read that answer as its own, an
// answer going to the wrong caller. The pool closes it instead, and the
// next waiting pop gets its own answer on a fresh connection.
func TestStrayAnswerNotTakenByNextLease(t *testing.T) {
	t.Parallel()
	empty := response(200, "", `{"queue":"q","messages":[]}`)
	stray := response(200, "", `{"queue":"q","messages":[{"id":"stray","partition":"Default","attempts":0,"payload":1}]}`)
	var pops atomic.Int32
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			ans := empty
			if pops.Add(1) == 1 {
				ans += stray // one write: both reach the client together
			}
			if _, err := io.WriteString(nc, ans); err != nil {
				return
			}
		}
	})
	c := newHTTPClient(t, f.URL())
	ctx := testCtx(t)
	for i := range 2 {
		res, err := c.Pop(ctx, "q", PopOptions{Wait: true, Timeout: time.Second})
		if err != nil {
			t.Fatalf("pop %d: %v", i, err)
		}
		if len(res.Messages) != 0 {
			t.Fatalf("pop %d got %d messages (%s): another call's answer", i, len(res.Messages), res.Messages[0].ID)
		}
	}
	if n := pops.Load(); n != 2 {
		t.Fatalf("the server answered %d pops, want 2", n)
	}
	if n := f.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the one holding a stray answer must not be reused", n)
	}
}
