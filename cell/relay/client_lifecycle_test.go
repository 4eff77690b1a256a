package relay

// The Client's bookkeeping of its links and calls: what Conns counts,
// what Forget and Close end, the in-flight bound per peer, and a call
// that ends before its link is up.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// Conns counts the live links to a peer (none for a peer never called),
// and Forget closes them: the owner sees its connection end.
func TestConnsAndForget(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
	if n := c.Conns(addr); n != 0 {
		t.Fatalf("%d links to a peer never called", n)
	}
	ch := goCall(t, c, addr, req("/x", ""))
	lc := o.next(t)
	frames := serve(lc)
	f := nextFrame(t, frames)
	send(t, lc, link.FrameAnswer, f.id, answer("ok"))
	if r := await(t, ch); r.err != nil {
		t.Fatal(r.err)
	}
	if n := c.Conns(addr); n != 1 {
		t.Fatalf("%d links after an answered call, want 1", n)
	}
	c.Forget(addr)
	select {
	case _, ok := <-frames:
		if ok {
			t.Fatal("a frame came after Forget")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Forget did not close the link")
	}
	if n := c.Conns(addr); n != 0 {
		t.Fatalf("%d links after Forget", n)
	}
}

// At most MaxInFlightPerPeer calls wait on one peer: the next is refused
// at once as ErrOverloaded, never sent; each call that ends gives its
// place back, so later calls go on being served one after another.
func TestInFlightBoundPerPeer(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1; cfg.MaxInFlightPerPeer = 2 })
	first := goCall(t, c, addr, req("/1", ""))
	second := goCall(t, c, addr, req("/2", ""))
	err := c.Go(t.Context(), addr, req("/3", ""), func(link.Response, error) { t.Error("a refused call ended") })
	if !errors.Is(err, ErrOverloaded) || MaybeDelivered(err) {
		t.Fatalf("a third call with two in flight: %v, want ErrOverloaded, not sent", err)
	}
	lc := o.next(t)
	frames := serve(lc)
	for _, ch := range []<-chan result{first, second} {
		f := nextFrame(t, frames)
		send(t, lc, link.FrameAnswer, f.id, answer("ok"))
		if r := await(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	for i := range 5 {
		ch := goCall(t, c, addr, req("/later", ""))
		f := nextFrame(t, frames)
		send(t, lc, link.FrameAnswer, f.id, answer("ok"))
		if r := await(t, ch); r.err != nil {
			t.Fatalf("call %d after the first two ended: %v", i, r.err)
		}
	}
}

// A call in flight when the Client is closed ends with ErrClosed (not
// ErrUnreachable: nothing is wrong with the peer).
func TestCloseEndsCallsInFlightAsClosed(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, nil)
	ch := goCall(t, c, addr, req("/x", ""))
	frames := serve(o.next(t))
	nextFrame(t, frames)
	c.Close()
	if err := await(t, ch).err; !errors.Is(err, ErrClosed) {
		t.Fatalf("a call in flight at Close: %v, want ErrClosed", err)
	}
}

// A call cancelled while its link is dialled is dropped from the link's
// waiters: when the dial completes, it is never sent (the owner's first
// frame is the next call's).
func TestCallCancelledWhileDiallingIsNeverSent(t *testing.T) {
	_, addr, o := startServer(t, nil)
	// A gate in front of the relay port: the dial (and its handshake)
	// waits until the test opens it.
	gate := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		<-gate
		out, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer out.Close()
		go io.Copy(out, in)
		io.Copy(in, out)
	}()
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1; cfg.DialTimeout = 30 * time.Second })
	gated := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ends := make(chan error, 2)
	if err := c.Go(ctx, gated, req("/cancelled", ""), func(_ link.Response, err error) { ends <- err }); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 5*time.Second, "the dial under way", func() bool { return c.Dials() == 1 })
	cancel()
	if err := <-ends; !errors.Is(err, ErrCanceled) || MaybeDelivered(err) {
		t.Fatalf("cancelled while dialling: %v (maybe delivered %v)", err, MaybeDelivered(err))
	}
	close(gate)
	next := goCall(t, c, gated, req("/next", ""))
	lc := o.next(t)
	frames := serve(lc)
	f := nextFrame(t, frames)
	var got link.Request
	if f.typ != link.FrameRequest || link.DecodeRequest(f.p, &got) != nil || !strings.HasPrefix(string(got.Target), "/next") {
		t.Fatalf("the owner's first frame: type %d target %q, want the request for /next", f.typ, got.Target)
	}
	send(t, lc, link.FrameAnswer, f.id, answer("ok"))
	if r := await(t, next); r.err != nil {
		t.Fatal(r.err)
	}
	if c.Dials() != 1 {
		t.Fatalf("%d dials, want the one", c.Dials())
	}
}
