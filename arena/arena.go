// Package arena owns payload memory: large pointer-free segments that hold
// message payloads, named by pointer-free handles.
//
// A segment is a plain []byte, so the garbage collector never scans payload
// bytes, and a Handle is three uint32s, so rings of handles are never scanned
// either (rule P3). Allocation is a bump of an offset inside a shard's open
// segment under that shard's mutex; shards keep pushes to different
// partitions from contending (rule P4). Reads and frees are lock-free.
//
// Partitions share segments, so a few live payloads can keep a whole
// segment: the arena counts those free bytes (Slack) for its caller's
// budget, names the sealed segments at most half live (Sparse), and gives
// the survivors moved out of them a shard of their own (AllocMoved), so the
// caller can empty them (docs/engine.md, "What the arena holds").
//
// Invariants:
//
//   - seg.refs is the number of live (allocated, not freed) bytes of seg,
//     plus openBias while seg is some shard's open segment. Alloc adds n under
//     the shard mutex; Free subtracts Len; sealing subtracts openBias. Whoever
//     drives refs to zero recycles the segment, so a seal racing with the last
//     Free recycles it exactly once.
//   - A segment with refs == 0 is referenced by no live handle. Only such a
//     segment is pooled, reopened or dropped, so reusing its bytes or its
//     index is invisible to correct callers.
//   - The table (index -> *segment) is published through an atomic pointer.
//     It only grows, copy-on-write under a.mu. A slot is written only under
//     a.mu and only while no live handle names it, so lock-free readers of a
//     live handle never race with the write.
//   - Held counts exactly the live bytes. It is kept per shard (one shared
//     counter written by every Alloc and Free made parallel Alloc+Free three
//     times slower): seg.shard names the counter, and it changes only when
//     the segment is (re)opened, with no live bytes, so an allocation and its
//     frees always meet the same counter.
//   - Footprint counts the bytes of every segment in the table (open,
//     sealed-but-live, pooled); the pool keeps at most maxFree segments.
//   - Slack, the bytes of sealed segments that hold no live payload, is
//     counted in two parts so that no counter is shared by every Free:
//     sealSlack holds size - sealedLive of every sealed segment in the
//     table and not pooled (written when a segment is sealed or recycled),
//     and each Free returns what it changed of the rest (+Len in a sealed
//     segment, Len - sealedLive for the Free that empties it), for its
//     caller to count. The two add up to the slack exactly (Slack scans it).
//     sealedLive is written before the seal's compare-and-swap makes the
//     segment sealed, so the Free that empties it reads it.
//
// Bytes handed out by Alloc are not zeroed: a recycled segment still holds
// old payloads, and the caller overwrites all n bytes.
package arena

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

const (
	// DefaultSegmentSize is the size of an ordinary segment when New is
	// given 0.
	DefaultSegmentSize = 1 << 20

	// DefaultMaxFree is how many recycled ordinary segments the free pool
	// keeps by default; the rest are released to the GC so memory shrinks
	// after a burst.
	DefaultMaxFree = 64

	// openBias keeps an open segment's refs above zero however many of its
	// bytes are freed. It is far above any segment size (< 2^32).
	openBias = int64(1) << 62

	// pad is the false-sharing distance (two cache lines: adjacent-line
	// prefetch on x86 pulls lines in pairs).
	pad = 128
)

// Handle names Len bytes at Off inside segment Seg. It is pointer-free, so
// rings of handles are never scanned by the GC. The zero Handle names no
// bytes.
type Handle struct {
	Seg uint32
	Off uint32
	Len uint32
}

// Sub returns the handle of bytes [off, off+n) inside h. It splits one batch
// allocation into one handle per message; each is freed on its own.
func (h Handle) Sub(off, n uint32) Handle {
	if uint64(off)+uint64(n) > uint64(h.Len) {
		panic(fmt.Sprintf("arena: Sub(%d, %d) out of range of a %d-byte handle", off, n, h.Len))
	}
	return Handle{Seg: h.Seg, Off: h.Off + off, Len: n}
}

type segment struct {
	segmentFields
	_ [pad - unsafe.Sizeof(segmentFields{})%pad]byte // open segments of different shards share no cache line
}

type segmentFields struct {
	buf        []byte
	refs       atomic.Int64 // live bytes, + openBias while open
	sealedLive atomic.Int64 // live bytes when it was sealed (all of them for a dedicated one)
	idx        uint32       // slot in the table; stable while in the table
	shard      uint32       // whose held counter its bytes count in; set before it hands out a byte
	dedicated  bool         // exactly one oversized allocation; dropped, never pooled
}

// shard is one allocation stream: its open segment, the bump offset in it,
// and the live bytes it accounts for.
type shard struct {
	shardFields
	_ [pad - unsafe.Sizeof(shardFields{})%pad]byte
}

type shardFields struct {
	mu   sync.Mutex
	seg  *segment     // open segment, nil until the first Alloc
	off  int          // next free byte in seg.buf
	held atomic.Int64 // live bytes of segments whose shard is this one
}

// Arena hands out payload memory. All methods are safe for concurrent use.
type Arena struct {
	// Read-mostly, touched by every call.
	table   atomic.Pointer[[]*segment] // len(*table) == capacity; unused slots are nil
	segSize int
	mask    uint64
	shards  []shard // the hinted ones, then moved's
	moved   uint32  // the shard AllocMoved allocates in, past every hint
	_       [pad]byte

	footprint atomic.Int64
	nseg      atomic.Int64
	sealSlack atomic.Int64 // size - sealedLive of the sealed segments in use

	mu      sync.Mutex // guards everything below and writes to table slots
	used    int        // slots [0, used) have been handed out at least once
	freeIdx []uint32   // dropped slots, reused before growing the table
	pool    []*segment // recycled ordinary segments, refs == 0; len <= maxFree
	maxFree int
	// poolLow is the fewest segments the pool held since the last TrimIdle:
	// that many were needed by no Alloc in the whole interval.
	poolLow int
}

// New returns an arena whose ordinary segments are segmentSize bytes (0 means
// DefaultSegmentSize) spread over shards independent allocation shards (0
// means 4*GOMAXPROCS); the shard count is rounded up to a power of two.
func New(segmentSize, shards int) *Arena {
	if segmentSize == 0 {
		segmentSize = DefaultSegmentSize
	}
	if segmentSize < 0 || int64(segmentSize) > math.MaxUint32 {
		panic(fmt.Sprintf("arena: segment size %d out of range", segmentSize))
	}
	if shards == 0 {
		shards = 4 * runtime.GOMAXPROCS(0)
	}
	if shards < 0 || shards > 1<<16 {
		panic(fmt.Sprintf("arena: shard count %d out of range", shards))
	}
	shards = 1 << bits.Len(uint(shards-1)) // round up to a power of two
	a := &Arena{
		segSize: segmentSize,
		mask:    uint64(shards - 1),
		shards:  make([]shard, shards+1),
		moved:   uint32(shards),
		pool:    make([]*segment, 0, DefaultMaxFree),
		maxFree: DefaultMaxFree,
	}
	tab := make([]*segment, 16)
	a.table.Store(&tab)
	return a
}

// SetMaxFree bounds the free pool to n recycled segments (n >= 0), releasing
// any excess at once.
func (a *Arena) SetMaxFree(n int) {
	if n < 0 {
		panic("arena: negative SetMaxFree")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.pool) > n {
		a.drop(a.popPool())
	}
	if cap(a.pool) < n {
		a.pool = append(make([]*segment, 0, n), a.pool...)
	}
	a.maxFree = n
}

// Alloc reserves n contiguous bytes (n >= 1) in shard hint%shards and returns
// their handle and the writable slice (len and cap n, contents unspecified).
// A request larger than the segment size gets a dedicated segment of exactly
// n bytes. When the shard's open segment has no room it is sealed and another
// is opened, from the free pool if possible.
func (a *Arena) Alloc(hint uint64, n int) (Handle, []byte) {
	return a.alloc(uint32(hint&a.mask), n) // small enough to inline: one call on the push path
}

// AllocMoved is Alloc for bytes moved out of a sparse segment (Sparse) so
// that it empties: they come from a shard of their own, past every hint, so
// the survivors of many sparse segments fill few segments together instead
// of mixing again with new payloads.
func (a *Arena) AllocMoved(n int) (Handle, []byte) { return a.alloc(a.moved, n) }

func (a *Arena) alloc(si uint32, n int) (Handle, []byte) {
	if n < 1 || int64(n) > math.MaxUint32 {
		panic(fmt.Sprintf("arena: Alloc of %d bytes", n))
	}
	if n > a.segSize {
		return a.allocDedicated(si, n)
	}
	s := &a.shards[si]
	s.mu.Lock()
	seg := s.seg
	if seg == nil || len(seg.buf)-s.off < n {
		if seg != nil {
			a.seal(seg)
		}
		seg = a.open()
		seg.shard = si
		s.seg, s.off = seg, 0
	}
	off := s.off
	s.off += n
	// Under the shard mutex: a concurrent seal must see these bytes counted.
	seg.refs.Add(int64(n))
	s.mu.Unlock()

	s.held.Add(int64(n))
	return Handle{Seg: seg.idx, Off: uint32(off), Len: uint32(n)}, seg.buf[off : off+n : off+n]
}

// Bytes returns the bytes named by h (len and cap h.Len). They stay valid
// until the last Free touching them. Bytes takes no lock.
func (a *Arena) Bytes(h Handle) []byte {
	if h.Len == 0 {
		return nil
	}
	seg := (*a.table.Load())[h.Seg]
	lo, hi := int(h.Off), int(h.Off)+int(h.Len)
	return seg.buf[lo:hi:hi]
}

// Free releases h's bytes. Handles made by Sub from one Alloc are freed one by
// one; a segment is recycled once every byte allocated from it has been freed
// and it is sealed. Freeing a handle twice corrupts the accounting.
//
// It returns by how much the free changed the slack beyond SealSlack (see
// Slack): Len when h was in a sealed segment that still holds live bytes
// (they stay allocated, but hold nothing), 0 in an open one, and
// Len - sealedLive when it emptied its segment. A caller that counts the
// slack adds it up; others ignore it.
func (a *Arena) Free(h Handle) int64 {
	if h.Len == 0 {
		return 0
	}
	seg := (*a.table.Load())[h.Seg]
	// seg.shard is read before refs moves: once refs reaches zero the
	// segment may be reopened by another shard.
	d := int64(h.Len)
	a.shards[seg.shard].held.Add(-d)
	r := seg.refs.Add(-d)
	switch {
	case r >= openBias/2:
		return 0 // open
	case r > 0:
		return d
	case r < 0:
		panic("arena: segment freed more than allocated (double Free?)")
	}
	live := seg.sealedLive.Load()
	a.sealSlack.Add(live - int64(len(seg.buf)))
	a.recycle(seg)
	return d - live
}

// seal ends seg's time as a shard's open segment: the open bias goes, and
// what it does not hold live becomes slack. sealedLive is written before the
// compare-and-swap that makes the segment sealed, so a Free that empties it
// afterwards reads it; a Free racing the swap makes it try again.
func (a *Arena) seal(seg *segment) {
	for {
		v := seg.refs.Load()
		live := v - openBias
		seg.sealedLive.Store(live)
		if seg.refs.CompareAndSwap(v, live) {
			if live == 0 {
				a.recycle(seg) // no slack: it held nothing
			} else {
				a.sealSlack.Add(int64(len(seg.buf)) - live)
			}
			return
		}
	}
}

// Held is the exact number of payload bytes allocated and not yet freed. This
// is what byte budgets count. It sums one atomic counter per shard, so while
// Allocs and Frees run it may miss the ones in flight.
func (a *Arena) Held() int64 {
	var n int64
	for i := range a.shards {
		n += a.shards[i].held.Load()
	}
	return n
}

// Footprint is the bytes of all segments currently allocated from the Go heap:
// open, sealed-but-live and pooled.
func (a *Arena) Footprint() int64 { return a.footprint.Load() }

// Segments returns the number of segments in the table (open, sealed-but-live
// and pooled: the segments Footprint counts).
func (a *Arena) Segments() int { return int(a.nseg.Load()) }

// recycle pools or drops seg, which holds no live byte any more.
func (a *Arena) recycle(seg *segment) {
	a.mu.Lock()
	if !seg.dedicated && len(a.pool) < a.maxFree {
		a.pool = append(a.pool, seg)
	} else {
		a.drop(seg)
	}
	a.mu.Unlock()
}

// open returns a segment to become a shard's open segment, refs = openBias.
func (a *Arena) open() *segment {
	a.mu.Lock()
	if len(a.pool) > 0 {
		seg := a.popPool()
		a.mu.Unlock()
		seg.refs.Store(openBias)
		return seg
	}
	a.mu.Unlock()
	seg := a.newSegment(a.segSize, false)
	seg.refs.Store(openBias)
	return seg
}

func (a *Arena) allocDedicated(si uint32, n int) (Handle, []byte) {
	seg := a.newSegment(n, true)
	seg.shard = si
	seg.sealedLive.Store(int64(n)) // sealed from birth, full: no slack
	seg.refs.Store(int64(n))
	a.shards[si].held.Add(int64(n))
	return Handle{Seg: seg.idx, Len: uint32(n)}, seg.buf[:n:n]
}

// newSegment allocates a segment (outside a.mu: zeroing a large buffer is
// slow) and gives it a table slot. The caller sets refs before handing out
// any handle to it.
func (a *Arena) newSegment(size int, dedicated bool) *segment {
	seg := &segment{segmentFields: segmentFields{buf: make([]byte, size), dedicated: dedicated}}
	a.mu.Lock()
	defer a.mu.Unlock()
	tab := *a.table.Load()
	if k := len(a.freeIdx); k > 0 {
		seg.idx = a.freeIdx[k-1]
		a.freeIdx = a.freeIdx[:k-1]
	} else {
		if a.used == len(tab) {
			if int64(a.used) >= math.MaxUint32 {
				panic("arena: too many segments")
			}
			grown := make([]*segment, 2*len(tab))
			copy(grown, tab)
			a.table.Store(&grown)
			tab = grown
		}
		seg.idx = uint32(a.used)
		a.used++
	}
	tab[seg.idx] = seg
	a.footprint.Add(int64(size))
	a.nseg.Add(1)
	return seg
}

// drop removes seg from the table and leaves its bytes to the GC. a.mu held.
func (a *Arena) drop(seg *segment) {
	(*a.table.Load())[seg.idx] = nil
	a.freeIdx = append(a.freeIdx, seg.idx)
	a.footprint.Add(-int64(len(seg.buf)))
	a.nseg.Add(-1)
}

// popPool takes the most recently pooled segment. a.mu held, pool not empty.
func (a *Arena) popPool() *segment {
	k := len(a.pool) - 1
	seg := a.pool[k]
	a.pool[k] = nil
	a.pool = a.pool[:k]
	a.poolLow = min(a.poolLow, k)
	return seg
}

// Shards is the number of hinted allocation shards (AllocMoved's comes on
// top): each may hold an open segment.
func (a *Arena) Shards() int { return int(a.moved) }

// Pooled returns the number of recycled segments waiting in the free pool.
func (a *Arena) Pooled() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pool)
}

// TrimIdle releases to the GC the pooled segments that no Alloc needed since
// the previous call (the pool's low-water mark over that interval) and
// returns their bytes. Called every period P, it gives back the spare
// segments of a load that fell within 2P, while a steady load keeps the
// segments it cycles through.
func (a *Arena) TrimIdle() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var released int64
	for idle := min(a.poolLow, len(a.pool)); idle > 0; idle-- {
		seg := a.popPool()
		released += int64(len(seg.buf))
		a.drop(seg)
	}
	a.poolLow = len(a.pool)
	return released
}

// SealSlack is the part of the slack that seals and recycles count (see
// Slack): the free bytes of every sealed segment when it was sealed. Its
// counter is written once per segment, so reading it on every push costs
// no contention.
func (a *Arena) SealSlack() int64 { return a.sealSlack.Load() }

// Slack is the bytes of the sealed segments in use (not pooled) that hold
// no live payload: what the arena holds beyond Held, open segments apart.
// It scans the table under the arena's mutex; it is what SealSlack plus the
// sum of Free's returns counts, when no Free or Alloc is in flight.
func (a *Arena) Slack() int64 {
	_, slack := a.scan(nil, false, 1)
	return slack
}

// Sparse returns, as a bit set by segment index (bit i%64 of word i/64,
// reusing set's array), the sealed segments in use whose live bytes are at
// most half their size, and the slack they hold: the segments worth emptying
// by moving their survivors (AllocMoved), at most half a segment copied for
// every segment freed. A segment may be recycled, even reopened, after the
// scan: moving a message it did not mean is a copy for nothing, never a
// mistake.
func (a *Arena) Sparse(set []uint64) ([]uint64, int64) {
	return a.scan(set, true, 2)
}

// InSet reports whether segment seg is in set (Sparse).
func InSet(set []uint64, seg uint32) bool {
	i := int(seg / 64)
	return i < len(set) && set[i]&(1<<(seg%64)) != 0
}

// scan sums size - live over the sealed segments in use whose live bytes
// are at most 1/div of their size, marking them in set when mark is set.
func (a *Arena) scan(set []uint64, mark bool, div int64) ([]uint64, int64) {
	a.mu.Lock() // table slots are written under it
	defer a.mu.Unlock()
	tab := *a.table.Load()
	if mark {
		set = set[:0]
		for range (a.used + 63) / 64 {
			set = append(set, 0)
		}
	}
	var slack int64
	for i, seg := range tab[:a.used] {
		if seg == nil {
			continue
		}
		live, size := seg.refs.Load(), int64(len(seg.buf))
		if live <= 0 || live >= openBias/2 || live*div > size {
			continue // pooled, open, or dense
		}
		slack += size - live
		if mark {
			set[i/64] |= 1 << (i % 64)
		}
	}
	return set, slack
}
