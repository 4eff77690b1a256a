package engine

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The mixed shape of issue 24, in small: messages pushed over 20 queues in
// turn, 18 of them consumed, in rounds. The two queues nobody consumes keep
// a tenth of every segment alive.
type mixedLoad struct {
	t      testing.TB
	e      *Engine
	queues []string
	c      *discard
	// refusedAt is the payload held (Held) at the first push refused.
	refusedAt int64
	refused   int
}

const mixedQueues, mixedConsumed = 20, 18

func newMixedLoad(t testing.TB, e *Engine) *mixedLoad {
	return &mixedLoad{t: t, e: e, queues: numbered("mx", mixedQueues), c: &discard{}, refusedAt: -1}
}

// round pushes one 100-byte message to every queue, then pops (autoAck)
// what the consumed ones hold.
func (m *mixedLoad) round() {
	m.t.Helper()
	ps := batchOf(1, 100)
	for _, q := range m.queues {
		if _, err := m.e.Push("default", q, "", ps); err != nil {
			if err != ErrBrokerFull {
				m.t.Fatalf("push to %s: %v, want it admitted or ErrBrokerFull", q, err)
			}
			if m.refused == 0 {
				m.refusedAt = m.e.arena.Held()
			}
			m.refused++
		}
	}
	for _, q := range m.queues[:mixedConsumed] {
		// A consumed queue found empty and quiet under memory pressure is
		// collected (docs/engine.md, "Empty inboxes under memory
		// pressure"); the pop that makes its group again may be refused.
		r := PopRequest{Tenant: "default", Queue: q, Batch: 100, AutoAck: true}
		if _, _, err := m.e.Pop(&r, m.c); err != nil && err != ErrBrokerFull {
			m.t.Fatalf("pop of %s: %v", q, err)
		}
	}
}

// arenaInUse is what the arena holds from the Go heap beyond its free pool.
func arenaInUse(e *Engine, seg int) int64 {
	return e.arena.Footprint() - int64(e.arena.Pooled()*seg)
}

// docs/engine.md (what the arena holds): the broker's total bounds what the
// arena holds, not only the payload counted in it. Without compaction (no
// sweep runs here), the mixed load is refused at the total while the
// payload held is a fraction of it, and the arena never holds more than the
// total plus its open segments. Before issue 24 the pinned segments were
// charged to nothing: the arena grew to 10 times the payload, past 3 × the
// total in this test, with every push admitted.
func TestSlackCountsAgainstTheBrokerTotal(t *testing.T) {
	const seg, total = 16 << 10, 1 << 20
	h := newHarness(t, func(c *Config) { c.SegmentSize = seg; c.MaxBytes = total })
	m := newMixedLoad(t, h.e)
	// Every shard's open segment, the survivors' shard's, and one segment
	// of a push admitted just under the total that seals one more.
	open := int64((h.e.arena.Shards()+1)*seg) + seg
	for range 2000 { // 4 MiB pushed
		m.round()
		if in := arenaInUse(h.e, seg); in > total+open {
			t.Fatalf("the arena holds %d bytes (payload %d, slack %d), past the total %d and the open segments' %d",
				in, h.e.arena.Held(), h.e.arena.Slack(), int64(total), open)
		}
	}
	if m.refused == 0 {
		t.Fatal("no push refused: the load never reached the total")
	}
	if m.refusedAt > total/2 {
		t.Fatalf("first refusal with %d payload bytes held: the slack was not what filled the total", m.refusedAt)
	}
	// The sweep compacts: the survivors move, the sparse segments go, and
	// pushes are admitted again.
	slack := h.e.arena.Slack()
	h.e.Sweep(h.clk.Now())
	if after := h.e.arena.Slack(); after > slack/4 {
		t.Fatalf("slack %d after the sweep compacted, %d before; want at most a quarter", after, slack)
	}
	if _, err := h.e.Push("default", m.queues[0], "", batchOf(1, 100)); err != nil {
		t.Fatalf("push after compaction: %v", err)
	}
	// Everything goes: the footprint, slack included, returns to 0.
	for _, q := range m.queues {
		if _, err := h.e.Delete("default", q); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.e.CellBytes(); got != 0 || h.e.arena.Slack() != 0 {
		t.Fatalf("after every queue went: CellBytes %d, slack %d; want 0", got, h.e.arena.Slack())
	}
}

// docs/engine.md (what the arena holds): under the mixed load with the
// sweep running, compaction keeps the arena within the total and pushes
// flowing until the unconsumed queues themselves fill it.
func TestCompactionKeepsTheMixedLoadWithinTheTotal(t *testing.T) {
	const seg, total = 16 << 10, 1 << 20
	h := newHarness(t, func(c *Config) { c.SegmentSize = seg; c.MaxBytes = total })
	m := newMixedLoad(t, h.e)
	open := int64((h.e.arena.Shards()+1)*seg) + seg
	for i := range 2000 {
		m.round()
		if i%20 == 19 {
			h.advance(time.Second) // a sweep
		}
		if in := arenaInUse(h.e, seg); in > total+open {
			t.Fatalf("round %d: the arena holds %d bytes, past the total %d and the open segments' %d", i, in, int64(total), open)
		}
	}
	// The unconsumed queues hold most of the total before pushes are
	// refused: the slack did not take its place.
	if m.refusedAt >= 0 && m.refusedAt < total/2 {
		t.Fatalf("first refusal with %d payload bytes held, want at least half the total: compaction did not keep up", m.refusedAt)
	}
}

// payloadFor is the payload of message n of queue q: it names both, then
// bytes derived from them, size bytes in all, so a payload read from
// another message's bytes or from recycled ones shows.
func payloadFor(q string, n, size int) []byte {
	b := fmt.Appendf(nil, "%s|%d|", q, n)
	for len(b) < size {
		b = append(b, byte('a'+(n+len(b))%26))
	}
	return b
}

// checkPayload says what is wrong with p, a payload made by payloadFor for
// queue q, or "".
func checkPayload(q string, p []byte) string {
	f := bytes.SplitN(p, []byte("|"), 3)
	if len(f) != 3 || string(f[0]) != q {
		return fmt.Sprintf("payload %.40q does not name queue %s", p, q)
	}
	n, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return fmt.Sprintf("payload %.40q has no number", p)
	}
	if want := payloadFor(q, n, len(p)); !bytes.Equal(p, want) {
		return fmt.Sprintf("payload %.60q, want %.60q", p, want)
	}
	return ""
}

// docs/engine.md (what the arena holds): a message moved by compaction is
// the same message: its bytes, its place, its lease. A leased message moved
// is acked by the id it was delivered with, one whose lease ends is
// redelivered from its new bytes, and every other one pops in order.
func TestCompactionKeepsEveryMessage(t *testing.T) {
	const seg = 4 << 10
	h := newHarness(t, func(c *Config) { c.SegmentSize = seg; c.MaxBytes = 64 << 20 })
	// Partitions take the arena's shards in turn: with four queues a shard,
	// three consumed and one not, every segment stays a quarter live.
	shards := h.e.arena.Shards()
	qs := numbered("k", 4*shards)
	consumed, kept := qs[:3*shards], qs[3*shards:]
	next := map[string]int{}
	for round := range 200 {
		for i, q := range qs {
			size := 50 + (round*7+i*13)%400
			if _, err := h.e.Push("default", q, "", [][]byte{payloadFor(q, next[q], size)}); err != nil {
				t.Fatal(err)
			}
			next[q]++
		}
		for _, q := range consumed {
			h.pop(PopRequest{Queue: q, Batch: 100, AutoAck: true})
		}
	}
	h.e.reclaimAll() // what was consumed goes: the segments are sparse
	// Two leases on the unconsumed queues, taken before the move.
	acked := h.pop(PopRequest{Queue: kept[0], Batch: 10})
	expired := h.pop(PopRequest{Queue: kept[1], Batch: 10})
	if set, slack := h.e.arena.Sparse(nil); slack < seg {
		t.Fatalf("sparse slack %d: the test made no segment worth compacting", slack)
	} else if moved := h.e.compactSet(set); moved == 0 {
		t.Fatal("compaction moved nothing")
	}
	if _, slack := h.e.arena.Sparse(nil); slack != 0 {
		t.Fatalf("sparse slack %d after compaction, want 0", slack)
	}
	if out := h.ack(kept[0], "", AckCompleted, acked...); len(out) != 10 || out[9] != OutcomeAcked {
		t.Fatalf("ack of a lease moved: %v", out)
	}
	h.advance(time.Duration(h.e.defaultOpts.LeaseSeconds+1) * time.Second)
	for _, q := range kept {
		ms := h.pop(PopRequest{Queue: q, Batch: 10000})
		want := 200
		if q == kept[0] {
			want = 190
		}
		if len(ms) != want {
			t.Fatalf("%s: popped %d messages, want %d", q, len(ms), want)
		}
		for i, m := range ms {
			if bad := checkPayload(q, []byte(m.Payload)); bad != "" {
				t.Fatalf("%s message %d: %s", q, i, bad)
			}
			if i > 0 && m.Seq != ms[i-1].Seq+1 {
				t.Fatalf("%s: seq %d after %d", q, m.Seq, ms[i-1].Seq)
			}
		}
		if q == kept[1] && (ms[0].Seq != expired[0].Seq || ms[0].Attempts != 1 || ms[0].Payload != expired[0].Payload) {
			t.Fatalf("redelivery after the lease ended: %+v, want %+v with 1 attempt", ms[0], expired[0])
		}
	}
}

// docs/engine.md (what the arena holds): compaction runs beside pushes,
// pops, acks and reclaims, and no pop ever reads bytes that a move freed:
// every payload delivered is the one pushed (run with -race). The segments
// are small, so they seal, empty and are reused all the time.
func TestCompactionRacesTheHotPaths(t *testing.T) {
	const seg = 2 << 10
	h := newHarness(t, func(c *Config) { c.SegmentSize = seg; c.MaxBytes = 8 << 20 })
	e := h.e
	qs := numbered("r", 6)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	fail := func(s string) {
		select {
		case errs <- s:
		default:
		}
		stop.Store(true)
	}
	for w, q := range qs {
		wg.Go(func() { // a pusher per queue
			for n := 0; !stop.Load() && n < 20000; n++ {
				if _, err := e.Push("default", q, "", [][]byte{payloadFor(q, n, 40+(n*31+w)%200)}); err != nil && err != ErrBrokerFull && err != ErrQueueFull {
					fail(err.Error())
				}
			}
		})
	}
	for _, q := range qs[:4] { // the consumed queues: autoAck, and lease + ack
		wg.Go(func() {
			c := &checker{q: q, fail: fail}
			ic := &idCollector{e: e}
			for !stop.Load() {
				r := PopRequest{Tenant: "default", Queue: q, Batch: 20, AutoAck: true}
				e.Pop(&r, c)
				ic.buf, ic.items = ic.buf[:0], ic.items[:0]
				r = PopRequest{Tenant: "default", Queue: q, Batch: 20}
				e.Pop(&r, &both{c, ic})
				e.Ack("default", q, "", ic.items, nil)
			}
		})
	}
	wg.Go(func() { // a slow reader of the unconsumed ones: its leases hold messages a while
		cs := []*checker{{q: qs[4], fail: fail}, {q: qs[5], fail: fail}}
		for i := 0; !stop.Load(); i++ {
			r := PopRequest{Tenant: "default", Queue: cs[i%2].q, Group: "slow", Batch: 5, AutoAck: true}
			e.Pop(&r, cs[i%2])
			time.Sleep(time.Millisecond)
		}
	})
	var rounds, moved int64
	wg.Go(func() { // the compactor and the reclaim
		for !stop.Load() {
			e.reclaimAll()
			set, _ := e.arena.Sparse(nil)
			moved += e.compactSet(set)
			rounds++
		}
	})
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Error(s)
	}
	if moved == 0 {
		t.Fatalf("%d compactions moved nothing: the test raced nothing", rounds)
	}
	t.Logf("%d compactions moved %d bytes", rounds, moved)
	for _, q := range qs {
		if _, err := e.Delete("default", q); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.CellBytes(); got != 0 || e.arena.Held() != 0 || e.arena.Slack() != 0 {
		t.Fatalf("after every queue went: CellBytes %d, held %d, slack %d; want 0", got, e.arena.Held(), e.arena.Slack())
	}
}

// checker is a Consumer that checks every payload it is handed.
type checker struct {
	q    string
	fail func(string)
}

func (c *checker) Deliver(m Message) {
	if bad := checkPayload(c.q, m.Payload); bad != "" {
		c.fail(bad)
	}
}
func (c *checker) Complete(int, Origin) {}

// both hands every message to two consumers.
type both struct{ a, b Consumer }

func (c *both) Deliver(m Message)         { c.a.Deliver(m); c.b.Deliver(m) }
func (c *both) Complete(n int, by Origin) { c.a.Complete(n, by); c.b.Complete(n, by) }

// docs/engine.md (what the arena holds): a push refused at the broker's
// total wakes the compactor, which makes the room without waiting for a
// sweep (here an hour away). The total is reached by Charge once the mixed
// load has left its slack, so no refusal wakes the compactor before the one
// the test makes.
func TestRefusalWakesTheCompactor(t *testing.T) {
	const seg, total = 16 << 10, 4 << 20
	e := New(Config{SegmentSize: seg, MaxBytes: total, SweepEvery: time.Hour})
	t.Cleanup(e.Close)
	m := newMixedLoad(t, e)
	for range 1000 { // 2 MB pushed, a tenth of it left
		m.round()
	}
	if m.refused != 0 {
		t.Fatalf("%d pushes refused before the total was reached", m.refused)
	}
	e.reclaimAll() // the consumed messages go: the segments are sparse
	if slack := e.arena.Slack(); slack < 16*seg {
		t.Fatalf("slack %d: the load left too little to compact", slack)
	}
	e.Charge(total - e.CellBytes()) // the total is reached, with nothing reclaimable
	ps := batchOf(1, 100)
	if _, err := e.Push("default", m.queues[0], "", ps); err != ErrBrokerFull {
		t.Fatalf("push to a full broker: %v, want ErrBrokerFull", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.Push("default", m.queues[0], "", ps)
		if err == nil {
			break
		}
		if err != ErrBrokerFull || time.Now().After(deadline) {
			t.Fatalf("push: %v 10 s after the refusal (slack %d, held %d)", err, e.arena.Slack(), e.arena.Held())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// docs/engine.md (what the arena holds): a refusal at the total has any
// sparse segment compacted, however little slack it holds: here one
// segment sealed with a single live byte, just under a segment of slack and
// so under the sweep's threshold, is what fills the total. Without the
// refusal's urgency the broker refused every push until more slack piled up,
// and a full broker whose pushes are refused piles none up.
func TestRefusalCompactsASingleSparseSegment(t *testing.T) {
	const seg, total = 16 << 10, 1 << 20
	e := New(Config{SegmentSize: seg, MaxBytes: total, SweepEvery: time.Hour})
	t.Cleanup(e.Close)
	// Partitions take the shards in turn: p0 and the last share one.
	shards := e.arena.Shards()
	parts := numbered("p", shards+1)
	for _, p := range parts {
		if _, err := e.Push("default", "q", p, batchOf(1, 1)); err != nil {
			t.Fatal(err)
		}
	}
	last := parts[shards]
	// 100-byte messages to the last partition until the shared segment is
	// sealed by the last of them: it holds p0's byte and the last
	// partition's messages, the new open segment one message.
	for range (seg-2)/100 + 1 {
		if _, err := e.Push("default", "q", last, batchOf(1, 100)); err != nil {
			t.Fatal(err)
		}
	}
	r := PopRequest{Tenant: "default", Queue: "q", Partition: last, Batch: 1000, AutoAck: true}
	if n, _, err := e.Pop(&r, &discard{}); err != nil || n != (seg-2)/100+2 {
		t.Fatalf("pop: %d, %v", n, err)
	}
	e.reclaimAll() // the consumed messages go: their segment is a segment of slack but a byte
	if slack := e.arena.Slack(); slack != seg-1 {
		t.Fatalf("slack %d, want %d: the test did not make the segment it means", slack, seg-1)
	}
	e.Charge(total - e.CellBytes()) // the total is reached
	ps := batchOf(1, 100)
	if _, err := e.Push("default", "new", "", ps); err != ErrBrokerFull {
		t.Fatalf("push to a full broker: %v, want ErrBrokerFull", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.Push("default", "new", "", ps)
		if err == nil {
			break
		}
		if err != ErrBrokerFull || time.Now().After(deadline) {
			t.Fatalf("push: %v 10 s after the refusal (slack %d)", err, e.arena.Slack())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
