package client

// Transport benchmarks against a real broker (internal/brokertest): push,
// a non-waiting pop and a request/reply round trip, each over links (the
// default, "link"), through the client's own HTTP/1.1 transport ("lean",
// WithHTTPOnly) and through net/http ("nethttp", what WithHTTPClient
// selects), in one run so they compare on the same machine at the same
// moment. Besides ns/op and allocs/op each reports
// cpu-ns/op: the CPU the test process (the client; the broker is another
// process) spent per operation, every thread and the GC included.
//
//	go test -run '^$' -bench . -benchtime 20000x -count 5 ./client/

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchTransports are the transports each benchmark runs through.
var benchTransports = []struct {
	name string
	opts []Option
}{
	{"link", nil},
	{"lean", []Option{WithHTTPOnly()}},
	{"nethttp", []Option{WithHTTPClient(benchHTTPClient())}},
}

// benchHTTPClient is what New built before the lean transport: keep-alive,
// 256 idle connections, no compression.
func benchHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	return &http.Client{Transport: tr}
}

// benchPayload is a 64-byte JSON string, the payload size.
var benchPayload = json.RawMessage(`"` + strings.Repeat("x", 62) + `"`)

func benchClient(b *testing.B, url string, opts []Option) *Client {
	b.Helper()
	c, err := New(url, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// BenchmarkPush: 8 goroutines pushing one 64-byte message each call to a
// dropOldest queue (so it never refuses).
func BenchmarkPush(b *testing.B) {
	br := startBroker(b, nil)
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			c := benchClient(b, br.URL(), tr.opts)
			ctx := context.Background()
			if _, err := c.Configure(ctx, "bench-push", QueueOptions{MaxLength: 1000, Policy: PolicyDropOldest}); err != nil {
				b.Fatal(err)
			}
			payloads := []any{benchPayload}
			b.ReportAllocs()
			b.SetParallelism(4)
			defer reportCPU(b)()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Push(ctx, "bench-push", payloads, PushOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPopNoWait: 8 goroutines popping one message each call without
// waiting, autoAck, from a queue refilled so most pops take a message.
func BenchmarkPopNoWait(b *testing.B) {
	br := startBroker(b, nil)
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			c := benchClient(b, br.URL(), tr.opts)
			ctx := context.Background()
			if _, err := c.Configure(ctx, "bench-pop", QueueOptions{MaxLength: 1 << 20, MaxBytes: 1 << 30, Policy: PolicyDropOldest}); err != nil {
				b.Fatal(err)
			}
			batch := make([]any, 10000)
			for i := range batch {
				batch[i] = benchPayload
			}
			for left := b.N; left > 0; left -= len(batch) {
				if _, err := c.Push(ctx, "bench-pop", batch[:min(left, len(batch))], PushOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			opts := PopOptions{Batch: 1, AutoAck: true}
			b.ReportAllocs()
			b.SetParallelism(4)
			defer reportCPU(b)()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Pop(ctx, "bench-pop", opts); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRequestReply: the shape scaled to the machine: 32
// requesters (Request, a fresh inbox each) and 4 responders (a waiting
// autoAck pop of up to 8, then Reply to each), one client.
func BenchmarkRequestReply(b *testing.B) {
	br := startBroker(b, nil)
	for _, tr := range benchTransports {
		b.Run(tr.name, func(b *testing.B) {
			c := benchClient(b, br.URL(), tr.opts)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						res, err := c.Pop(ctx, "bench-rpc", PopOptions{Batch: 8, Wait: true, Timeout: time.Second, AutoAck: true})
						if err != nil {
							continue
						}
						for _, m := range res.Messages {
							if err := c.Reply(ctx, m, benchPayload); err != nil && ctx.Err() == nil {
								b.Error(err)
							}
						}
					}
				}()
			}
			b.ReportAllocs()
			b.SetParallelism(16) // 32 requesters on 2 cores
			stop := reportCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Request(ctx, "bench-rpc", benchPayload, RequestOptions{Timeout: 10 * time.Second}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			stop()
			cancel()
			wg.Wait()
		})
	}
}
