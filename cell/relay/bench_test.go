package relay

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// The A/B measurement behind the choice of transport (docs/cell-relay.md).
// Both candidates run in one process, owner and caller together, over
// loopback TCP, with the same owner handler; each benchmark runs h2 and
// framed back to back, so -count=N interleaves them.
//
//	go test -run '^$' -bench 'Relay' -benchtime 2s -count 3 ./cell/relay/

// cpuNanos is the process's user+system CPU time (getrusage).
func cpuNanos() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

type doFunc func(context.Context, *link.Request) (link.Response, error)

// candidates set up each transport for the benchmark b given to setup
// (whose cleanup closes it).
func candidates() []struct {
	name  string
	setup func(testing.TB, *testOwner) (doFunc, func() int64)
} {
	return []struct {
		name  string
		setup func(testing.TB, *testOwner) (doFunc, func() int64)
	}{
		{"h2", func(b testing.TB, o *testOwner) (doFunc, func() int64) {
			r := startH2(b, o.handle)
			return r.Do, r.conns.Load
		}},
		{"framed", func(b testing.TB, o *testOwner) (doFunc, func() int64) {
			srv, addr := startServer(b, o, nil)
			c := newClient(b, nil)
			return func(ctx context.Context, r *link.Request) (link.Response, error) { return c.Do(ctx, addr, r) },
				func() int64 { return int64(srv.Conns()) }
		}},
	}
}

// benchRequest is a push of one 100-byte message, as the landing member
// would relay it.
func benchRequest() *link.Request {
	return &link.Request{Tenant: []byte("acme"), Access: 3, Method: []byte("POST"),
		Target: []byte("/fixed"), Header: []byte("Content-Type: application/json\r\n"),
		Body: []byte(`{"items":[{"partition":"p","data":"` + strings.Repeat("x", 100) + `"}]}`)}
}

// BenchmarkRelayRoundTrip: relayed round trips, one caller at a time
// (latency) and 32 concurrent callers (throughput). Metrics: ns/op, rt/s,
// cpu-ns/op (both members' CPU per relayed op), allocs/op.
func BenchmarkRelayRoundTrip(b *testing.B) {
	for _, par := range []int{1, 16} {
		for _, cand := range candidates() {
			name := cand.name + "/callers=1"
			if par > 1 {
				name = cand.name + "/callers=" + itoa(par*runtime.GOMAXPROCS(0))
			}
			b.Run(name, func(b *testing.B) {
				o := newOwner()
				do, _ := cand.setup(b, o)
				ctx := context.Background()
				if _, err := do(ctx, benchRequest()); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				cpu0 := cpuNanos()
				b.ResetTimer()
				if par == 1 {
					r := benchRequest()
					for range b.N {
						if _, err := do(ctx, r); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					b.SetParallelism(par)
					b.RunParallel(func(pb *testing.PB) {
						r := benchRequest()
						for pb.Next() {
							if _, err := do(ctx, r); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
			})
		}
	}
}

// BenchmarkRelayParked10k: 10,000 relayed pops parked on the owner at once.
// Metrics: B/parked (live heap plus goroutine stacks of both members,
// after a GC, over the idle baseline), goroutines/parked, conns (the
// owner's connections). framed-Go parks through the async Client.Go (how
// the event loops will call it); the others hold a caller goroutine each,
// as a blocking API must.
func BenchmarkRelayParked10k(b *testing.B) {
	const n = 10000
	cands := candidates()
	for _, name := range []string{"h2", "framed-Do", "framed-Go"} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				o := newOwner()
				ci := 1
				if name == "h2" {
					ci = 0
				}
				do, conns := cands[ci].setup(b, o)
				var goFn func(context.Context, *link.Request, func(link.Response, error)) error
				if name == "framed-Go" {
					srv, addr := startServer(b, o, nil)
					c := newClient(b, nil)
					goFn = func(ctx context.Context, r *link.Request, done func(link.Response, error)) error {
						return c.Go(ctx, addr, r, done)
					}
					conns = func() int64 { return int64(srv.Conns()) }
				}
				ctx := context.Background()
				do(ctx, benchRequest()) // dial before the baseline
				if goFn != nil {
					goFn(ctx, benchRequest(), func(link.Response, error) {})
				}
				time.Sleep(50 * time.Millisecond)
				h0, s0, g0 := memNow()
				var wg sync.WaitGroup
				wg.Add(n)
				for i := range n {
					r := benchRequest()
					r.Target, r.Body = []byte("/park"), []byte(itoa(i))
					if goFn != nil {
						if err := goFn(ctx, r, func(_ link.Response, err error) {
							if err != nil {
								b.Error(err)
							}
							wg.Done()
						}); err != nil {
							b.Fatal(err)
						}
						continue
					}
					go func() {
						defer wg.Done()
						if _, err := do(ctx, r); err != nil {
							b.Error(err)
						}
					}()
				}
				waitFor(b, "10k parked", func() bool { return o.parkedCount() == n })
				h1, s1, g1 := memNow()
				b.ReportMetric((float64(h1)+float64(s1)-float64(h0)-float64(s0))/n, "B/parked")
				b.ReportMetric((float64(s1)-float64(s0))/n, "stackB/parked")
				b.ReportMetric(float64(g1-g0)/n, "goroutines/parked")
				b.ReportMetric(float64(conns()), "conns")
				o.releaseAll()
				wg.Wait()
			}
		})
	}
}

func memNow() (heap, stack uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, ms.StackInuse, runtime.NumGoroutine()
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}
