package engine

import (
	"fmt"
	"testing"
)

// Benchmarks of a push's cost as the number of partitions or queues grows
// (docs/engine.md, "Push cost does not grow"). Each op is a push of one
// 64-byte message to a partition (or queue) that did not exist, next to N
// that do. N drifts by at most a tenth (at least 10) before the benchmark,
// timer stopped, puts it back.

var scaleSizes = []int{10, 10_000, 100_000}

// span is how many new objects a round adds before N is put back.
func span(n int) int { return max(10, n/10) }

func nameList(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%07d", prefix, i)
	}
	return out
}

func BenchmarkPushNewPartition(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) { benchPushNewPartition(b, n) })
	}
}

func benchPushNewPartition(b *testing.B, n int) {
	e := benchEngine(b)
	base, fresh := nameList("base", n), nameList("new", span(n))
	ps := batchOf(1, 64)
	build := func() {
		e.Delete("default", "q")
		must(b, e.Configure("default", "q", OptionSet{Has: HasMaxLength, Options: Options{MaxLength: 1_000_000}}))
		for _, p := range base {
			if _, err := e.Push("default", "q", p, ps); err != nil {
				b.Fatal(err)
			}
		}
	}
	build()
	b.ReportAllocs()
	b.ResetTimer()
	for i, k := 0, 0; i < b.N; i, k = i+1, k+1 {
		if k == len(fresh) {
			b.StopTimer()
			build()
			k = 0
			b.StartTimer()
		}
		if _, err := e.Push("default", "q", fresh[k], ps); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPushNewQueue(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) { benchPushNewQueue(b, n) })
	}
}

func benchPushNewQueue(b *testing.B, n int) {
	e := benchEngine(b)
	base, fresh := nameList("base", n), nameList("new", span(n))
	ps := batchOf(1, 64)
	for _, q := range base {
		if _, err := e.Push("default", q, "", ps); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, k := 0, 0; i < b.N; i, k = i+1, k+1 {
		if k == len(fresh) {
			b.StopTimer()
			for _, q := range fresh {
				e.Delete("default", q)
			}
			k = 0
			b.StartTimer()
		}
		if _, err := e.Push("default", fresh[k], "", ps); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweep100kQueues is one pass of the sweeper over 100,000 idle
// implicit queues that are not yet due for collection: the work the timing
// wheel does once a second, off the push path.
func BenchmarkSweep100kQueues(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(1, 64)
	for _, q := range nameList("q", 100_000) {
		e.Push("default", q, "", ps)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Sweep(e.nowNanos())
	}
}

// BenchmarkPopNewGroup is an explicit-ack pop of one message by a group that
// did not exist, next to N groups that each hold a lease on the queue (the
// group flood of the reliability suite).
func BenchmarkPopNewGroup(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) { benchPopNewGroup(b, n) })
	}
}

func benchPopNewGroup(b *testing.B, n int) {
	e := benchEngine(b)
	base, fresh := nameList("base", n), nameList("new", span(n))
	c := &discard{}
	pop := func(g string) {
		r := PopRequest{Tenant: "default", Queue: "q", Group: g, Batch: 1}
		if got, _, err := e.Pop(&r, c); err != nil || got != 1 {
			b.Fatalf("pop by %s: %d, %v", g, got, err)
		}
	}
	build := func() {
		e.Delete("default", "q")
		if _, err := e.Push("default", "q", "", batchOf(100, 64)); err != nil {
			b.Fatal(err)
		}
		for _, g := range base {
			pop(g)
		}
	}
	build()
	b.ReportAllocs()
	b.ResetTimer()
	for i, k := 0, 0; i < b.N; i, k = i+1, k+1 {
		if k == len(fresh) {
			b.StopTimer()
			build()
			k = 0
			b.StartTimer()
		}
		pop(fresh[k])
	}
}

// BenchmarkForgetIdleGroups is the sweep that forgets N idle groups of one
// queue (a flood of group names gone quiet), each holding a lease.
func BenchmarkForgetIdleGroups(b *testing.B) {
	for _, n := range []int{1_000, 20_000} {
		b.Run(fmt.Sprintf("groups=%d", n), func(b *testing.B) {
			e := benchEngine(b)
			names := nameList("g", n)
			c := &discard{}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.Delete("default", "q")
				if _, err := e.Push("default", "q", "", batchOf(10, 64)); err != nil {
					b.Fatal(err)
				}
				for _, g := range names {
					r := PopRequest{Tenant: "default", Queue: "q", Group: g, Batch: 1}
					e.Pop(&r, c)
				}
				later := e.nowNanos() + int64(e.cfg.GroupIdle) + 1
				b.StartTimer()
				e.Sweep(later)
			}
		})
	}
}

// BenchmarkRefusedPushFullBroker is a push to a new queue on a broker whose
// total is spent by N queues of one message each, while a consumer elsewhere
// keeps acking (one reclaimable byte at a time): the refusal must not cost a
// walk of the N queues looking for reclaimable messages (D3), or a full
// broker slows with every queue a client names (TestQueueNameFlood).
func BenchmarkRefusedPushFullBroker(b *testing.B) {
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("existing=%d", n), func(b *testing.B) { benchRefusedPushFullBroker(b, n) })
	}
}

func benchRefusedPushFullBroker(b *testing.B, n int) {
	e := New(Config{Clock: NewManualClock(), MaxBytes: 1 << 30})
	b.Cleanup(e.Close)
	one := batchOf(1, 1)
	for _, q := range nameList("base", n) {
		if _, err := e.Push("default", q, "", one); err != nil {
			b.Fatal(err)
		}
	}
	// The consumer's queue: each round, one message pushed, popped and acked
	// becomes reclaimable, so the broker has reclaimable bytes to look for.
	c := &idCollector{e: e}
	r := PopRequest{Tenant: "default", Queue: "consumed", Batch: 1}
	consume := func() {
		_, err := e.Push("default", "consumed", "", one)
		if err == ErrBrokerFull {
			// A segment of its messages was sealed with one still live: the
			// slack now counted (docs/engine.md, "What the arena holds") is
			// what the compactor, woken by that refusal, gives back.
			e.compactIfWorth(1)
			_, err = e.Push("default", "consumed", "", one)
		}
		if err != nil {
			b.Fatal(err)
		}
		c.buf, c.items = c.buf[:0], c.items[:0]
		e.Pop(&r, c)
		e.Ack("default", "consumed", "", c.items, nil)
	}
	consume()
	e.cfg.MaxBytes = e.footprint.Load() // full: no new queue fits
	fresh := batchOf(1, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		consume()
		b.StartTimer()
		if _, err := e.Push("default", "new", "", fresh); err != ErrBrokerFull {
			b.Fatalf("push to a full broker: %v, want ErrBrokerFull", err)
		}
	}
}

// BenchmarkCompactionWalk100kQueues is a compaction pass over 100,000 queues
// of one message each, none of them in a sparse segment: the walk alone,
// which a pass pays whenever the sparse segments are worth one
// (docs/engine.md, "What the arena holds").
func BenchmarkCompactionWalk100kQueues(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(1, 64)
	const n = 100_000
	for _, q := range nameList("q", n) {
		e.Push("default", q, "", ps)
	}
	set := make([]uint64, 1) // no segment: nothing moves
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if moved := e.compactSet(set); moved != 0 {
			b.Fatalf("moved %d bytes, want none", moved)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/queue")
}

// BenchmarkCompactionWalk100kEmptyInboxes is the walk above when the
// 100,000 queues hold nothing, as request/reply leaves its inboxes (their
// one reply popped and reclaimed) until they idle out: a queue without
// payload is skipped without locking its partitions.
func BenchmarkCompactionWalk100kEmptyInboxes(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(1, 64)
	const n = 100_000
	for _, q := range nameList("inbox", n) {
		e.Push("default", q, "", ps)
		if _, _, err := e.Pop(&PopRequest{Tenant: "default", Queue: q, Batch: 1, AutoAck: true}, &collector{e: e}); err != nil {
			b.Fatal(err)
		}
	}
	e.reclaimAll()
	set := make([]uint64, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.compactSet(set)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/queue")
}
