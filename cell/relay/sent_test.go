package relay

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// Error.Sent (MaybeDelivered) tells a failure the owner provably never
// saw from one it may have acted on: the server answers 503
// ephemeral_forward_failed only for the first (docs/cell.md, "SDKs").
func TestSentSaysWhetherTheOwnerMayHaveActed(t *testing.T) {
	// Nothing listening: never sent.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	c := newClient(t, nil)
	if _, err := c.Do(context.Background(), dead, req("/echo", "")); !errors.Is(err, ErrUnreachable) || MaybeDelivered(err) {
		t.Fatalf("no owner listening: %v (sent %v)", err, MaybeDelivered(err))
	}

	// In flight when the owner goes: sent.
	o := newOwner()
	srv, addr := startServer(t, o, func(cfg *ServerConfig) { cfg.MaxStreamsPerConn = 2 })
	c1 := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
	got := make(chan error, 3)
	for i := range 3 {
		if err := c1.Go(context.Background(), addr, req("/park", strconv.Itoa(i)), func(_ link.Response, err error) { got <- err }); err != nil {
			t.Fatal(err)
		}
	}
	// The third is refused by the owner before it serves it: not sent.
	if err := <-got; !errors.Is(err, ErrOverloaded) || MaybeDelivered(err) {
		t.Fatalf("refused as busy: %v (sent %v)", err, MaybeDelivered(err))
	}
	waitFor(t, "parked", func() bool { return o.parkedCount() == 2 })

	// A deadline that passes after the request went out: sent.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c2 := newClient(t, nil)
	if _, err := c2.Do(ctx, addr, req("/park", "late")); !errors.Is(err, ErrTimeout) || !MaybeDelivered(err) || !ForwardFailed(err) {
		t.Fatalf("deadline after sending: %v (sent %v)", err, MaybeDelivered(err))
	}

	srv.Close()
	for range 2 {
		if err := <-got; !errors.Is(err, ErrUnreachable) || !MaybeDelivered(err) {
			t.Fatalf("in flight when the owner went: %v (sent %v)", err, MaybeDelivered(err))
		}
	}
	if MaybeDelivered(nil) {
		t.Fatal("MaybeDelivered(nil)")
	}
}
