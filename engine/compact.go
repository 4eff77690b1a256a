package engine

import (
	"sync/atomic"

	"github.com/queenmq/ephemeral/arena"
)

// Compaction: the budget bounds what the arena holds (docs/engine.md, "What
// the arena holds").
//
// Partitions share arena segments (a segment is one shard's, and a shard
// serves many partitions), so a segment is freed only when every message in
// it is. Messages of queues nobody consumes keep the segments they share
// with consumed ones: a tenth of a segment alive holds all of it. The
// broker's footprint counts those free bytes (the arena's slack, CellBytes),
// so pushes are refused before the arena outgrows the budget; compaction
// gives the room back. It finds the sealed segments at most half live
// (arena.Sparse), walks every partition and moves each message held in one
// of them to a segment of survivors (arena.AllocMoved): copied, its slot
// pointed at the copy, the old bytes freed. Once all their messages have
// moved the sparse segments empty and are recycled.
//
// Every read of a message's bytes (a pop's copy-out, in Deliver), every
// free and every move happens under the partition's lock, so no reader sees
// a slot between its copy and its free, and no reader holds a handle that a
// move freed: Message.Payload is valid only during Deliver, as for a free.
//
// It runs off the hot paths, on a goroutine of its own (compactLoop), woken
// by the sweep (every SweepEvery, after the reclaim near the budget) when
// the sparse segments hold compactAt, and by a push refused at the broker's
// total when they hold anything; with a manual clock the sweep runs it
// inline. It takes a partition's lock for at most compactStep slots at a
// time, so a pop or push of a partition holding many messages waits for a
// step, not for the whole partition.

// compactStep is the most slots a compaction looks at under one hold of a
// partition lock.
const compactStep = 4096

type compactor struct {
	kick chan struct{} // capacity 1: a wake-up is pending or not
	// urgent: a refusal at the broker's total woke it, so any sparse
	// segment is worth the walk, not only compactAt's worth.
	urgent atomic.Bool
	done   chan struct{} // closed when compactLoop returns
	set    []uint64      // scratch: the sparse segments, reused (compactLoop or the manual sweep only)
}

// refusedAtTotal wakes the compactor for a push or creation refused at the
// broker's total: the room may be slack that moving survivors gives back,
// however little of it there is (one segment sealed with a byte live holds
// less than a segment of slack, less than compactAt). It allocates nothing,
// so a refused push stays free of allocations.
func (e *Engine) refusedAtTotal() {
	if !e.compact.urgent.Load() {
		e.compact.urgent.Store(true)
	}
	e.kickCompaction()
}

// kickCompaction wakes the compactor without waiting (nothing with a manual
// clock: the sweep compacts inline).
func (e *Engine) kickCompaction() {
	select {
	case e.compact.kick <- struct{}{}:
	default:
	}
}

func (e *Engine) compactLoop() {
	defer close(e.compact.done)
	for {
		select {
		case <-e.stop:
			return
		case <-e.compact.kick:
			least := e.compactAt()
			if e.compact.urgent.Swap(false) {
				least = 1
			}
			e.compactIfWorth(least)
		}
	}
}

// compactAt is the slack in sparse segments worth a walk of every
// partition when nothing was refused: a segment, or a sixty-fourth of the
// broker's total when that is more (1 MiB of the reliability suite's
// 64 MiB, 4 MiB of the default 256 MiB).
func (e *Engine) compactAt() int64 {
	seg := int64(e.cfg.SegmentSize)
	if seg <= 0 {
		seg = arena.DefaultSegmentSize
	}
	return max(seg, e.cfg.MaxBytes/64)
}

// compactIfWorth compacts when the sparse segments hold at least least
// bytes of slack, and returns the payload bytes it moved.
func (e *Engine) compactIfWorth(least int64) int64 {
	set, slack := e.arena.Sparse(e.compact.set)
	e.compact.set = set
	if slack < max(least, 1) {
		return 0
	}
	return e.compactSet(set)
}

// compactSet moves every message held in a segment of set to the survivors'
// segments and returns the payload bytes moved.
func (e *Engine) compactSet(set []uint64) (moved int64) {
	e.tenants.Range(func(_ string, t *tenant) bool {
		t.queues.Range(func(_ string, q *Queue) bool {
			// A queue that holds no payload has nothing in a sparse
			// segment (a push allocates in an open segment, never in a
			// sealed one): request/reply leaves many thousands of such
			// inboxes until they idle out, and locking each of their
			// partitions was most of a compaction's cost.
			if q.bytes.Load() == 0 {
				return true
			}
			for _, p := range q.partitions() {
				moved += p.compact(set)
			}
			return true
		})
		return true
	})
	return moved
}

// compact moves p's messages held in a segment of set, compactStep slots
// per hold of p.mu, and returns the bytes moved. The slack the frees change
// goes to the broker's footprint; the payload stays where it is counted.
func (p *partition) compact(set []uint64) (moved int64) {
	e := p.q.e
	a := e.arena
	var slack int64
	for s := uint64(0); ; {
		p.mu.Lock()
		if p.q.dead.Load() {
			p.mu.Unlock() // its removal freed everything
			break
		}
		s = max(s, p.head) // what went meanwhile is not looked at
		end := min(p.tail, s+compactStep)
		for ; s < end; s++ {
			sl := p.slotOf(s)
			if sl.h.Len == 0 || !arena.InSet(set, sl.h.Seg) {
				continue
			}
			h, buf := a.AllocMoved(int(sl.h.Len))
			copy(buf, a.Bytes(sl.h))
			slack += a.Free(sl.h)
			sl.h = h
			moved += int64(h.Len)
		}
		more := s < p.tail
		p.mu.Unlock()
		if !more {
			break
		}
	}
	if slack != 0 && e.countSlack {
		e.footprint.Add(slack)
	}
	return moved
}
