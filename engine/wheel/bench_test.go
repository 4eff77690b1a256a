package wheel

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkScheduleStop is the common life of a lease or parked pop: armed,
// then cancelled before it fires.
func BenchmarkScheduleStop(b *testing.B) {
	w := New(10*time.Millisecond, 4096, 0)
	var t nop
	b.ReportAllocs()
	for i := range b.N {
		w.Schedule(&t.Timer, int64(i%4096)*10*ms+5*ms, &t)
		w.Stop(&t.Timer)
	}
}

// BenchmarkScheduleFire arms a batch of timers one tick ahead and fires them
// with one Advance; ns/op is per timer.
func BenchmarkScheduleFire(b *testing.B) {
	const batch = 1024
	w := New(10*time.Millisecond, 4096, 0)
	ts := make([]nop, batch)
	now := int64(0)
	b.ReportAllocs()
	for i := 0; i < b.N; i += batch {
		for j := range min(batch, b.N-i) {
			w.Schedule(&ts[j].Timer, now+5*ms, &ts[j])
		}
		now += 10 * ms
		w.Advance(now)
	}
}

// BenchmarkAdvanceTick is the idle cost of driving a wheel holding 100k
// timers spread over ~11 minutes, one tick per Advance.
func BenchmarkAdvanceTick(b *testing.B) {
	w := New(10*time.Millisecond, 4096, 0)
	ts := make([]nop, 100_000)
	far := int64(1) << 60
	for i := range ts {
		w.Schedule(&ts[i].Timer, far+int64(i)*7*ms, &ts[i])
	}
	now := int64(0)
	b.ReportAllocs()
	for range b.N {
		now += 10 * ms
		w.Advance(now)
	}
}

// BenchmarkAdvanceHourJump advances an empty wheel by an hour at a time
// (360k ticks): the walk is capped at one rotation of 4096 slots.
func BenchmarkAdvanceHourJump(b *testing.B) {
	w := New(10*time.Millisecond, 4096, 0)
	now := int64(0)
	b.ReportAllocs()
	for range b.N {
		now += time.Hour.Nanoseconds()
		w.Advance(now)
	}
}

// BenchmarkShardedParallel is Schedule+Stop from every P on a 16-shard wheel.
func BenchmarkShardedParallel(b *testing.B) {
	s := NewSharded(16, 10*time.Millisecond, 4096, 0)
	var id atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ts := make([]nop, 64)
		base := id.Add(1) * 64
		i := 0
		for pb.Next() {
			k := i % len(ts)
			w := s.Shard(base + uint64(k))
			w.Schedule(&ts[k].Timer, int64(i%4096)*10*ms+5*ms, &ts[k])
			w.Stop(&ts[k].Timer)
			i++
		}
	})
}

// BenchmarkSingleParallel is the same load on one wheel, for comparison.
func BenchmarkSingleParallel(b *testing.B) {
	w := New(10*time.Millisecond, 4096, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var t nop
		i := 0
		for pb.Next() {
			w.Schedule(&t.Timer, int64(i%4096)*10*ms+5*ms, &t)
			w.Stop(&t.Timer)
			i++
		}
	})
}

// BenchmarkRuntimeTimer is the peer: one runtime timer per object.
func BenchmarkRuntimeTimer(b *testing.B) {
	b.ReportAllocs()
	f := func() {}
	for range b.N {
		t := time.AfterFunc(time.Hour, f)
		t.Stop()
	}
}
