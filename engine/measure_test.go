package engine

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMeasureCharges measures the heap each kind of object costs, to set
// and check the charges of charge.go (docs/engine.md, "What the budgets
// count"). It creates 100,000 objects of a kind in a fresh engine and reads
// the live heap (runtime.MemStats.HeapAlloc, after two collections) before
// and after: map entries, list slots and name copies are included. It fails
// when a charge in force is below what it measured (by more than half a
// byte of noise). It is slow, so it runs
// only when asked:
//
//	MEASURE_CHARGES=1 go test -run TestMeasureCharges -count=1 -v ./engine
func TestMeasureCharges(t *testing.T) {
	if os.Getenv("MEASURE_CHARGES") == "" {
		t.Skip("set MEASURE_CHARGES=1 to measure")
	}
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("MEASURE_N")); err == nil {
		n = v // another count shows how much map growth moves the figures
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("x-%07d", i) // 9 bytes, charged byte for byte on top
	}
	nameLen := int64(len(names[0]))
	c := &measuredCharges
	d := &discard{}
	for _, m := range []struct {
		kind   string
		charge int64
		setup  func(e *Engine)
		create func(e *Engine, i int)
	}{
		{"queue (declared: with its options)", c.queue + nameLen, nil,
			func(e *Engine, i int) { must(t, e.Configure("default", names[i], OptionSet{})) }},
		{"partition (no ring yet)", c.partition + nameLen,
			func(e *Engine) { must(t, e.Configure("default", "q", OptionSet{})) },
			func(e *Engine, i int) { e.Push("default", "q", names[i], nil) }},
		{"group", c.group + nameLen,
			func(e *Engine) { must(t, e.Configure("default", "q", OptionSet{})) },
			func(e *Engine, i int) { e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: names[i]}, d) }},
		{"cursor (groups x 1,000 partitions)", c.cursor,
			func(e *Engine) {
				for g := 0; g < n/1000; g++ { // groups first: no partition, no cursor
					e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: names[g]}, d)
				}
				for p := 0; p < 1000; p++ {
					e.Push("default", "q", names[p], nil)
				}
			},
			func(e *Engine, i int) {
				if i%1000 == 0 { // one wildcard pop visits every partition
					e.Pop(&PopRequest{Tenant: "default", Queue: "q", Group: names[i/1000]}, d)
				}
			}},
		{"lease of one message (beyond an autoAck cursor)", c.entry,
			func(e *Engine) {
				must(t, e.Configure("default", "q", OptionSet{Has: HasMaxLength, Options: Options{MaxLength: 1_000_000}}))
				for p := 0; p < n; p++ { // g's cursor in every partition, one message left
					e.Push("default", "q", names[p], batchOf(2, 1))
					e.Pop(&PopRequest{Tenant: "default", Queue: "q", Partition: names[p], Group: "g", AutoAck: true}, d)
				}
			},
			func(e *Engine, i int) {
				e.Pop(&PopRequest{Tenant: "default", Queue: "q", Partition: names[i], Group: "g"}, d)
			}},
		{"parked pop", c.parked,
			func(e *Engine) { must(t, e.Configure("default", "q", OptionSet{})) },
			func(e *Engine, i int) {
				e.Pop(&PopRequest{Tenant: "default", Queue: "q", Wait: true, Timeout: 1 << 40}, d)
			}},
	} {
		e := New(Config{Clock: NewManualClock(), MaxBytes: 1 << 40})
		if m.setup != nil {
			m.setup(e)
		}
		before := liveHeap()
		for i := 0; i < n; i++ {
			m.create(e, i)
		}
		after := liveHeap()
		runtime.KeepAlive(e)
		per := float64(after-before) / float64(n)
		t.Logf("%-48s %7.1f B measured, %4d B charged", m.kind, per, m.charge)
		if per > float64(m.charge)+0.5 { // half a byte of noise: heap figures move a little run to run
			t.Errorf("%s: measured %.1f B, charged %d B", m.kind, per, m.charge)
		}
		e.Close()
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
