package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
)

// relay.Client, which carries the fan-out of reset and delete, against the
// broker's owner side as production runs it (startRelayOwner: the relay
// port's handshake, then AdoptRelayConn and the event loops). The
// Client's own side, against a stand-in driven frame by frame, is tested
// in cell/relay.

// newRelayClient returns a relay.Client with mod applied, closed at the
// test's end.
func newRelayClient(t testing.TB, mod func(*relay.ClientConfig)) *relay.Client {
	t.Helper()
	cfg := relay.ClientConfig{Secret: testSecret}
	if mod != nil {
		mod(&cfg)
	}
	rc, err := relay.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

// relayReq is a request of tenant at access, as a landing member relays it.
func relayReq(tenant string, access identity.Level, method, target, body string) *link.Request {
	return &link.Request{Tenant: []byte(tenant), Access: uint8(access), Method: []byte(method), Target: []byte(target), Body: []byte(body)}
}

func pushReq(q, payload string) *link.Request {
	return relayReq(identity.DefaultTenant, identity.Admin, "POST", "/api/v1/ephemeral/push",
		`{"queue":"`+q+`","messages":[{"payload":"`+payload+`"}]}`)
}

// parkReq is a waiting pop of q that acknowledges what it takes (a
// partition's next message waits for the ack of the one before).
func parkReq(q string, timeoutMs int) *link.Request {
	return relayReq(identity.DefaultTenant, identity.Admin, "GET", "/api/v1/ephemeral/pop?queue="+q+"&wait=true&autoAck=true&timeout="+strconv.Itoa(timeoutMs), "")
}

// relayCall is how one Client.Go ended.
type relayCall struct {
	raw string
	err error
}

// goRelay starts r on rc and returns where its end will arrive.
func goRelay(t testing.TB, ctx context.Context, rc *relay.Client, addr string, r *link.Request) <-chan relayCall {
	t.Helper()
	ch := make(chan relayCall, 1)
	if err := rc.Go(ctx, addr, r, func(resp link.Response, err error) { ch <- relayCall{string(resp.Raw), err} }); err != nil {
		t.Fatal(err)
	}
	return ch
}

func awaitRelay(t testing.TB, ch <-chan relayCall) relayCall {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("the relayed call never ended")
		return relayCall{}
	}
}

// The owner serves a relayed request as the identity the frame carries: a
// tenant's push is popped by that tenant only, and an access level below
// the route's is refused 403 forbidden.
func TestRelayClientCarriesTheIdentity(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc := newRelayClient(t, nil)
	ctx := context.Background()
	q := ownedQueues(t, o.view, "acme", selfAddr, 1)[0]
	do := func(r *link.Request) string {
		t.Helper()
		resp, err := rc.Do(ctx, o.addr, r)
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.Raw)
	}
	push := `{"queue":"` + q + `","messages":[{"payload":"for acme"}]}`
	if a := do(relayReq("acme", identity.ReadOnly, "POST", "/api/v1/ephemeral/push", push)); !strings.HasPrefix(a, "HTTP/1.1 403 ") || !strings.Contains(a, `"code":"forbidden"`) {
		t.Fatalf("a push at read-only: %q, want 403 forbidden", a)
	}
	if a := do(relayReq("acme", identity.WriteOnly, "POST", "/api/v1/ephemeral/push", push)); !strings.HasPrefix(a, "HTTP/1.1 201 ") {
		t.Fatalf("a push at write-only: %q, want 201", a)
	}
	if a := do(relayReq("other", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue="+q, "")); strings.Contains(a, "for acme") {
		t.Fatalf("another tenant popped acme's message: %q", a)
	}
	if a := do(relayReq("acme", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue="+q, "")); !strings.HasPrefix(a, "HTTP/1.1 200 ") || !strings.Contains(a, `"for acme"`) {
		t.Fatalf("acme's pop: %q, want its message", a)
	}
}

// Thousands of parked pops share ConnsPerPeer connections, and the answers,
// released in reverse order, each reach their own caller.
func TestRelayClientParkedPopsShareFewConnections(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.ConnsPerPeer = 2 })
	const n = 2000
	queues := ownedQueues(t, o.view, identity.DefaultTenant, selfAddr, n)
	calls := make([]<-chan relayCall, n)
	for i, q := range queues {
		calls[i] = goRelay(t, context.Background(), rc, o.addr, parkReq(q, 60000))
	}
	waitUntil(t, "every pop parked", func() bool { return parkedPops(o.e) == n })
	if d, l := rc.Dials(), o.s.cell.linkCount.Load(); d != 2 || l != 2 {
		t.Fatalf("%d dials, %d links on the owner for %d parked pops; want 2 and 2", d, l, n)
	}
	for i := n - 1; i >= 0; i-- {
		if r, err := rc.Do(context.Background(), o.addr, pushReq(queues[i], "m"+strconv.Itoa(i))); err != nil || !strings.HasPrefix(string(r.Raw), "HTTP/1.1 201 ") {
			t.Fatalf("push %d: %q, %v", i, r.Raw, err)
		}
	}
	for i, ch := range calls {
		c := awaitRelay(t, ch)
		if c.err != nil || !strings.Contains(c.raw, `"m`+strconv.Itoa(i)+`"`) {
			t.Fatalf("pop %d got %q, %v", i, c.raw, c.err)
		}
	}
}

// Cancelling a relayed pop lets it go on the owner (the cancel frame
// reaches the parked pop); so do a passed deadline and CallTimeout, which
// are timeouts (forward-failed). Each may have been acted on.
func TestRelayClientCancellationReachesTheParkedPop(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc := newRelayClient(t, nil)
	q := o.queue(t)

	ctx, cancel := context.WithCancel(context.Background())
	ch := goRelay(t, ctx, rc, o.addr, parkReq(q, 60000))
	waitParked(t, o.e, 1)
	cancel()
	if err := awaitRelay(t, ch).err; !errors.Is(err, relay.ErrCanceled) || relay.ForwardFailed(err) || !relay.MaybeDelivered(err) {
		t.Fatalf("cancelled: %v (forward failed %v, maybe delivered %v)", err, relay.ForwardFailed(err), relay.MaybeDelivered(err))
	}
	waitUntil(t, "the cancelled pop to be let go", func() bool { return parkedPops(o.e) == 0 })

	timed := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.CallTimeout = 200 * time.Millisecond })
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"deadline", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := rc.Do(ctx, o.addr, parkReq(q, 60000))
			return err
		}},
		{"CallTimeout", func() error { _, err := timed.Do(context.Background(), o.addr, parkReq(q, 60000)); return err }},
	} {
		if err := c.call(); !errors.Is(err, relay.ErrTimeout) || !relay.ForwardFailed(err) || !relay.MaybeDelivered(err) {
			t.Fatalf("%s: %v", c.name, err)
		}
		waitUntil(t, "the timed-out pop to be let go", func() bool { return parkedPops(o.e) == 0 })
	}
}

// Frame limits: a request of exactly MaxFrameBytes is sent and served, one
// byte more fails before it is sent; an answer over the limit ends the
// link (the call may have been served), and the next call dials afresh.
func TestRelayClientFrameLimits(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	const limit = 64 << 10
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.MaxFrameBytes = limit; cfg.ConnsPerPeer = 1 })
	ctx := context.Background()
	q := o.queue(t)
	exact := pushReq(q, "")
	pad := limit - exact.EncodedLen()
	exact = pushReq(q, strings.Repeat("x", pad))
	if r, err := rc.Do(ctx, o.addr, exact); err != nil || !strings.HasPrefix(string(r.Raw), "HTTP/1.1 201 ") {
		t.Fatalf("a request of exactly the frame limit: %q, %v", r.Raw, err)
	}
	over := pushReq(q, strings.Repeat("x", pad+1))
	if err := rc.Go(ctx, o.addr, over, func(link.Response, error) { t.Error("done called for a call not started") }); !errors.Is(err, relay.ErrTooLarge) || relay.MaybeDelivered(err) {
		t.Fatalf("one byte over the frame limit: %v (maybe delivered %v)", err, relay.MaybeDelivered(err))
	}
	// The queue holds the 64 KiB message: its pop's answer is over the limit.
	_, err := rc.Do(ctx, o.addr, relayReq(identity.DefaultTenant, identity.Admin, "GET", "/api/v1/ephemeral/pop?queue="+q, ""))
	if !errors.Is(err, relay.ErrUnreachable) || !relay.MaybeDelivered(err) || !errors.Is(err, link.ErrFrameTooLong) {
		t.Fatalf("an answer over the frame limit: %v (maybe delivered %v)", err, relay.MaybeDelivered(err))
	}
	if r, err := rc.Do(ctx, o.addr, pushReq(q, "after")); err != nil || !strings.HasPrefix(string(r.Raw), "HTTP/1.1 201 ") {
		t.Fatalf("after the link ended: %q, %v", r.Raw, err)
	}
	if d := rc.Dials(); d != 2 {
		t.Fatalf("%d dials, want 2", d)
	}
}

// The Client's bound on calls in flight to one peer: one more fails at
// once with ErrOverloaded, never sent; answered calls give their places
// back.
func TestRelayClientBoundsItsCallsInFlight(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.MaxInFlightPerPeer = 8; cfg.ConnsPerPeer = 1 })
	queues := ownedQueues(t, o.view, identity.DefaultTenant, selfAddr, 8)
	for round := range 2 {
		calls := make([]<-chan relayCall, 0, 8)
		for _, q := range queues {
			calls = append(calls, goRelay(t, context.Background(), rc, o.addr, parkReq(q, 60000)))
		}
		err := rc.Go(context.Background(), o.addr, pushReq(queues[0], "ninth"), func(link.Response, error) { t.Error("done called for a call not started") })
		if !errors.Is(err, relay.ErrOverloaded) || relay.MaybeDelivered(err) {
			t.Fatalf("round %d: the ninth call: %v", round, err)
		}
		waitParked(t, o.e, 8)
		for _, q := range queues { // pushed on the owner's own port: the Client has no place left
			o.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"`+q+`","messages":[{"payload":1}]}`, 201, `"pushed":1`)
		}
		for _, ch := range calls {
			if c := awaitRelay(t, ch); c.err != nil {
				t.Fatal(c.err)
			}
		}
	}
}

// kill -9 of the owner process with pops parked on it: every call fails
// as unreachable, may have been delivered, and none hangs; the owner
// restarted on its address is reached again by new calls.
func TestRelayClientOwnerKilled(t *testing.T) {
	cmd, addr := startOwnerProcess(t, "127.0.0.1:0")
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.ConnsPerPeer = 1 })
	queues := ownedQueues(t, ownerView().View(), identity.DefaultTenant, selfAddr, 20)
	calls := make([]<-chan relayCall, 0, len(queues))
	for _, q := range queues {
		calls = append(calls, goRelay(t, context.Background(), rc, addr, parkReq(q, 60000)))
	}
	// Answered after the parked pops were read: the owner reads a link's
	// frames in order.
	if _, err := rc.Do(context.Background(), addr, pushReq(ownedQueues(t, ownerView().View(), identity.DefaultTenant, selfAddr, 21)[20], "x")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i, ch := range calls {
		if err := awaitRelay(t, ch).err; !errors.Is(err, relay.ErrUnreachable) || !relay.ForwardFailed(err) || !relay.MaybeDelivered(err) {
			t.Fatalf("call %d in flight at kill -9: %v (maybe delivered %v)", i, err, relay.MaybeDelivered(err))
		}
	}
	_ = cmd.Wait()
	startOwnerProcess(t, addr)
	if r, err := rc.Do(context.Background(), addr, pushReq(queues[0], "again")); err != nil || !strings.HasPrefix(string(r.Raw), "HTTP/1.1 201 ") {
		t.Fatalf("after the owner restarted: %q, %v", r.Raw, err)
	}
}

// An owner stopped with SIGSTOP keeps its connections open and answers
// nothing: the Client's pings go unanswered and the call fails as
// unreachable after PingTimeout, not after its own (long) deadline; the
// resumed owner is reached again.
func TestRelayClientPausedOwnerFailsAfterPingTimeout(t *testing.T) {
	cmd, addr := startOwnerProcess(t, "127.0.0.1:0")
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) {
		cfg.ConnsPerPeer = 1 // the link that is open: a second would be dialled, and time out at DialTimeout
		cfg.PingInterval = 50 * time.Millisecond
		cfg.PingTimeout = 400 * time.Millisecond
	})
	q := queueOf(t, ownerView().View(), selfAddr)
	if _, err := rc.Do(context.Background(), addr, pushReq(q, "x")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the owner to stop", func() bool { return procState(cmd.Process.Pid) == 'T' })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := rc.Do(ctx, addr, pushReq(q, "y"))
	if !errors.Is(err, relay.ErrUnreachable) || !relay.MaybeDelivered(err) {
		t.Fatalf("paused owner: %v", err)
	}
	// The rule is a time: given up on after PingTimeout (400 ms), not after
	// the call's own deadline (a minute). 20 s is the margin a loaded
	// machine needs and still far from the minute.
	if d := time.Since(start); d > 400*time.Millisecond+20*time.Second {
		t.Fatalf("took %v to give up on a paused owner; want the ping timeout (400 ms), not the call's deadline (1 min)", d)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if _, err := rc.Do(context.Background(), addr, pushReq(q, "z")); err != nil {
		t.Fatalf("after the owner resumed: %v", err)
	}
}

// The owner fails an accepted link that has sent it nothing for its ping
// timeout; the Client pings every interval, idle or not, so its link
// outlives many of the owner's ping timeouts: while its parked pops are
// answered one by one (it sends nothing else), and idle. The rule is a
// time: the spans below are lower bounds, each several ping timeouts of
// the owner's (300 ms) and hundreds of the Client's intervals (10 ms).
func TestRelayClientLinkOutlivesTheOwnersPingTimeout(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{PingInterval: 50 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	rc := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.ConnsPerPeer = 1; cfg.PingInterval = 10 * time.Millisecond })
	queues := ownedQueues(t, o.view, identity.DefaultTenant, selfAddr, 24)
	calls := make([]<-chan relayCall, 0, len(queues))
	for _, q := range queues {
		calls = append(calls, goRelay(t, context.Background(), rc, o.addr, parkReq(q, 60000)))
	}
	waitParked(t, o.e, int64(len(queues)))
	for i, q := range queues { // one answer every 50 ms for 1.2 s
		o.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"`+q+`","messages":[{"payload":1}]}`, 201, `"pushed":1`)
		if c := awaitRelay(t, calls[i]); c.err != nil {
			t.Fatalf("pop %d of %d: %v", i+1, len(queues), c.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // idle, over three of the owner's ping timeouts
	if _, err := rc.Do(context.Background(), o.addr, pushReq(queues[0], "x")); err != nil {
		t.Fatal(err)
	}
	if d, l := rc.Dials(), o.s.cell.linkCount.Load(); d != 1 || l != 1 {
		t.Fatalf("%d dials, %d links on the owner; want the one link kept", d, l)
	}
}

// Answers, cancellations and deadlines racing each other: every call ends
// exactly once, with its own answer or a cancel/timeout, and afterwards
// the owner holds no pop parked for them.
func TestRelayClientAnswersRacingCancellation(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc := newRelayClient(t, nil)
	q := o.queue(t)
	const n = 2000
	var wg sync.WaitGroup
	var answered, cancelled, timedOut atomic.Int64
	ends := make([]atomic.Int32, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		if i%3 == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
		}
		wg.Add(1)
		err := rc.Go(ctx, o.addr, parkReq(q, 1+rand.IntN(3)), func(r link.Response, err error) {
			defer wg.Done()
			if ends[i].Add(1) != 1 {
				t.Errorf("call %d ended twice", i)
			}
			switch {
			case err == nil:
				answered.Add(1)
				if !strings.HasPrefix(string(r.Raw), "HTTP/1.1 200 ") {
					t.Errorf("call %d got %q", i, r.Raw)
				}
			case errors.Is(err, relay.ErrCanceled):
				cancelled.Add(1)
			case errors.Is(err, relay.ErrTimeout):
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
	waitUntil(t, "the owner to hold no parked pop", func() bool { return parkedPops(o.e) == 0 })
	// Every place was given back: as many calls as the bound fit again.
	bounded := newRelayClient(t, func(cfg *relay.ClientConfig) { cfg.MaxInFlightPerPeer = 1 })
	if _, err := bounded.Do(context.Background(), o.addr, pushReq(q, "x")); err != nil {
		t.Fatal(err)
	}
}

// Forget (a member left the cell) fails the calls in flight to it at
// once, and the owner lets their parked pops go; a later call dials
// afresh. Close fails them with ErrClosed, and refuses new calls.
func TestRelayClientForgetAndClose(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	q := o.queue(t)
	ch := goRelay(t, context.Background(), rc, o.addr, parkReq(q, 60000))
	waitParked(t, o.e, 1)
	rc.Forget(o.addr)
	if err := awaitRelay(t, ch).err; !errors.Is(err, relay.ErrUnreachable) || !relay.ForwardFailed(err) || !relay.MaybeDelivered(err) {
		t.Fatalf("after Forget: %v", err)
	}
	waitUntil(t, "the forgotten pop to be let go", func() bool { return parkedPops(o.e) == 0 })
	if _, err := rc.Do(context.Background(), o.addr, pushReq(q, "x")); err != nil {
		t.Fatalf("after Forget: %v", err)
	}
	if rc.Dials() != 2 || rc.Conns(o.addr) != 1 {
		t.Fatalf("%d dials, %d connections; want a second dial", rc.Dials(), rc.Conns(o.addr))
	}

	ch = goRelay(t, context.Background(), rc, o.addr, parkReq(ownedQueues(t, o.view, identity.DefaultTenant, selfAddr, 2)[1], 60000))
	waitParked(t, o.e, 1)
	rc.Close()
	if err := awaitRelay(t, ch).err; !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("in flight at Close: %v", err)
	}
	if err := rc.Go(context.Background(), o.addr, pushReq(q, "y"), func(link.Response, error) {}); !errors.Is(err, relay.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	waitUntil(t, "the closed client's pop to be let go", func() bool { return parkedPops(o.e) == 0 })
	if n := rc.Conns(o.addr); n != 0 {
		t.Fatalf("%d connections after Close", n)
	}
}
