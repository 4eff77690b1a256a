package engine

import "testing"

// What a membership change costs the member that walks its queues (D17).

// BenchmarkDropMovedWalk100k is the walk after a membership change over
// 100,000 queues of which none moved: the part every change pays, whatever
// moves (keep is the cell's ownership test; here it keeps everything).
func BenchmarkDropMovedWalk100k(b *testing.B) {
	e := benchEngine(b)
	ps := batchOf(1, 64)
	for _, q := range nameList("q", 100_000) {
		e.Push("default", q, "", ps)
	}
	keep := func(string, string) bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		e.DropMoved(keep)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100_000, "ns/queue")
}

// BenchmarkDropForMove drops one queue that moved: a declared queue holding
// 100 messages over 4 partitions, one group with a lease and one parked pop
// (the setup is outside the timer).
func BenchmarkDropForMove(b *testing.B) {
	e := benchEngine(b)
	must(b, e.Configure("default", "q", OptionSet{}))
	ps := batchOf(25, 64)
	d := &discard{}
	pop := PopRequest{Tenant: "default", Queue: "q", Group: "g", Batch: 10}
	park := PopRequest{Tenant: "default", Queue: "q", Group: "h", Partition: "idle", Wait: true, Timeout: 1 << 40}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, p := range []string{"p0", "p1", "p2", "p3"} {
			e.Push("default", "q", p, ps)
		}
		e.Pop(&pop, d)
		e.Pop(&park, d)
		b.StartTimer()
		if n, _ := e.DropForMove("default", "q"); n != 100 {
			b.Fatal(n)
		}
	}
}
