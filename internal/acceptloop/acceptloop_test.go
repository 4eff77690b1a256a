package acceptloop

import (
	"context"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// scripted is a listener whose Accept returns the results it is given, in
// order, then blocks until it is closed.
type scripted struct {
	results chan result
	closed  chan struct{}
	once    sync.Once
}

type result struct {
	c   net.Conn
	err error
}

func newScripted(rs ...result) *scripted {
	l := &scripted{results: make(chan result, len(rs)), closed: make(chan struct{})}
	for _, r := range rs {
		l.results <- r
	}
	return l
}

func (l *scripted) Accept() (net.Conn, error) {
	select {
	case r := <-l.results:
		return r.c, r.err
	default:
	}
	select {
	case r := <-l.results:
		return r.c, r.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *scripted) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *scripted) Addr() net.Addr { return &net.TCPAddr{} }

// events records what a Loop did, in order.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.got = append(e.got, s)
	e.mu.Unlock()
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// run runs a Loop over ln whose Shed answers with sheds in turn (0 once
// they are used up), until want events were recorded, and returns them.
func run(t *testing.T, ln *scripted, sheds []int, want int) []string {
	t.Helper()
	ev := &events{}
	l := Loop{
		Listener: ln,
		Enroll:   func(c net.Conn) error { ev.add("enroll"); c.Close(); return nil },
		Stopping: func() bool { return false },
		Quit:     make(chan struct{}),
		Failed:   func(error) { ev.add("failed") },
		Paused: func(p bool) {
			if p {
				ev.add("pause")
			}
		},
		Shed: func(n int) int {
			if n != ShedBatch {
				t.Errorf("Shed asked for %d, want ShedBatch (%d)", n, ShedBatch)
			}
			k := 0
			if len(sheds) > 0 {
				k, sheds = sheds[0], sheds[1:]
			}
			ev.add("shed")
			return k
		},
	}
	done := make(chan struct{})
	go func() { defer close(done); l.Run() }()
	deadline := time.Now().Add(5 * time.Second)
	for len(ev.list()) < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ln.Close()
	<-done
	return ev.list()
}

func pipeConn() net.Conn {
	a, b := net.Pipe()
	b.Close()
	return a
}

var emfile = &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}

// Out of descriptors, with idle connections to close: the loop sheds them
// and accepts again at once, without pausing.
func TestOutOfDescriptorsShedsThenAcceptsAtOnce(t *testing.T) {
	ln := newScripted(result{err: emfile}, result{c: pipeConn()})
	got := run(t, ln, []int{3}, 3)
	if want := []string{"failed", "shed", "enroll"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// Out of descriptors with nothing idle: the loop pauses (and uses the
// spare descriptor), as before shedding existed.
func TestOutOfDescriptorsNothingToShedPauses(t *testing.T) {
	ln := newScripted(result{err: emfile}, result{c: pipeConn()})
	got := run(t, ln, []int{0}, 4)
	if want := []string{"failed", "shed", "pause", "enroll"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A shed that did not help (accepting fails again right after it) is
// followed by a pause, not by another shed: shedding that frees nothing
// usable costs one batch per pause, not every idle connection at once.
func TestShedThatDoesNotHelpPausesBeforeTheNext(t *testing.T) {
	ln := newScripted(result{err: emfile}, result{err: emfile}, result{err: emfile}, result{c: pipeConn()})
	got := run(t, ln, []int{5, 5, 5}, 7)
	if want := []string{"failed", "shed", "failed", "pause", "failed", "shed", "enroll"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// Other accept errors never shed: they are not about descriptors.
func TestOtherErrorsDoNotShed(t *testing.T) {
	other := &net.OpError{Op: "accept", Net: "tcp", Err: syscall.ECONNABORTED}
	ln := newScripted(result{err: other}, result{c: pipeConn()})
	got := run(t, ln, []int{5}, 3)
	if want := []string{"failed", "pause", "enroll"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// Oldest keeps the Max earliest, oldest first, whatever the order offered.
func TestOldestKeepsTheEarliest(t *testing.T) {
	o := Oldest[string]{Max: 3}
	for _, c := range []struct {
		x    string
		last int64
	}{{"e", 50}, {"b", 20}, {"f", 60}, {"a", 10}, {"d", 40}, {"c", 30}, {"a2", 10}} {
		o.Offer(c.x, c.last)
	}
	if got, want := o.Chosen(), []string{"a", "a2", "b"}; !slices.Equal(got, want) {
		t.Fatalf("chosen %v, want %v", got, want)
	}
	none := Oldest[string]{}
	none.Offer("x", 1)
	if got := none.Chosen(); len(got) != 0 {
		t.Fatalf("Max 0 kept %v", got)
	}
}

func TestIdleLongEnough(t *testing.T) {
	now := int64(100 * time.Second)
	for _, c := range []struct {
		idle time.Duration
		want bool
	}{{0, false}, {time.Second, false}, {MinIdle - 1, false}, {MinIdle, true}, {time.Minute, true}} {
		if got := IdleLongEnough(now-int64(c.idle), now); got != c.want {
			t.Errorf("idle %v: %v, want %v", c.idle, got, c.want)
		}
	}
}

// fakeLoop is a gnet.EventLoop whose Execute runs the task in a goroutine
// of its own, or never (stuck: a loop busy with a long round).
type fakeLoop struct {
	gnet.EventLoop // the rest is not used here
	idle           int
	stuck          bool
}

func (f *fakeLoop) Execute(ctx context.Context, r gnet.Runnable) error {
	if !f.stuck {
		go r.Run(ctx)
	}
	return nil
}

// Each loop is given its share of n (rounded up) and the closes add up;
// a loop that does not run its task within shedWait is not waited for.
func TestShedOnLoopsSharesAndBoundsTheWait(t *testing.T) {
	loops := []*fakeLoop{{idle: 100}, {idle: 2}, {idle: 100}, {idle: 100, stuck: true}}
	var gl []gnet.EventLoop
	for _, l := range loops {
		gl = append(gl, l)
	}
	var mu sync.Mutex
	var shares []int
	start := time.Now()
	closed := ShedOnLoops(gl, ShedBatch, func(loop gnet.EventLoop, n int) int {
		mu.Lock()
		shares = append(shares, n)
		mu.Unlock()
		return min(n, loop.(*fakeLoop).idle)
	})
	took := time.Since(start)
	// 16 over 4 loops: 4 each; the second has 2 idle, the fourth is stuck.
	if closed != 4+2+4 {
		t.Fatalf("closed %d, want 10", closed)
	}
	if !slices.Equal(shares, []int{4, 4, 4}) {
		t.Fatalf("shares %v, want 4 for each loop that ran", shares)
	}
	if took < shedWait || took > shedWait+time.Second {
		t.Fatalf("returned after %v with a loop stuck, want about shedWait (%v)", took, shedWait)
	}
	if got := ShedOnLoops(nil, ShedBatch, nil); got != 0 {
		t.Fatalf("no loops: %d", got)
	}
}

// Under descriptor pressure the spare descriptor is given back while
// Enroll duplicates the connection (the duplicate needs one) and taken
// again after; before any pressure it stays open throughout.
func TestSpareGivenBackAroundEnrollUnderPressure(t *testing.T) {
	ln := newScripted(result{c: pipeConn()}, result{err: emfile}, result{c: pipeConn()})
	var l *Loop
	var spareDuring []bool
	done := make(chan struct{})
	l = &Loop{
		Listener: ln,
		Enroll: func(c net.Conn) error {
			spareDuring = append(spareDuring, l.reserve != nil)
			c.Close()
			if len(spareDuring) == 2 {
				close(done)
			}
			return nil
		},
		Stopping: func() bool { return false },
		Quit:     make(chan struct{}),
		Shed:     func(int) int { return 1 },
	}
	ran := make(chan struct{})
	go func() { defer close(ran); l.Run() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not enroll both connections")
	}
	ln.Close()
	<-ran
	if !slices.Equal(spareDuring, []bool{true, false}) {
		t.Fatalf("spare open during Enroll: %v, want [true false] (before pressure, then under it)", spareDuring)
	}
}
