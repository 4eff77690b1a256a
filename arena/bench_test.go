package arena

import (
	"sync/atomic"
	"testing"
)

// warm opens shard hint's first segment, so that the loops measure the steady
// state rather than one 1 MiB make.
func warm(a *Arena, hint uint64) {
	h, _ := a.Alloc(hint, 1)
	a.Free(h)
}

// BenchmarkAllocFree64 is one 64-byte message pushed and acked.
func BenchmarkAllocFree64(b *testing.B) {
	a := New(0, 0)
	warm(a, 0)
	b.ReportAllocs()
	b.SetBytes(64)
	for b.Loop() {
		h, p := a.Alloc(0, 64)
		p[0] = 1
		a.Free(h)
	}
}

// BenchmarkAllocBatch100x64 is one push of 100 64-byte messages: one Alloc
// split with Sub, each message freed on its own.
func BenchmarkAllocBatch100x64(b *testing.B) {
	a := New(0, 0)
	warm(a, 0)
	var subs [100]Handle
	b.ReportAllocs()
	b.SetBytes(100 * 64)
	for b.Loop() {
		h, p := a.Alloc(0, 100*64)
		p[0] = 1
		for i := range subs {
			subs[i] = h.Sub(uint32(i*64), 64)
		}
		for _, s := range subs {
			a.Free(s)
		}
	}
}

// BenchmarkAllocFreeParallel64 is BenchmarkAllocFree64 from every P, each on
// its own shard hint (pushes to different partitions).
func BenchmarkAllocFreeParallel64(b *testing.B) {
	a := New(0, 0)
	var next atomic.Uint64
	b.ReportAllocs()
	b.SetBytes(64)
	b.RunParallel(func(pb *testing.PB) {
		hint := next.Add(1)
		warm(a, hint)
		for pb.Next() {
			h, p := a.Alloc(hint, 64)
			p[0] = 1
			a.Free(h)
		}
	})
}

// BenchmarkBytes is the lock-free read of a live handle.
func BenchmarkBytes(b *testing.B) {
	a := New(0, 0)
	h, _ := a.Alloc(0, 64)
	var sink byte
	b.ReportAllocs()
	for b.Loop() {
		sink += a.Bytes(h)[0]
	}
	_ = sink
}
