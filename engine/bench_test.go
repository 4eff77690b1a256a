package engine

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Benchmarks of the hot paths (P3, P6). Run: make bench, or
// go test -run '^$' -bench . -benchmem ./engine

// discard is a Consumer that copies nothing.
type discard struct {
	n    int
	last Message
}

func (d *discard) Deliver(m Message)    { d.n++; d.last = m }
func (d *discard) Complete(int, Origin) {}

func benchEngine(b *testing.B) *Engine {
	b.Helper()
	e := New(Config{Clock: NewManualClock(), MaxBytes: 1 << 30})
	b.Cleanup(e.Close)
	return e
}

func batchOf(n, size int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = make([]byte, size)
		for j := range ps[i] {
			ps[i][j] = byte('a' + j%26)
		}
	}
	return ps
}

// benchPush pushes batches of n 64-byte payloads to one partition, draining
// with a reset every so often so the queue never fills.
func benchPush(b *testing.B, n int) {
	e := benchEngine(b)
	if err := e.Configure("default", "q", OptionSet{Has: HasMaxLength | HasMaxBytes, Options: Options{MaxLength: 1_000_000, MaxBytes: 1 << 29}}); err != nil {
		b.Fatal(err)
	}
	ps := batchOf(n, 64)
	every := max(1, 500_000/n)
	b.ReportAllocs()
	b.SetBytes(int64(64 * n))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%every == every-1 {
			b.StopTimer()
			e.Reset("default", "q")
			b.StartTimer()
		}
		if _, err := e.Push("default", "q", "p", ps); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "payloads/s")
}

func BenchmarkPush1x64B(b *testing.B)   { benchPush(b, 1) }
func BenchmarkPush100x64B(b *testing.B) { benchPush(b, 100) }

// BenchmarkPush100x64BParallel pushes from every P, each to its own
// partition (P4: partitions do not contend).
func BenchmarkPush100x64BParallel(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(100, 64)
	var id int64
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	b.ReportAllocs()
	b.SetBytes(64 * 100)
	b.RunParallel(func(pb *testing.PB) {
		<-mu
		id++
		queue := fmt.Sprintf("q%d", id)
		mu <- struct{}{}
		c := &discard{}
		r := PopRequest{Tenant: "default", Queue: queue, Batch: 10000, AutoAck: true}
		for i := 0; pb.Next(); i++ {
			if _, err := e.Push("default", queue, "", ps); err != nil {
				b.Fatal(err)
			}
			if i%50 == 49 { // drain: autoAck makes them reclaimable
				e.Pop(&r, c)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "payloads/s")
}

// BenchmarkPopAck is one explicit-ack pop of one message and its ack.
func BenchmarkPopAck(b *testing.B) { benchPopAck(b, 1) }

// BenchmarkPopAck100 pops batches of 100 and acks them in one call.
func BenchmarkPopAck100(b *testing.B) { benchPopAck(b, 100) }

type idCollector struct {
	e     *Engine
	buf   []byte
	items []AckItem
}

func (c *idCollector) Deliver(m Message) {
	start := len(c.buf)
	c.buf = c.e.AppendID(c.buf, m.Partition, m.Seq)
	c.items = append(c.items, AckItem{ID: c.buf[start:len(c.buf):len(c.buf)]})
}
func (c *idCollector) Complete(int, Origin) {}

func benchPopAck(b *testing.B, batch int) {
	e := benchEngine(b)
	e.Configure("default", "q", OptionSet{Has: HasMaxLength | HasMaxBytes, Options: Options{MaxLength: 1_000_000, MaxBytes: 1 << 29}})
	ps := batchOf(100, 64)
	c := &idCollector{e: e, buf: make([]byte, 0, 64*batch), items: make([]AckItem, 0, batch)}
	r := PopRequest{Tenant: "default", Queue: "q", Partition: "p", Batch: batch}
	out := make([]Outcome, 0, batch)
	fill := func() {
		for i := 0; i < 100; i++ {
			e.Push("default", "q", "p", ps)
		}
	}
	fill()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.buf, c.items = c.buf[:0], c.items[:0]
		n, _, _ := e.Pop(&r, c)
		if n == 0 {
			b.StopTimer()
			e.Reset("default", "q")
			fill()
			b.StartTimer()
			n, _, _ = e.Pop(&r, c)
		}
		out, _ = e.Ack("default", "q", "", c.items, out[:0])
		if len(out) != n || out[0] != OutcomeAcked {
			b.Fatalf("ack: %v", out)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRequestReply is the in-process round trip of a request/reply
// fleet: a pop parks on an inbox, a push of the reply completes it.
func BenchmarkRequestReply(b *testing.B) {
	e := benchEngine(b)
	reply := batchOf(1, 64)
	c := &discard{}
	r := PopRequest{Tenant: "default", Queue: "inbox", Batch: 1, AutoAck: true, Wait: true, Timeout: time.Minute}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n, parked, err := e.Pop(&r, c)
		if err != nil || n != 0 || parked.IsZero() {
			b.Fatalf("pop did not park: n=%d err=%v", n, err)
		}
		if _, err := e.Push("default", "inbox", "", reply); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if c.n != b.N {
		b.Fatalf("delivered %d of %d", c.n, b.N)
	}
}

// BenchmarkFanout8 pushes one message and lets 8 groups each take it.
func BenchmarkFanout8(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(1, 64)
	c := &discard{}
	var rs [8]PopRequest
	for g := range rs {
		rs[g] = PopRequest{Tenant: "default", Queue: "feed", Group: fmt.Sprintf("g%d", g), Batch: 10, AutoAck: true}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Push("default", "feed", "", ps)
		for g := range rs {
			e.Pop(&rs[g], c)
		}
	}
	b.StopTimer()
	if c.n != 8*b.N {
		b.Fatalf("delivered %d, want %d", c.n, 8*b.N)
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkIdleInboxes creates 100,000 implicit inboxes that each received
// and consumed one reply, and reports the heap they hold while idle, the
// payload bytes among it, and what the budgets charge for them (which must
// not be below the heap: docs/engine.md, "What the budgets count").
func BenchmarkIdleInboxes(b *testing.B) {
	const inboxes = 100_000
	names := make([]string, inboxes)
	for i := range names {
		names[i] = fmt.Sprintf("inbox-%08d", i)
	}
	reply := batchOf(1, 64)
	c := &discard{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		e := New(Config{Clock: NewManualClock(), MaxBytes: 1 << 30})
		before := heapInUse()
		for _, name := range names {
			e.Push("default", name, "", reply)
			r := PopRequest{Tenant: "default", Queue: name, Batch: 1, AutoAck: true}
			e.Pop(&r, c)
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/inboxes, "heapB/inbox")
		b.ReportMetric(float64(e.arena.Held())/inboxes, "payloadB/inbox")
		b.ReportMetric(float64(e.CellBytes())/inboxes, "chargedB/inbox")
		e.Close()
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkRefusedPush is a push of 10 messages refused by each budget in
// D7 order, to a queue or partition that does not exist (issue 24: 960 B in
// 8 objects each, before admission came before building them). It fails
// when a refusal allocates: a flood of refusals must not churn the heap.
func BenchmarkRefusedPush(b *testing.B) {
	for _, c := range []struct {
		name, tenant, queue, partition string
		want                           error
	}{
		{"queue_full", "default", "bounded", "new", ErrQueueFull},
		{"tenant_bytes", "small", "new", "", ErrTenantBytes},
		{"broker_total", "default", "new", "", ErrBrokerFull},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := benchEngine(b)
			if err := e.Configure("default", "bounded", OptionSet{Has: HasMaxLength, Options: Options{MaxLength: 5}}); err != nil {
				b.Fatal(err)
			}
			e.SetTenantLimits("small", 1, 0)
			e.cfg.MaxBytes = e.CellBytes()
			ps := batchOf(10, 64)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := e.Push(c.tenant, c.queue, c.partition, ps); err != c.want {
					b.Fatalf("push: %v, want %v", err, c.want)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			if n := after.Mallocs - before.Mallocs; n >= uint64(b.N) {
				b.Fatalf("%d refused pushes allocated %d times", b.N, n)
			}
		})
	}
}
