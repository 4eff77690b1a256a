package relay

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// Answers, cancellations and deadlines racing each other: every call ends
// exactly once, with its own answer or a cancel/timeout, and afterwards
// neither side holds anything for it.
func TestAnswersRacingCancellation(t *testing.T) {
	o := newOwner()
	srv, addr := startServer(t, o, nil)
	c := newClient(t, nil)
	const n = 4000
	var wg sync.WaitGroup
	var answered, cancelled, timedOut atomic.Int64
	ends := make([]atomic.Int32, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		if i%3 == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
		}
		wg.Add(1)
		delay := rand.IntN(3)
		err := c.Go(ctx, addr, req("/delay/"+strconv.Itoa(delay), strconv.Itoa(i)), func(r link.Response, err error) {
			defer wg.Done()
			if ends[i].Add(1) != 1 {
				t.Errorf("call %d ended twice", i)
			}
			switch {
			case err == nil:
				answered.Add(1)
				if want := answer(strconv.Itoa(i)).Raw; string(r.Raw) != string(want) {
					t.Errorf("call %d got %q", i, r.Raw)
				}
			case errors.Is(err, ErrCanceled):
				cancelled.Add(1)
			case errors.Is(err, ErrTimeout):
				timedOut.Add(1)
			default:
				t.Errorf("call %d: %v", i, err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 1 {
			go func() { time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond); cancel() }()
		} else {
			defer cancel()
		}
	}
	wg.Wait()
	t.Logf("answered %d, cancelled %d, timed out %d", answered.Load(), cancelled.Load(), timedOut.Load())
	c.mu.Lock()
	p := c.peers[addr]
	c.mu.Unlock()
	if got := p.inflight.Load(); got != 0 {
		t.Fatalf("client counts %d calls in flight", got)
	}
	waitFor(t, "the owner to hold no stream", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for sc := range srv.conns {
			sc.smu.Lock()
			k := len(sc.streams)
			sc.smu.Unlock()
			if k != 0 {
				return false
			}
		}
		return true
	})
	for _, s := range p.slots {
		s.mu.Lock()
		cc := s.cc
		s.mu.Unlock()
		if cc != nil {
			cc.cmu.Lock()
			k := len(cc.calls)
			cc.cmu.Unlock()
			if k != 0 {
				t.Fatalf("client connection holds %d calls", k)
			}
		}
	}
}

// Forget fails the calls in flight to a member that left, at once.
func TestForgetFailsInFlight(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, nil)
	got := make(chan error, 1)
	c.Go(context.Background(), addr, req("/park", "p"), func(_ link.Response, err error) { got <- err })
	waitFor(t, "parked", func() bool { return o.parkedCount() == 1 })
	c.Forget(addr)
	if err := <-got; !errors.Is(err, ErrUnreachable) || !ForwardFailed(err) {
		t.Fatalf("after Forget: %v", err)
	}
	if key := <-o.cancelled; key != "p" {
		t.Fatalf("owner cancelled %q", key)
	}
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
}
