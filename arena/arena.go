// Package arena owns payload memory: large pointer-free segments that hold
// message payloads, named by pointer-free handles.
//
// A segment is a plain []byte, so the garbage collector never scans payload
// bytes, and a Handle is three uint32s, so rings of handles are never scanned
// either (rule P3). Allocation is a bump of an offset inside a shard's open
// segment under that shard's mutex; shards keep pushes to different
// partitions from contending (rule P4). Reads and frees are lock-free.
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
	buf       []byte
	refs      atomic.Int64 // live bytes, + openBias while open
	idx       uint32       // slot in the table; stable while in the table
	shard     uint32       // whose held counter its bytes count in; set before it hands out a byte
	dedicated bool         // exactly one oversized allocation; dropped, never pooled
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
	shards  []shard
	_       [pad]byte

	footprint atomic.Int64
	nseg      atomic.Int64

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
		shards:  make([]shard, shards),
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
	if n < 1 || int64(n) > math.MaxUint32 {
		panic(fmt.Sprintf("arena: Alloc of %d bytes", n))
	}
	si := uint32(hint & a.mask)
	if n > a.segSize {
		return a.allocDedicated(si, n)
	}
	s := &a.shards[si]
	s.mu.Lock()
	seg := s.seg
	if seg == nil || len(seg.buf)-s.off < n {
		if seg != nil {
			a.release(seg, openBias) // seal
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
func (a *Arena) Free(h Handle) {
	if h.Len == 0 {
		return
	}
	seg := (*a.table.Load())[h.Seg]
	// seg.shard is read before release: once refs reaches zero the segment
	// may be reopened by another shard.
	a.shards[seg.shard].held.Add(-int64(h.Len))
	a.release(seg, int64(h.Len))
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

// release subtracts d from seg.refs and recycles seg if that was the last
// reference (live bytes, or the open bias of a seal).
func (a *Arena) release(seg *segment, d int64) {
	r := seg.refs.Add(-d)
	if r > 0 {
		return
	}
	if r < 0 {
		panic("arena: segment freed more than allocated (double Free?)")
	}
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
