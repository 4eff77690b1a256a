package engine

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/arena"
	"github.com/queenmq/ephemeral/engine/wheel"
)

// Engine is the in-memory broker for one process incarnation.
type Engine struct {
	cfg         Config
	inc         uint64
	incHex      string
	idPrefix    string // "e:<incHex>:", what every id of this incarnation starts with
	arena       *arena.Arena
	wheels      *wheel.Sharded
	manual      Clock // non-nil when the caller drives time
	now         atomic.Int64
	clock       clockState // whether the ticker ticks or sleeps (clock.go)
	defaultOpts *Options   // shared by every implicit queue
	charge      charges    // what each object costs the budgets

	tenants *xsync.Map[string, *tenant]

	// footprint is what the broker total counts (cellBytes): payload bytes
	// held plus the charges of every object, every tenant, and the bytes
	// taken with Charge (docs/engine.md, "What the budgets count").
	footprint        atomic.Int64
	reclaimableBytes atomic.Int64 // payload bytes of reclaimable messages (D3)
	reclaimableMsgs  atomic.Int64 // reclaimable messages, empty ones too: what makes a reclaim pass worth it
	drops            [numCauses]atomic.Int64

	// seqFloor is at least every seq a removed partition ever issued, so a
	// partition created later with the same name starts above them (D6).
	seqFloor atomic.Uint64
	// moveFloor is at least every seq issued by a queue that an ownership
	// move dropped (DropForMove), and never above seqFloor. An id of ours
	// for a queue that is not here, below it, is stale (docs/engine.md,
	// "Ownership moves"). It stays 0 in a broker that never lost a queue.
	moveFloor atomic.Uint64

	nextHint atomic.Uint64 // spreads partitions over arena and wheel shards
	sweep    sweeper
	// countSlack: the broker's footprint counts the arena's slack (off with
	// the charges, Config.payloadOnly).
	countSlack bool
	compact    compactor
	reclaimMu  sync.Mutex // one broker-wide reclaim pass at a time

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
}

// New starts an engine. With cfg.Clock nil it reads the real clock and ticks
// its timing wheel from one goroutine; otherwise the caller calls Tick.
func New(cfg Config) *Engine {
	cfg.fillDefaults()
	e := &Engine{
		cfg:     cfg,
		inc:     cfg.Incarnation,
		manual:  cfg.Clock,
		tenants: xsync.NewMap[string, *tenant](),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	e.clock.wake = make(chan struct{}, 1)
	if e.inc == 0 {
		e.inc = newIncarnation()
	}
	e.charge = measuredCharges
	e.countSlack = !cfg.payloadOnly
	if cfg.payloadOnly {
		e.charge = charges{}
	}
	e.compact.kick = make(chan struct{}, 1)
	e.compact.done = make(chan struct{})
	e.incHex = fmt.Sprintf("%x", e.inc)
	e.idPrefix = "e:" + e.incHex + ":"
	e.now.Store(e.readClock())
	shards := runtime.GOMAXPROCS(0) * 4
	e.arena = arena.New(cfg.SegmentSize, shards)
	e.arena.SetMaxFree(spareSegments(cfg.MaxBytes, cfg.SegmentSize))
	e.wheels = wheel.NewSharded(shards, cfg.Tick, 4096, e.now.Load())
	d := e.Resolve(OptionSet{})
	e.defaultOpts = &d
	e.sweep.e = e
	e.wheels.Shard(0).Schedule(&e.sweep.timer, e.now.Load()+int64(cfg.SweepEvery), &e.sweep)
	if e.manual == nil {
		go e.run()
		go e.compactLoop()
	} else {
		close(e.done)
		close(e.compact.done)
	}
	return e
}

// Incarnation is this engine's random incarnation, as it appears in ids.
func (e *Engine) Incarnation() string { return e.incHex }

// CellBytes is the broker's whole ephemeral footprint: payload bytes held,
// every tenant included, plus the charge of every queue, partition, group,
// cursor and parked pop, plus what Charge took, plus the arena's slack, the
// free bytes of the segments that live messages keep (docs/engine.md, "What
// the budgets count"). It is what QUEEN_EPHEMERAL_MAX_BYTES bounds.
func (e *Engine) CellBytes() int64 { return e.footprint.Load() + e.sealSlack() }

// sealSlack is the part of the arena's slack that the footprint does not
// hold (arena.SealSlack; the frees' part is in the footprint), 0 when the
// slack is not counted.
func (e *Engine) sealSlack() int64 {
	if !e.countSlack {
		return 0
	}
	return e.arena.SealSlack()
}

// Drops is the number of messages dropped for cause since start.
func (e *Engine) Drops(c Cause) int64 { return e.drops[c].Load() }

// Close answers every parked pop with an empty batch and stops the clock.
// Verbs called after Close refuse with ErrClosed.
func (e *Engine) Close() {
	if e.closed.Swap(true) {
		return
	}
	if e.manual == nil {
		close(e.stop)
	}
	<-e.done
	<-e.compact.done
	e.ReleaseWaiters()
}

// spareSegments is how many free segments the arena keeps for reuse: a
// sixteenth of the broker total, between 2 and arena.DefaultMaxFree (64), so
// that what the pool holds beyond the budget stays small next to it (4 MiB
// of 1 MiB segments for a 64 MiB total, 16 for the default 256 MiB) and a
// fallen load has little to give back (docs/engine.md, "Memory goes back
// when the load falls").
func spareSegments(maxBytes int64, segmentSize int) int {
	if segmentSize <= 0 {
		segmentSize = arena.DefaultSegmentSize
	}
	return int(min(arena.DefaultMaxFree, max(2, maxBytes/int64(segmentSize)/16)))
}

// MaxBytes is the broker's total budget in force (QUEEN_EPHEMERAL_MAX_BYTES
// or its default), the bound CellBytes is held to: exported so a metrics
// scrape can show how near the broker is to it.
func (e *Engine) MaxBytes() int64 { return e.cfg.MaxBytes }
