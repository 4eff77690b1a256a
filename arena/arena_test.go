package arena

import (
	"bytes"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i)
	}
}

func check(t testing.TB, b []byte, seed byte) {
	t.Helper()
	for i := range b {
		if b[i] != seed+byte(i) {
			t.Fatalf("byte %d of %d: got %d, want %d", i, len(b), b[i], seed+byte(i))
		}
	}
}

func TestRoundTrip(t *testing.T) {
	a := New(0, 0)
	var hs []Handle
	for i := 1; i <= 100; i++ {
		h, b := a.Alloc(uint64(i), i)
		if len(b) != i || cap(b) != i || h.Len != uint32(i) {
			t.Fatalf("Alloc(%d): len %d cap %d handle %+v", i, len(b), cap(b), h)
		}
		fill(b, byte(i))
		hs = append(hs, h)
	}
	for i, h := range hs {
		got := a.Bytes(h)
		if len(got) != i+1 || cap(got) != i+1 {
			t.Fatalf("Bytes(%+v): len %d cap %d", h, len(got), cap(got))
		}
		check(t, got, byte(i+1))
	}
	for _, h := range hs {
		a.Free(h)
	}
	if a.Held() != 0 {
		t.Fatalf("Held after freeing everything = %d", a.Held())
	}
	if a.Bytes(Handle{}) != nil {
		t.Fatal("Bytes of the zero handle is not nil")
	}
	a.Free(Handle{}) // no-op
}

func TestSub(t *testing.T) {
	a := New(1<<16, 1)
	const n, size = 100, 64
	h, b := a.Alloc(0, n*size)
	for i := range n {
		fill(b[i*size:(i+1)*size], byte(i))
	}
	if a.Held() != n*size {
		t.Fatalf("Held = %d, want %d", a.Held(), n*size)
	}
	subs := make([]Handle, n)
	for i := range subs {
		subs[i] = h.Sub(uint32(i*size), size)
		check(t, a.Bytes(subs[i]), byte(i))
	}
	// Free out of order; the rest stays intact.
	for k, i := range rand.Perm(n) {
		a.Free(subs[i])
		if want := int64((n - k - 1) * size); a.Held() != want {
			t.Fatalf("Held = %d, want %d", a.Held(), want)
		}
	}
	if z := h.Sub(10, 0); z.Len != 0 || a.Bytes(z) != nil {
		t.Fatalf("empty Sub: %+v", z)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Sub past the end did not panic")
		}
	}()
	h.Sub(n*size-1, 2)
}

func TestHeldExact(t *testing.T) {
	a := New(4096, 4)
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[Handle]int{}
	var want int64
	for i := range 5000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			for h, n := range live {
				a.Free(h)
				delete(live, h)
				want -= int64(n)
				break
			}
		} else {
			n := 1 + rng.IntN(6000) // some oversized
			h, _ := a.Alloc(uint64(i), n)
			live[h] = n
			want += int64(n)
		}
		if a.Held() != want {
			t.Fatalf("step %d: Held = %d, want %d", i, a.Held(), want)
		}
	}
	for h := range live {
		a.Free(h)
	}
	if a.Held() != 0 {
		t.Fatalf("Held = %d at the end", a.Held())
	}
}

func TestRecycleAndIndexReuse(t *testing.T) {
	a := New(1024, 1)
	h0, _ := a.Alloc(0, 1024) // fills segment 0
	h1, _ := a.Alloc(0, 10)   // seals segment 0, opens segment 1
	if h0.Seg == h1.Seg || a.Segments() != 2 || a.Footprint() != 2048 {
		t.Fatalf("segs %d,%d; Segments %d; Footprint %d", h0.Seg, h1.Seg, a.Segments(), a.Footprint())
	}
	a.Free(h0) // sealed and empty: goes to the pool, still counted
	if a.Segments() != 2 || a.Footprint() != 2048 {
		t.Fatalf("after recycling: Segments %d, Footprint %d", a.Segments(), a.Footprint())
	}
	h2, _ := a.Alloc(0, 1020) // no room in segment 1: reopen segment 0 from the pool
	if h2.Seg != h0.Seg || h2.Off != 0 {
		t.Fatalf("pooled segment not reused: %+v (first was %+v)", h2, h0)
	}
	if a.Segments() != 2 || a.Footprint() != 2048 {
		t.Fatalf("reuse grew the arena: Segments %d, Footprint %d", a.Segments(), a.Footprint())
	}

	// The open segment is never recycled, however empty.
	a.Free(h2)
	if a.Segments() != 2 {
		t.Fatalf("open segment was recycled: Segments %d", a.Segments())
	}

	// With no pool, a dropped segment's index is handed to the next one.
	a.Free(h1) // segment 1 sealed and now empty
	a.SetMaxFree(0)
	if a.Segments() != 1 || a.Footprint() != 1024 {
		t.Fatalf("SetMaxFree(0): Segments %d, Footprint %d", a.Segments(), a.Footprint())
	}
	h3, _ := a.Alloc(0, 5000) // dedicated
	if h3.Seg != h1.Seg {
		t.Fatalf("index %d not reused, got %d", h1.Seg, h3.Seg)
	}
	a.Free(h3)
	h4, _ := a.Alloc(0, 5000)
	if h4.Seg != h1.Seg {
		t.Fatalf("index %d not reused, got %d", h1.Seg, h4.Seg)
	}
	a.Free(h4)
}

func TestOversized(t *testing.T) {
	a := New(1024, 1)
	small, _ := a.Alloc(0, 100)
	base, segs := a.Footprint(), a.Segments()
	h, b := a.Alloc(0, 3000)
	if len(b) != 3000 || h.Off != 0 || h.Seg == small.Seg {
		t.Fatalf("oversized: len %d handle %+v", len(b), h)
	}
	if a.Footprint() != base+3000 || a.Segments() != segs+1 || a.Held() != 3100 {
		t.Fatalf("Footprint %d Segments %d Held %d", a.Footprint(), a.Segments(), a.Held())
	}
	fill(b, 7)
	// Split and freed piecewise, it is dropped (not pooled) after the last piece.
	p1, p2 := h.Sub(0, 1000), h.Sub(1000, 2000)
	check(t, a.Bytes(p1), 7)
	a.Free(p2)
	check(t, a.Bytes(p1), 7)
	a.Free(p1)
	if a.Footprint() != base || a.Segments() != segs || a.Held() != 100 {
		t.Fatalf("after free: Footprint %d Segments %d Held %d", a.Footprint(), a.Segments(), a.Held())
	}
	// The small allocation's segment is still the open one.
	h2, _ := a.Alloc(0, 10)
	if h2.Seg != small.Seg || h2.Off != 100 {
		t.Fatalf("oversized allocation disturbed the open segment: %+v", h2)
	}
}

func TestLarge(t *testing.T) {
	a := New(0, 0)
	for _, n := range []int{1 << 20, 1<<20 + 1, 16 << 20, 64 << 20} {
		h, b := a.Alloc(3, n)
		b[0], b[n-1] = 1, 2
		got := a.Bytes(h)
		if len(got) != n || got[0] != 1 || got[n-1] != 2 {
			t.Fatalf("%d bytes: round trip failed", n)
		}
		a.Free(h)
	}
	if a.Held() != 0 {
		t.Fatalf("Held = %d", a.Held())
	}
}

func TestAllocPanics(t *testing.T) {
	a := New(1024, 1)
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Alloc(%d) did not panic", n)
				}
			}()
			a.Alloc(0, n)
		}()
	}
}

func TestShardsRoundedUp(t *testing.T) {
	for _, c := range []struct{ in, want int }{{1, 1}, {3, 4}, {4, 4}, {5, 8}} {
		// The hinted shards, and AllocMoved's past them.
		if got := len(New(1024, c.in).shards) - 1; got != c.want {
			t.Errorf("New(_, %d): %d shards, want %d", c.in, got, c.want)
		}
	}
	if got := len(New(0, 0).shards) - 1; got < 4 || got&(got-1) != 0 {
		t.Errorf("default shards = %d", got)
	}
}

func TestFreePoolBounded(t *testing.T) {
	const size, burst = 1024, 200
	a := New(size, 1)
	hs := make([]Handle, burst)
	for i := range hs {
		hs[i], _ = a.Alloc(0, size)
	}
	if a.Footprint() != burst*size {
		t.Fatalf("Footprint during the burst = %d", a.Footprint())
	}
	for _, h := range hs {
		a.Free(h)
	}
	// Pool plus the (empty) open segment.
	if max := int64(DefaultMaxFree+1) * size; a.Footprint() > max || a.Segments() > DefaultMaxFree+1 {
		t.Fatalf("after the burst: Footprint %d (max %d), Segments %d", a.Footprint(), max, a.Segments())
	}
	a.SetMaxFree(4)
	if a.Segments() != 5 || a.Footprint() != 5*size {
		t.Fatalf("SetMaxFree(4): Segments %d, Footprint %d", a.Segments(), a.Footprint())
	}
	// A second burst reuses indexes instead of growing the table.
	for i := range hs {
		hs[i], _ = a.Alloc(0, size)
		if hs[i].Seg >= burst+1 {
			t.Fatalf("index %d not reused", hs[i].Seg)
		}
	}
	for _, h := range hs {
		a.Free(h)
	}
	if a.Held() != 0 || a.Segments() != 5 {
		t.Fatalf("Held %d, Segments %d", a.Held(), a.Segments())
	}
}

// Many goroutines allocate, fill, verify and free, sharing shards and
// segments, with sizes that cross segment boundaries and go oversized. Run
// with -race.
func TestConcurrent(t *testing.T) {
	const workers, iters, window = 8, 4000, 64
	a := New(4096, 2) // fewer shards than workers: shards are shared
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			type live struct {
				h    Handle
				seed byte
			}
			ring := make([]live, 0, window)
			verifyFree := func(l live) {
				b := a.Bytes(l.h)
				for i := range b {
					if b[i] != l.seed+byte(i) {
						t.Errorf("worker %d: handle %+v byte %d corrupted", w, l.h, i)
						return
					}
				}
				a.Free(l.h)
			}
			for i := range iters {
				n := 1 + rng.IntN(700)
				if i%97 == 0 {
					n = 4096 + rng.IntN(4096) // oversized
				}
				if i%5 == 0 { // a batch split with Sub, freed piecewise
					h, b := a.Alloc(uint64(w), 4*n)
					for k := range 4 {
						fill(b[k*n:(k+1)*n], byte(w*31+i+k))
					}
					for k := range 4 {
						ring = append(ring, live{h.Sub(uint32(k*n), uint32(n)), byte(w*31 + i + k)})
					}
				} else {
					h, b := a.Alloc(uint64(w), n)
					fill(b, byte(w*31+i))
					ring = append(ring, live{h, byte(w*31 + i)})
				}
				for len(ring) > window {
					j := rng.IntN(len(ring))
					verifyFree(ring[j])
					ring[j] = ring[len(ring)-1]
					ring = ring[:len(ring)-1]
				}
			}
			for _, l := range ring {
				verifyFree(l)
			}
		})
	}
	wg.Wait()
	if a.Held() != 0 {
		t.Fatalf("Held = %d after all frees", a.Held())
	}
	// Only pooled and open segments remain.
	if a.Segments() > DefaultMaxFree+len(a.shards) {
		t.Fatalf("Segments = %d", a.Segments())
	}
}

// Steady state (segments pooled) allocates nothing on the Go heap (rule P3).
func TestZeroAllocs(t *testing.T) {
	a := New(1<<16, 1) // small segments: the loops below seal and reopen often
	payload := bytes.Repeat([]byte("x"), 64)
	warm := func(f func()) {
		for range 1000 {
			f()
		}
	}
	single := func() {
		h, b := a.Alloc(0, 64)
		copy(b, payload)
		_ = a.Bytes(h)
		a.Free(h)
	}
	var subs [100]Handle
	batch := func() {
		h, b := a.Alloc(0, 100*64)
		for i := range subs {
			copy(b[i*64:], payload)
			subs[i] = h.Sub(uint32(i*64), 64)
		}
		for _, s := range subs {
			_ = a.Bytes(s)
			a.Free(s)
		}
	}
	for name, f := range map[string]func(){"single": single, "batch": batch} {
		warm(f)
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
}

// TrimIdle releases the pooled segments that no Alloc needed since the last
// call (the pool's low-water mark), and keeps those a load cycled through.
func TestTrimIdleReleasesOnlyWhatNoAllocNeeded(t *testing.T) {
	a := New(1024, 1)
	alloc := func(k int) []Handle { // k allocations of a whole segment each
		hs := make([]Handle, k)
		for i := range hs {
			hs[i], _ = a.Alloc(0, 1024)
		}
		return hs
	}
	free := func(hs []Handle) {
		for _, h := range hs {
			a.Free(h)
		}
	}
	counts := func(step string, pooled, segments int) {
		t.Helper()
		if a.Pooled() != pooled || a.Segments() != segments {
			t.Fatalf("%s: pooled %d, segments %d; want %d and %d", step, a.Pooled(), a.Segments(), pooled, segments)
		}
	}
	free(alloc(6)) // five sealed segments pooled, the sixth still open
	counts("after a burst", 5, 6)
	if got := a.TrimIdle(); got != 0 {
		t.Fatalf("first trim released %d bytes; the pool was empty earlier in the interval", got)
	}
	counts("after the first trim", 5, 6)
	free(alloc(2)) // the load takes two segments from the pool and gives one back
	counts("after a small load", 5, 6)
	if got := a.TrimIdle(); got != 4*1024 {
		t.Fatalf("second trim released %d bytes, want the 4 segments no Alloc needed", got)
	}
	counts("after the second trim", 1, 2)
	if got := a.TrimIdle(); got != 1024 {
		t.Fatalf("idle trim released %d bytes, want the last pooled segment", got)
	}
	counts("after an idle interval", 0, 1)
	if a.Held() != 0 || a.Footprint() != 1024 {
		t.Fatalf("held %d footprint %d, want 0 and the open segment", a.Held(), a.Footprint())
	}
}

// New accepts the largest segment size a handle can address (math.MaxUint32)
// and 1<<16 shards, and refuses one more of either. Segments are made on
// demand, so the bounds cost nothing to check.
func TestNewBounds(t *testing.T) {
	panics := func(size, shards int) (p bool) {
		defer func() { p = recover() != nil }()
		New(size, shards)
		return false
	}
	for _, c := range []struct {
		size, shards int
		want         bool
	}{
		{math.MaxUint32, 1, false},
		{math.MaxUint32 + 1, 1, true},
		{1024, 1 << 16, false},
		{1024, 1<<16 + 1, true},
		{-1, 1, true},
		{1024, -1, true},
	} {
		if got := panics(c.size, c.shards); got != c.want {
			t.Errorf("New(%d, %d) panicked: %v, want %v", c.size, c.shards, got, c.want)
		}
	}
}

// An allocation that fits the open segment's room exactly is made there;
// the next byte opens another segment.
func TestAllocExactFitStaysInSegment(t *testing.T) {
	a := New(64, 1)
	h1, _ := a.Alloc(0, 40)
	h2, _ := a.Alloc(0, 24) // exactly the 24 bytes left
	if h2.Seg != h1.Seg || h2.Off != 40 {
		t.Fatalf("exact fit: %+v after %+v, want the same segment at offset 40", h2, h1)
	}
	h3, _ := a.Alloc(0, 1)
	if h3.Seg == h1.Seg {
		t.Fatalf("a byte past the segment went into it: %+v", h3)
	}
}
