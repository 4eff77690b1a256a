package server

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
)

// BenchmarkRelayClient: relay.Client round trips (a pop that finds the
// queue empty: nothing accumulates over b.N) to a broker serving the relay port on its loops, the
// production owner, in one process: one caller at a time, and 32. The
// Client carries the fan-out of reset and delete; this measures its
// transport, not the relay on the loops (conformance's cell benchmarks).
// Metrics: ns/op, cpu-ns/op (the process's CPU, both sides, per round
// trip), allocs/op (both sides).
//
//	go test -run '^$' -bench RelayClient -benchtime 20000x -count 3 ./server/
func BenchmarkRelayClient(b *testing.B) {
	o := startRelayOwner(b, RelayOptions{})
	q := o.queue(b)
	rq := &link.Request{Tenant: []byte(identity.DefaultTenant), Access: uint8(identity.Admin), Method: []byte("GET"),
		Target: []byte("/api/v1/ephemeral/pop?queue=" + q)}
	for _, par := range []int{0, 16} {
		name := "callers=1"
		if par > 0 {
			name = "callers=32"
		}
		b.Run(name, func(b *testing.B) {
			rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			ctx := context.Background()
			if r, err := rc.Do(ctx, o.addr, rq); err != nil || !strings.HasPrefix(string(r.Raw), "HTTP/1.1 200 ") {
				b.Fatalf("%q, %v", r.Raw, err)
			}
			b.ReportAllocs()
			cpu0 := cpuNanos()
			b.ResetTimer()
			if par == 0 {
				for range b.N {
					if _, err := rc.Do(ctx, o.addr, rq); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := rc.Do(ctx, o.addr, rq); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuNanos is the process's user and system CPU time (getrusage).
func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
