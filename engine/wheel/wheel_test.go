package wheel

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// rec records every fire of one timer.
type rec struct {
	Timer
	fires []int64
}

func (r *rec) Fire(now int64) { r.fires = append(r.fires, now) }

// expectFires checks r fired exactly at the given Advance times.
func expectFires(t *testing.T, name string, r *rec, want ...int64) {
	t.Helper()
	if len(r.fires) != len(want) {
		t.Fatalf("%s: fired at %v, want %v", name, r.fires, want)
	}
	for i := range want {
		if r.fires[i] != want[i] {
			t.Fatalf("%s: fired at %v, want %v", name, r.fires, want)
		}
	}
}

// firstAtOrAfter is the first of the (ascending) advance times >= when.
func firstAtOrAfter(advances []int64, when int64) (int64, bool) {
	for _, a := range advances {
		if a >= when {
			return a, true
		}
	}
	return 0, false
}

func TestFiresAtFirstAdvanceAtOrAfterWhen(t *testing.T) {
	const start = 1_000_000_007 // not on a tick boundary
	// Advance times: sub-tick steps, exact hits, one ns short, tick-sized and
	// multi-tick steps, a jump past one rotation (8 slots * 10ms).
	advances := []int64{
		start + 3*ms, start + 9*ms, start + 10*ms - 1, start + 10*ms, start + 10*ms + 1,
		start + 15*ms, start + 15*ms, start + 27*ms, start + 45*ms, start + 46*ms,
		start + 79*ms, start + 81*ms, start + 200*ms, start + 203*ms, start + 1000*ms,
	}
	cases := []struct {
		name string
		when int64
	}{
		{"sub-tick", start + 1},
		{"same tick as first advance but later", start + 4*ms},
		{"exactly an advance", start + 9*ms},
		{"one ns before tick edge", start + 10*ms - 1},
		{"on tick edge", start + 10*ms},
		{"one ns after tick edge", start + 10*ms + 1},
		{"between advances in one tick", start + 12*ms},
		{"mid tick later", start + 14*ms + 999_999},
		{"two ticks on", start + 26*ms},
		{"skipped over by multi-tick step", start + 31*ms},
		{"one ns after an advance", start + 45*ms + 1},
		{"last tick of rotation", start + 79*ms},
		{"first tick of next rotation", start + 80*ms},
		{"two rotations on", start + 170*ms + 1},
		{"exactly two rotations", start + 160*ms},
		{"late in a 797ms jump", start + 999*ms},
		{"never reached", start + 1000*ms + 1},
	}
	w := New(10*time.Millisecond, 8, start)
	rs := make([]rec, len(cases))
	for i, c := range cases {
		w.Schedule(&rs[i].Timer, c.when, &rs[i])
		if got := rs[i].When(); got != c.when {
			t.Fatalf("%s: When = %d, want %d", c.name, got, c.when)
		}
	}
	for _, a := range advances {
		w.Advance(a)
	}
	for i, c := range cases {
		if at, ok := firstAtOrAfter(advances, c.when); ok {
			expectFires(t, c.name, &rs[i], at)
			if rs[i].When() != 0 {
				t.Fatalf("%s: When = %d after firing", c.name, rs[i].When())
			}
		} else {
			expectFires(t, c.name, &rs[i])
		}
	}
	if w.Len() != 1 {
		t.Fatalf("Len = %d, want 1", w.Len())
	}
}

// TestRandomAgainstModel schedules random deadlines (up to many rotations)
// and advances by random steps (sub-tick to several rotations), checking every
// timer fires exactly once, at the first Advance with now >= when.
func TestRandomAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		start := rng.Int64N(1 << 40)
		slots := 1 << rng.IntN(6)
		w := New(10*time.Millisecond, slots, start)
		rs := make([]rec, 500)
		whens := make([]int64, len(rs))
		for i := range rs {
			whens[i] = start + rng.Int64N(int64(slots)*10*ms*20)
			w.Schedule(&rs[i].Timer, whens[i], &rs[i])
		}
		var advances []int64
		now := start
		for now < start+int64(slots)*10*ms*21 {
			switch rng.IntN(4) {
			case 0:
				now += rng.Int64N(10 * ms)
			case 1:
				now += rng.Int64N(30 * ms)
			case 2:
				now += 10 * ms
			default:
				now += rng.Int64N(int64(slots) * 10 * ms * 3)
			}
			advances = append(advances, now)
			w.Advance(now)
			for i := range rs {
				if len(rs[i].fires) > 0 && rs[i].fires[0] < whens[i] {
					t.Fatalf("round %d: timer %d (when %d) fired early at %d", round, i, whens[i], rs[i].fires[0])
				}
			}
		}
		for i := range rs {
			at, _ := firstAtOrAfter(advances, whens[i])
			expectFires(t, "random", &rs[i], at)
		}
		if w.Len() != 0 {
			t.Fatalf("Len = %d after all fired", w.Len())
		}
	}
}

func TestPastFiresAtNextAdvance(t *testing.T) {
	w := New(10*time.Millisecond, 16, 0)
	w.Advance(500 * ms)
	var a, b, c rec
	w.Schedule(&a.Timer, 3*ms, &a)   // long past, another slot
	w.Schedule(&b.Timer, 500*ms, &b) // exactly now
	w.Schedule(&c.Timer, -40*ms, &c) // before the wheel's start
	w.Advance(500 * ms)              // same now: still the next Advance
	expectFires(t, "past", &a, 500*ms)
	expectFires(t, "now", &b, 500*ms)
	expectFires(t, "before start", &c, 500*ms)

	// Time going backwards is treated as standing still.
	var d rec
	w.Schedule(&d.Timer, 505*ms, &d)
	w.Advance(100 * ms)
	expectFires(t, "backwards", &d)
	w.Advance(505 * ms)
	expectFires(t, "backwards", &d, 505*ms)
}

func TestFarFutureFiresOnlyInItsRotation(t *testing.T) {
	const slots = 8
	w := New(10*time.Millisecond, slots, 0)
	var r rec
	when := 5*slots*10*ms + 3*ms // five rotations on, same slot as 3ms
	w.Schedule(&r.Timer, when, &r)
	for now := int64(0); now <= when+20*ms; now += 10 * ms {
		w.Advance(now)
		if now < when && len(r.fires) != 0 {
			t.Fatalf("fired early at %d (when %d)", now, when)
		}
	}
	expectFires(t, "far", &r, when-3*ms+10*ms)
}

// SleepUntil: the earliest deadline before the limit, or the limit; timers
// of a later rotation in the slots it walks, and timers past the limit, do
// not count.
func TestSleepUntilFindsTheNextDeadline(t *testing.T) {
	const slots = 16
	w := New(10*time.Millisecond, slots, 0)
	w.Advance(100 * ms)
	noWake := func() { t.Fatal("woken with nothing scheduled") }
	if got := w.SleepUntil(1000*ms, noWake); got != 1000*ms {
		t.Fatalf("empty wheel: %d, want the limit", got/ms)
	}
	w.Advance(100 * ms) // the driver wakes: disarmed
	var late, far, near rec
	w.Schedule(&late.Timer, 100*ms+slots*10*ms+5*ms, &late) // the next rotation, in a slot walked
	w.Schedule(&far.Timer, 5000*ms, &far)                   // past the limit
	if got := w.SleepUntil(200*ms, noWake); got != 200*ms {
		t.Fatalf("nothing due before the limit: %d ms, want 200", got/ms)
	}
	w.Advance(100 * ms) // the driver wakes: disarmed
	w.Schedule(&near.Timer, 137*ms, &near)
	if got := w.SleepUntil(200*ms, func() {}); got != 137*ms {
		t.Fatalf("%d ms, want 137", got/ms)
	}
	// A deadline already past is answered as it is: nothing may sleep.
	var past rec
	w.Schedule(&past.Timer, 50*ms, &past)
	if got := w.SleepUntil(200*ms, func() {}); got != 50*ms {
		t.Fatalf("%d ms, want 50 (past)", got/ms)
	}
}

// SleepUntil against a model: after random schedules, stops and advances,
// it answers the earliest deadline of a scheduled timer before the limit
// (any limit within a rotation), or the limit.
func TestSleepUntilAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		const slots = 64
		start := rng.Int64N(1 << 40)
		w := New(10*time.Millisecond, slots, start)
		rs := make([]rec, rng.IntN(40))
		for i := range rs {
			w.Schedule(&rs[i].Timer, start+rng.Int64N(slots*10*ms*3), &rs[i])
		}
		for i := range rs {
			if rng.IntN(4) == 0 {
				w.Stop(&rs[i].Timer)
			}
		}
		now := start + rng.Int64N(slots*10*ms)
		w.Advance(now)
		limit := now + rng.Int64N(slots*10*ms-10*ms)
		want := limit
		for i := range rs {
			if when := rs[i].When(); when != 0 {
				want = min(want, when)
			}
		}
		if got := w.SleepUntil(limit, func() {}); got != want {
			t.Fatalf("round %d: SleepUntil(now+%d ms) = now+%d ms, want now+%d ms", round, (limit-now)/ms, (got-now)/ms, (want-now)/ms)
		}
	}
}

// While the driver sleeps, a Schedule before the sleep's end wakes it once;
// one at or after it does not, nor one after the next Advance.
func TestSleepUntilWakesForAnEarlierTimer(t *testing.T) {
	w := New(10*time.Millisecond, 64, 0)
	w.Advance(100 * ms)
	var sweep, a, b, c, d rec
	w.Schedule(&sweep.Timer, 1100*ms, &sweep)
	wakes := 0
	wake := func() { wakes++ }
	if got := w.SleepUntil(1100*ms, wake); got != 1100*ms {
		t.Fatalf("%d ms, want 1100", got/ms)
	}
	w.Schedule(&a.Timer, 1100*ms, &a) // not before the sleep's end
	if wakes != 0 {
		t.Fatalf("woken by a timer due when the sleep ends")
	}
	w.Schedule(&b.Timer, 400*ms, &b)
	w.Schedule(&c.Timer, 300*ms, &c) // already woken: once is enough
	if wakes != 1 {
		t.Fatalf("%d wakes, want 1", wakes)
	}
	w.Advance(120 * ms)
	w.Schedule(&d.Timer, 130*ms, &d) // awake: nothing to wake
	if wakes != 1 {
		t.Fatalf("%d wakes after the Advance, want 1", wakes)
	}
	// Sharded: the earliest shard's answer; each shard wakes for its own.
	s := NewSharded(4, 10*time.Millisecond, 64, 0)
	s.Advance(100 * ms)
	var e, f rec
	s.Shard(1).Schedule(&e.Timer, 700*ms, &e)
	if got := s.SleepUntil(1100*ms, wake); got != 700*ms {
		t.Fatalf("sharded: %d ms, want 700", got/ms)
	}
	s.Shard(2).Schedule(&f.Timer, 650*ms, &f)
	if wakes != 2 {
		t.Fatalf("sharded: %d wakes, want 2", wakes)
	}
}

func TestRescheduleMoves(t *testing.T) {
	w := New(10*time.Millisecond, 16, 0)
	var later, earlier, same, sameSlot rec
	w.Schedule(&later.Timer, 50*ms, &later)
	w.Schedule(&later.Timer, 120*ms, &later)
	w.Schedule(&earlier.Timer, 300*ms, &earlier)
	w.Schedule(&earlier.Timer, 30*ms, &earlier)
	w.Schedule(&same.Timer, 15*ms, &same)
	w.Schedule(&same.Timer, 17*ms, &same) // same tick, same slot
	w.Schedule(&sameSlot.Timer, 25*ms, &sameSlot)
	w.Schedule(&sameSlot.Timer, 25*ms+16*10*ms, &sameSlot) // next rotation, same slot
	if w.Len() != 4 {
		t.Fatalf("Len = %d, want 4", w.Len())
	}
	for _, now := range []int64{16 * ms, 17 * ms, 30 * ms, 100 * ms, 120 * ms, 400 * ms} {
		w.Advance(now)
	}
	expectFires(t, "same tick", &same, 17*ms)
	expectFires(t, "earlier", &earlier, 30*ms)
	expectFires(t, "later", &later, 120*ms)
	expectFires(t, "same slot", &sameSlot, 400*ms)
}

func TestStop(t *testing.T) {
	w := New(10*time.Millisecond, 16, 0)
	var never, r rec
	if w.Stop(&never.Timer) {
		t.Fatal("Stop of a zero Timer reported true")
	}
	w.Schedule(&r.Timer, 40*ms, &r)
	if !w.Stop(&r.Timer) {
		t.Fatal("Stop of a scheduled timer reported false")
	}
	if w.Stop(&r.Timer) {
		t.Fatal("second Stop reported true")
	}
	if r.When() != 0 || w.Len() != 0 {
		t.Fatalf("after Stop: When = %d, Len = %d", r.When(), w.Len())
	}
	w.Advance(time.Hour.Nanoseconds())
	expectFires(t, "stopped", &r)

	// Re-armed after Stop, then fired: Stop after firing reports false.
	w.Schedule(&r.Timer, w.now+1, &r)
	w.Advance(w.now + 1)
	if len(r.fires) != 1 || w.Stop(&r.Timer) {
		t.Fatalf("fires %v; Stop after fire must report false", r.fires)
	}
}

// rearm re-arms itself every period until n fires.
type rearm struct {
	Timer
	w      *Wheel
	period int64
	fires  []int64
	n      int
}

func (r *rearm) Fire(now int64) {
	r.fires = append(r.fires, now)
	if len(r.fires) < r.n {
		r.w.Schedule(&r.Timer, now+r.period, r)
	}
}

func TestRescheduleFromFire(t *testing.T) {
	w := New(10*time.Millisecond, 8, 0)
	r := &rearm{w: w, period: 25 * ms, n: 10}
	w.Schedule(&r.Timer, 25*ms, r)
	for now := int64(0); now <= time.Second.Nanoseconds(); now += 5 * ms {
		w.Advance(now)
	}
	if len(r.fires) != 10 {
		t.Fatalf("fires %v", r.fires)
	}
	for i, at := range r.fires {
		if at != int64(i+1)*25*ms {
			t.Fatalf("fires %v", r.fires)
		}
	}

	// Re-arming in the past from Fire does not loop: it fires at the next Advance.
	p := &rearm{w: w, period: -time.Hour.Nanoseconds(), n: 3}
	w.Schedule(&p.Timer, w.now, p)
	for i := 1; i <= 3; i++ {
		w.Advance(w.now)
		if len(p.fires) != i {
			t.Fatalf("advance %d: %d fires", i, len(p.fires))
		}
	}
}

// actor runs a function on Fire.
type actor struct {
	Timer
	fn    func(now int64)
	fires int
}

func (a *actor) Fire(now int64) { a.fires++; a.fn(now) }

func TestStopAndScheduleFromAnotherFire(t *testing.T) {
	w := New(10*time.Millisecond, 16, 0)
	var b, c rec
	var stopped bool
	a := &actor{fn: func(now int64) {
		stopped = w.Stop(&b.Timer)           // b is collected but not yet fired
		w.Schedule(&c.Timer, now+100*ms, &c) // c too: moved, not fired now
	}}
	w.Schedule(&a.Timer, 5*ms, a)   // slot 0: fires first
	w.Schedule(&b.Timer, 25*ms, &b) // slot 2
	w.Schedule(&c.Timer, 35*ms, &c) // slot 3
	w.Advance(40 * ms)
	if a.fires != 1 || !stopped {
		t.Fatalf("a fired %d times, Stop(b) = %v", a.fires, stopped)
	}
	expectFires(t, "stopped from fire", &b)
	expectFires(t, "moved from fire", &c)
	w.Advance(139 * ms)
	expectFires(t, "moved from fire", &c)
	w.Advance(140 * ms)
	expectFires(t, "moved from fire", &c, 140*ms)
	expectFires(t, "stopped from fire", &b)
	if w.Len() != 0 {
		t.Fatalf("Len = %d", w.Len())
	}
}

func TestBigJump(t *testing.T) {
	const n = 100_000
	w := New(10*time.Millisecond, 4096, 0)
	rng := rand.New(rand.NewPCG(3, 4))
	rs := make([]rec, n)
	hour := time.Hour.Nanoseconds()
	for i := range rs {
		w.Schedule(&rs[i].Timer, 1+rng.Int64N(hour), &rs[i])
	}
	w.Schedule(&rs[0].Timer, hour+1, &rs[0]) // just past the jump
	w.Advance(hour)
	for i := 1; i < n; i++ {
		expectFires(t, "jump", &rs[i], hour)
	}
	expectFires(t, "past the jump", &rs[0])
	if w.Len() != 1 {
		t.Fatalf("Len = %d, want 1", w.Len())
	}
	w.Advance(2 * hour)
	expectFires(t, "past the jump", &rs[0], 2*hour)
}

func TestManyInOneSlot(t *testing.T) {
	const n = 10_000
	w := New(10*time.Millisecond, 64, 0)
	rs := make([]rec, n)
	for i := range rs {
		// Same slot, three different rotations.
		w.Schedule(&rs[i].Timer, 5*ms+int64(i%3)*64*10*ms, &rs[i])
	}
	for i := 0; i < n; i += 2 {
		if !w.Stop(&rs[i].Timer) {
			t.Fatalf("Stop(%d) = false", i)
		}
	}
	for now := int64(0); now <= 3*64*10*ms; now += 10 * ms {
		w.Advance(now)
		for i := 1; i < n; i += 2 {
			when := 5*ms + int64(i%3)*64*10*ms
			if fired := len(rs[i].fires) == 1; fired != (now >= when) {
				t.Fatalf("now %d: timer %d (when %d) fired=%v", now, i, when, fired)
			}
		}
	}
	for i := 0; i < n; i += 2 {
		expectFires(t, "stopped", &rs[i])
	}
	if w.Len() != 0 {
		t.Fatalf("Len = %d", w.Len())
	}
}

// counted tracks armings against fires: pending goes up before each
// Schedule, down on each Stop that reports true and on each Fire. It must
// never go negative (a second fire for one arming) and ends at zero (nothing
// lost).
type counted struct {
	Timer
	pending atomic.Int64
	bad     *atomic.Int64
	fired   *atomic.Int64
}

func (c *counted) Fire(int64) {
	c.fired.Add(1)
	if c.pending.Add(-1) < 0 {
		c.bad.Add(1)
	}
}

func TestConcurrent(t *testing.T) {
	const (
		goroutines = 8
		perG       = 64
		ops        = 3000
	)
	s := NewSharded(4, 10*time.Millisecond, 64, 1)
	var now atomic.Int64
	now.Store(1)
	var bad, fired, armed, cancelled atomic.Int64
	stop := make(chan struct{})
	var advancer sync.WaitGroup
	advancer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				s.Advance(now.Add(3 * ms))
			}
		}
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			cs := make([]counted, perG)
			for i := range cs {
				cs[i].bad, cs[i].fired = &bad, &fired
			}
			for range ops {
				i := rng.IntN(perG)
				c := &cs[i]
				w := s.Shard(uint64(g*perG + i))
				if rng.IntN(3) == 0 {
					if w.Stop(&c.Timer) {
						c.pending.Add(-1)
						cancelled.Add(1)
					}
					continue
				}
				// Schedule moves an armed timer silently, so Stop first to
				// account for the arming it replaces.
				if w.Stop(&c.Timer) {
					c.pending.Add(-1)
					cancelled.Add(1)
				}
				c.pending.Add(1)
				armed.Add(1)
				w.Schedule(&c.Timer, now.Load()+rng.Int64N(200*ms)-50*ms, c)
			}
		})
	}
	wg.Wait()
	close(stop)
	advancer.Wait()
	s.Advance(now.Add(time.Hour.Nanoseconds())) // drain
	if bad.Load() != 0 {
		t.Fatalf("%d fires beyond their armings", bad.Load())
	}
	if got := fired.Load() + cancelled.Load(); got != armed.Load() {
		t.Fatalf("armed %d, fired %d + cancelled %d = %d", armed.Load(), fired.Load(), cancelled.Load(), got)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after drain", s.Len())
	}
	t.Logf("armed %d, fired %d, cancelled %d", armed.Load(), fired.Load(), cancelled.Load())
}

type nop struct{ Timer }

func (*nop) Fire(int64) {}

func TestZeroAllocs(t *testing.T) {
	w := New(10*time.Millisecond, 256, 0)
	var a, b nop
	now := int64(0)
	checks := map[string]func(){
		"Schedule+Stop": func() {
			w.Schedule(&a.Timer, now+35*ms, &a)
			w.Stop(&a.Timer)
		},
		"reschedule": func() {
			w.Schedule(&a.Timer, now+35*ms, &a)
			w.Schedule(&a.Timer, now+3*time.Second.Nanoseconds(), &a)
			w.Stop(&a.Timer)
		},
		"Schedule+Advance": func() {
			w.Schedule(&a.Timer, now+15*ms, &a)
			w.Schedule(&b.Timer, now-1, &b)
			now += 20 * ms
			w.Advance(now)
		},
		"big jump": func() {
			w.Schedule(&a.Timer, now+time.Hour.Nanoseconds(), &a)
			now += 2 * time.Hour.Nanoseconds()
			w.Advance(now)
		},
	}
	for name, fn := range checks {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs per run", name, n)
		}
	}
	s := NewSharded(4, 10*time.Millisecond, 256, 0)
	if n := testing.AllocsPerRun(100, func() {
		sw := s.Shard(7)
		sw.Schedule(&a.Timer, 5*ms, &a)
		s.Advance(10 * ms)
	}); n != 0 {
		t.Errorf("Sharded: %v allocs per run", n)
	}
}

func TestShardedSpreads(t *testing.T) {
	s := NewSharded(8, 10*time.Millisecond, 64, 0)
	counts := map[*Wheel]int{}
	for i := range uint64(8000) {
		counts[s.Shard(i)]++
	}
	if len(counts) != 8 {
		t.Fatalf("sequential hints hit %d of 8 shards", len(counts))
	}
	for _, c := range counts {
		if c < 500 || c > 1500 {
			t.Fatalf("uneven shards: %v", counts)
		}
	}
	rs := make([]rec, 100)
	for i := range rs {
		s.Shard(uint64(i)).Schedule(&rs[i].Timer, int64(i+1)*ms, &rs[i])
	}
	if s.Len() != 100 {
		t.Fatalf("Len = %d", s.Len())
	}
	s.Advance(100 * ms)
	for i := range rs {
		expectFires(t, "sharded", &rs[i], 100*ms)
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d", s.Len())
	}
}

func TestNewPanicsOnBadArgs(t *testing.T) {
	for _, slots := range []int{0, -1, 3, 100} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(10ms, %d) did not panic", slots)
				}
			}()
			New(10*time.Millisecond, slots, 0)
		}()
	}
	for _, tick := range []time.Duration{0, -time.Millisecond} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%v, 8) did not panic", tick)
				}
			}()
			New(tick, 8, 0)
		}()
	}
}

// NewSharded needs at least one shard: with none, Shard would have no wheel
// to return.
func TestNewShardedPanicsWithoutShards(t *testing.T) {
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewSharded(%d, ...) did not panic", n)
				}
			}()
			NewSharded(n, 10*time.Millisecond, 8, 0)
		}()
	}
}
