package arena

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// The slack (docs/engine.md, "What the arena holds"): SealSlack plus what
// every Free returned is exactly the free bytes of the sealed segments in
// use, whatever the mix of sizes, shards, dedicated segments and frees, and
// goes back to 0 once every byte is freed.
func TestSlackCountedExactly(t *testing.T) {
	const size = 4096
	a := New(size, 4)
	rng := rand.New(rand.NewPCG(1, 2))
	var live []Handle
	var returned int64
	check := func(when string) {
		t.Helper()
		if got, want := a.SealSlack()+returned, a.Slack(); got != want {
			t.Fatalf("%s: SealSlack %d + Free's returns %d = %d, want the slack scanned, %d", when, a.SealSlack(), returned, got, want)
		}
	}
	for round := range 200 {
		for range 50 {
			n := 1 + rng.IntN(700)
			if rng.IntN(40) == 0 {
				n = size + rng.IntN(size) // dedicated
			}
			h, b := a.Alloc(rng.Uint64(), n)
			fill(b, byte(n))
			live = append(live, h)
		}
		// Free most, keeping a few in every segment: sparse sealed segments.
		rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		keep := len(live) / 8
		for _, h := range live[keep:] {
			returned += a.Free(h)
		}
		live = live[:keep]
		check(fmt.Sprint("round ", round))
	}
	if a.Slack() == 0 {
		t.Fatal("no slack at all: the test made no sparse sealed segment")
	}
	for _, h := range live {
		returned += a.Free(h)
	}
	check("everything freed")
	if a.Slack() != 0 || a.SealSlack()+returned != 0 {
		t.Fatalf("everything freed: slack %d, counted %d; want 0", a.Slack(), a.SealSlack()+returned)
	}
}

// Concurrent Allocs and Frees (seals racing the Frees of their segment's
// bytes) count the slack exactly too.
func TestSlackCountedExactlyConcurrently(t *testing.T) {
	const size, workers, per = 2048, 4, 20000
	a := New(size, 2)
	var mu sync.Mutex
	var returned int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []Handle
			var ret int64
			for i := range per {
				h, _ := a.Alloc(uint64(i), 1+rng.IntN(300))
				mine = append(mine, h)
				if len(mine) > 16 {
					k := rng.IntN(len(mine))
					ret += a.Free(mine[k])
					mine[k] = mine[len(mine)-1]
					mine = mine[:len(mine)-1]
				}
			}
			for _, h := range mine {
				ret += a.Free(h)
			}
			mu.Lock()
			returned += ret
			mu.Unlock()
		})
	}
	wg.Wait()
	if a.Held() != 0 || a.Slack() != 0 || a.SealSlack()+returned != 0 {
		t.Fatalf("everything freed: held %d, slack %d, counted %d; want 0", a.Held(), a.Slack(), a.SealSlack()+returned)
	}
}

// Sparse names the sealed segments at most half live, and moving their
// survivors with AllocMoved empties and recycles them, the bytes intact.
func TestSparseSurvivorsMovedEmptyTheirSegments(t *testing.T) {
	const size = 1000
	a := New(size, 1)
	var kept []Handle
	var dense []Handle
	for i := range 40 { // 10 segments of 4 × 250 bytes
		h, b := a.Alloc(0, 250)
		fill(b, byte(i))
		switch {
		case i < 20 && i%4 == 0: // one of four kept: 25 % live
			kept = append(kept, h)
		case i >= 20 && i%4 != 0: // three of four kept: dense
			dense = append(dense, h)
		default:
			a.Free(h)
		}
	}
	set, slack := a.Sparse(nil)
	if want := int64(5 * 750); slack != want {
		t.Fatalf("sparse slack %d, want %d (5 segments of 25 %% live)", slack, want)
	}
	for _, h := range kept {
		if !InSet(set, h.Seg) {
			t.Fatalf("segment %d (25 %% live) not in the sparse set", h.Seg)
		}
	}
	for _, h := range dense {
		if InSet(set, h.Seg) {
			t.Fatalf("segment %d (75 %% live) in the sparse set", h.Seg)
		}
	}
	before := a.Segments() - a.Pooled()
	for i, h := range kept {
		nh, b := a.AllocMoved(int(h.Len))
		copy(b, a.Bytes(h))
		a.Free(h)
		kept[i] = nh
	}
	for i, h := range kept {
		check(t, a.Bytes(h), byte(4*i))
	}
	if _, slack := a.Sparse(nil); slack != 0 {
		t.Fatalf("sparse slack %d after the move, want 0", slack)
	}
	// 5 sparse segments emptied, 2 opened for the moved 1,250 bytes.
	if after := a.Segments() - a.Pooled(); after != before-5+2 {
		t.Fatalf("%d segments in use after the move, want %d", after, before-5+2)
	}
}
