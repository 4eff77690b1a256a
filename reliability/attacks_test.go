//go:build reliability

package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Attacks more than one case makes, against the broker or the gateway.

// startUploads opens n connections to addr, each sending a push head that
// declares size bytes of body and then the body, 64 KiB at a time at full
// speed, until its answer comes or ctx ends. Every answer (or "no answer")
// is counted in cs. It returns, per connection, the body bytes it had sent
// when its answer came; they are final once wg is done.
func startUploads(ctx context.Context, t *testing.T, wg *sync.WaitGroup, addr string, n, size int, cs *codes) []atomic.Int64 {
	sentAtAnswer := make([]atomic.Int64, n)
	for i := range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		var sent atomic.Int64
		answered := make(chan struct{})
		wg.Go(func() { // the answer, whenever it comes
			defer close(answered)
			_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			sentAtAnswer[i].Store(sent.Load())
			if err != nil {
				cs.addKey("no answer")
				return
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			cs.add(resp.StatusCode, b)
		})
		wg.Go(func() { // the body, 64 KiB at a time until answered
			head := request("POST", "/api/v1/ephemeral/push", nil, "Content-Type: application/json", "Content-Length: "+strconv.Itoa(size))
			if _, err := conn.Write(head); err != nil {
				return
			}
			chunk := make([]byte, 64<<10)
			for n := 0; n < size; n += len(chunk) {
				select {
				case <-answered:
					return
				case <-ctx.Done():
					return
				default:
				}
				_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
				w, err := conn.Write(chunk)
				sent.Add(int64(w))
				if err != nil {
					return
				}
			}
		})
	}
	return sentAtAnswer
}

// checkRefusedOnHead records what each upload had sent when answered and
// fails c for one that sent more than 16 MiB first: loopback socket
// buffers hold a few MiB, so more means the body was read, not refused on
// its head.
func (c *rcase) checkRefusedOnHead(what string, sentAtAnswer []atomic.Int64) {
	for i := range sentAtAnswer {
		s := sentAtAnswer[i].Load()
		c.f.Extra[fmt.Sprintf("conn%dMiBSentAtAnswer", i)] = mib(s)
		if s > 16<<20 {
			c.fail("%s %d: %.1f MiB of the body sent before the answer; want it refused on its head", what, i, mib(s))
		}
	}
}

// startSlowHeads opens n connections to addr, each sending head and then
// 'x' forever, one byte every interval, until it is closed; how each ends
// (closed, or an answer) is counted in cs. The returned function reports
// the longest any took to be closed, once wg is done.
func startSlowHeads(ctx context.Context, t *testing.T, wg *sync.WaitGroup, addr string, n int, head string, every time.Duration, cs *codes) (worst func() time.Duration) {
	var mu sync.Mutex
	var longest time.Duration
	for range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		start := time.Now()
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			took := waitClosed(ctx, conn, cs, start)
			mu.Lock()
			longest = max(longest, took)
			mu.Unlock()
		})
		wg.Go(func() {
			for i := 0; ; i++ {
				b := []byte{'x'}
				if i < len(head) {
					b = []byte{head[i]}
				}
				if _, err := conn.Write(b); err != nil {
					return
				}
				select {
				case <-done:
					return
				case <-time.After(every):
				}
			}
		})
	}
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return longest
	}
}
