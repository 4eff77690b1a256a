package engine

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStressConcurrentPushPopAck runs producers, explicit-ack consumers
// (two groups of competing consumers, some failing, some walking away from
// their lease) and autoAck consumers (two groups and queue mode) over
// several partitions on the real clock, then checks the invariants: with
// explicit acks every message is acked exactly once per group unless it was
// dropped and counted (retry); with autoAck none is delivered twice and,
// with nothing dropped, every one once; the gauges add up (D2, D3, D5, T2).
func TestStressConcurrentPushPopAck(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test: skipped with -short")
	}
	e := New(Config{MaxBytes: 1 << 30})
	defer e.Close()
	big := Options{MaxLength: 1_000_000, MaxBytes: 1 << 28}
	must(t, e.Configure("default", "work", OptionSet{
		Has:     HasMaxLength | HasMaxBytes | HasLeaseSeconds | HasRetryLimit,
		Options: Options{MaxLength: big.MaxLength, MaxBytes: big.MaxBytes, LeaseSeconds: 1, RetryLimit: 3},
	}))
	must(t, e.Configure("default", "feed", OptionSet{
		Has: HasMaxLength | HasMaxBytes, Options: big,
	}))

	const producers, perProducer, batch = 4, 1500, 10
	partitions := []string{"p0", "p1", "p2", "p3"}
	explicitGroups := []string{"g1", "g2"}
	autoGroups := []string{"a1", "a2", ""}

	var producing atomic.Int32
	producing.Store(producers)
	var wg sync.WaitGroup
	for pi := 0; pi < producers; pi++ {
		wg.Add(1)
		go func(pi int) {
			defer wg.Done()
			defer producing.Add(-1)
			for i := 0; i < perProducer; i += batch {
				ps := make([][]byte, batch)
				for j := range ps {
					ps[j] = []byte(strconv.Itoa(pi*perProducer + i + j))
				}
				part := partitions[(pi+i/batch)%len(partitions)]
				for _, q := range []string{"work", "feed"} {
					if _, err := e.Push("default", q, part, ps); err != nil {
						t.Errorf("push: %v", err)
						return
					}
				}
			}
		}(pi)
	}
	total := producers * perProducer

	// Explicit-ack consumers: two per group, each pop either completes,
	// fails one message, or (rarely) walks away so the lease expires.
	type groupTally struct {
		mu        sync.Mutex
		completed map[int]int // payload -> completed acks answered acked
		failDrops int         // failed acks answered acked: dropped for retry
	}
	tallies := map[string]*groupTally{}
	for _, g := range explicitGroups {
		tallies[g] = &groupTally{completed: map[int]int{}}
	}
	deadline := time.Now().Add(20 * time.Second)
	settledAll := func() bool {
		var d DepthInfo
		for _, g := range explicitGroups {
			if err := e.Depth("default", "work", g, &d); err != nil || d.Pending != 0 {
				return false
			}
		}
		return true
	}
	for _, g := range explicitGroups {
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func(g string, seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 7))
				tally := tallies[g]
				for time.Now().Before(deadline) {
					c := &collector{e: e}
					r := PopRequest{Tenant: "default", Queue: "work", Group: g, Batch: 8, Wait: true, Timeout: 20 * time.Millisecond}
					_, parked, err := e.Pop(&r, c)
					if err != nil {
						t.Errorf("pop: %v", err)
						return
					}
					if !parked.IsZero() {
						waitDone(c)
					}
					if len(c.msgs) == 0 {
						if producing.Load() == 0 && settledAll() {
							return
						}
						continue
					}
					roll := rng.IntN(100)
					if roll < 2 && producing.Load() > 0 {
						continue // walk away: the lease expires and redelivers
					}
					items := make([]AckItem, len(c.msgs))
					for i, m := range c.msgs {
						items[i] = AckItem{ID: []byte(m.ID)}
					}
					failIdx := -1
					if roll < 12 {
						failIdx = rng.IntN(len(items))
						items[failIdx].Status = AckFailed
					}
					out, err := e.Ack("default", "work", g, items, nil)
					if err != nil {
						t.Errorf("ack: %v", err)
						return
					}
					tally.mu.Lock()
					for i, o := range out {
						if o != OutcomeAcked {
							continue
						}
						if i == failIdx {
							tally.failDrops++
						} else {
							v, _ := strconv.Atoi(c.msgs[i].Payload)
							tally.completed[v]++
						}
					}
					tally.mu.Unlock()
				}
				t.Errorf("group %s did not settle before the deadline", g)
			}(g, uint64(k+1)*uint64(len(g)))
		}
	}

	// autoAck consumers: one per group, plus a second queue-mode consumer.
	autoSeen := map[string][]atomic.Int32{}
	for _, g := range autoGroups {
		autoSeen[g] = make([]atomic.Int32, total)
	}
	for i, g := range append(autoGroups, "") {
		wg.Add(1)
		go func(g string, i int) {
			defer wg.Done()
			seen := autoSeen[g]
			for time.Now().Before(deadline) {
				c := &collector{}
				r := PopRequest{Tenant: "default", Queue: "feed", Group: g, Batch: 16, AutoAck: true, Wait: i%2 == 0, Timeout: 10 * time.Millisecond}
				_, parked, err := e.Pop(&r, c)
				if err != nil {
					t.Errorf("pop: %v", err)
					return
				}
				if !parked.IsZero() {
					waitDone(c)
				}
				for _, m := range c.msgs {
					v, _ := strconv.Atoi(m.Payload)
					seen[v].Add(1)
				}
				if len(c.msgs) == 0 && producing.Load() == 0 {
					var d DepthInfo
					if e.Depth("default", "feed", queueModeShown(g), &d) == nil && d.Pending == 0 {
						return
					}
				}
			}
			t.Errorf("autoAck group %q did not drain before the deadline", g)
		}(g, i)
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// Explicit: acked exactly once per group unless dropped, and the drops
	// add up to the queue's retry counter.
	var unacked int
	for _, g := range explicitGroups {
		tally := tallies[g]
		for v := 0; v < total; v++ {
			switch n := tally.completed[v]; {
			case n > 1:
				t.Fatalf("group %s: message %d acked %d times", g, v, n)
			case n == 0:
				unacked++
			}
		}
	}
	qs := e.Queues("default", nil)
	work, feed := qs[1], qs[0]
	if work.Name != "work" || feed.Name != "feed" {
		t.Fatalf("listing order: %v", qs)
	}
	if int64(unacked) != work.Drops.Retry {
		t.Fatalf("%d messages were never acked completed, but the retry drops say %d", unacked, work.Drops.Retry)
	}
	if work.Drops.Bounds+work.Drops.TTL+feed.Drops.Bounds+feed.Drops.TTL+feed.Drops.Retry != 0 {
		t.Fatalf("unexpected drops: work %+v feed %+v", work.Drops, feed.Drops)
	}
	// autoAck: every message exactly once per group (queue mode shared by two
	// consumers is one group).
	for _, g := range autoGroups {
		seen := autoSeen[g]
		for v := range seen {
			if n := seen[v].Load(); n != 1 {
				t.Fatalf("autoAck group %q saw message %d %d times", g, v, n)
			}
		}
	}
	// Gauges: everything is settled, so nothing is pending; every byte held is
	// reclaimable; reset frees every payload byte, and delete every charge.
	if work.Depth != 0 || feed.Depth != 0 {
		t.Fatalf("depth after drain: work %d feed %d", work.Depth, feed.Depth)
	}
	if work.Bytes+feed.Bytes != e.reclaimableBytes.Load() {
		t.Fatalf("bytes: work %d + feed %d vs cell %d, reclaimable %d", work.Bytes, feed.Bytes, e.CellBytes(), e.reclaimableBytes.Load())
	}
	var d DepthInfo
	must(t, e.Depth("default", "work", "", &d))
	var sum int64
	for _, p := range d.Partitions {
		sum += p.Bytes
	}
	if sum != work.Bytes || d.Bytes != work.Bytes {
		t.Fatalf("partition bytes %d, depth bytes %d, listing bytes %d", sum, d.Bytes, work.Bytes)
	}
	for _, q := range []string{"work", "feed"} {
		if _, err := e.Reset("default", q); err != nil {
			t.Fatal(err)
		}
	}
	if e.reclaimableBytes.Load() != 0 || e.arena.Held() != 0 {
		t.Fatalf("after reset: reclaimable %d arena %d", e.reclaimableBytes.Load(), e.arena.Held())
	}
	for _, q := range []string{"work", "feed"} {
		if _, err := e.Delete("default", q); err != nil {
			t.Fatal(err)
		}
	}
	if e.CellBytes() != 0 {
		t.Fatalf("after delete: cell %d, want every charge given back", e.CellBytes())
	}
}

func queueModeShown(g string) string {
	if g == "" {
		return QueueModeGroup
	}
	return g
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// waitDone spins until a parked pop's Complete ran (the engine completes it
// from a push or the wheel goroutine).
func waitDone(c *collector) {
	for !c.isDone() {
		time.Sleep(100 * time.Microsecond)
	}
}
