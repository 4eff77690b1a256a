package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// The reclaim point follows the lowest settled cursor (D3) without a pass
// over every group's cursor on each move (partition.settledMoved): after any
// sequence of pops (explicit and autoAck), acks of every status, lease
// expiries, pushes that drop from the head and forgotten groups, a partition whose groups all have
// cursors never leaves its reclaim point below the lowest of them. (It may
// stand above one: a group created later starts at the oldest message held,
// below the point, and never moves it back.)
func TestReclaimPointFollowsTheLowestCursor(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			h := newHarness(t, func(c *Config) { c.GroupIdle = 20 * time.Second })
			// A short dropOldest ring: pushes free messages from the head
			// under the cursors too (normalize).
			h.configure("q", OptionSet{Has: HasMaxLength | HasPolicy | HasLeaseSeconds | HasRetryLimit,
				Options: Options{MaxLength: 24, Policy: PolicyDropOldest, LeaseSeconds: 2, RetryLimit: 3}})
			groups := numbered("g", 12) // more than cursorIndexAt: the map is used
			for i := 0; i < 300; i++ {
				g := groups[rng.IntN(len(groups))]
				switch op := rng.IntN(10); {
				case op < 2:
					h.push("q", "p", "m")
				case op < 4:
					h.pop(PopRequest{Queue: "q", Partition: "p", Group: g, Batch: 1 + rng.IntN(4), AutoAck: true})
				case op < 8:
					ms := h.pop(PopRequest{Queue: "q", Partition: "p", Group: g, Batch: 1 + rng.IntN(4)})
					rng.Shuffle(len(ms), func(a, b int) { ms[a], ms[b] = ms[b], ms[a] })
					for _, m := range ms {
						if rng.IntN(5) > 0 { // some stay unacked until their lease expires
							h.ack("q", g, AckStatus(rng.IntN(3)), m)
						}
					}
				default:
					h.advance(time.Duration(1+rng.IntN(3)) * time.Second) // leases expire, idle groups go
				}
				checkReclaim(t, h.e, i)
			}
		})
	}
}

func checkReclaim(t *testing.T, e *Engine, step int) {
	t.Helper()
	q := e.lookup("default", "q")
	if q == nil {
		return
	}
	p := q.findPartition("p")
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	live, low := 0, p.tail
	for _, c := range p.cursors {
		if !c.g.dead.Load() {
			live++
			low = min(low, c.settled)
		}
	}
	if live == 0 || live < len(q.groupList()) {
		return
	}
	if p.reclaim < low && low > p.head {
		t.Fatalf("step %d: reclaim point %d below the lowest cursor %d (head %d, tail %d)", step, p.reclaim, low, p.head, p.tail)
	}
}
