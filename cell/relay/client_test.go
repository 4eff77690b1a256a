package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// The Client's side of the frames, against a stand-in owner (standIn):
// what it encodes, how it maps each way a stream ends to an Error, and
// what it tells the owner. Serving (the broker's owner side) is tested in
// package server against AdoptRelayConn.

// The request frame carries the identity and the request as given, and
// the owner's answer comes back byte for byte, the call's own bytes (the
// link's read buffer is reused for the next answer).
func TestRequestCarriesIdentityAndTheAnswerComesBackWhole(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
	r := &link.Request{Tenant: []byte("acme"), Access: 7, Method: []byte("PUT"),
		Target: []byte("/echo?x=1"), Header: []byte("X-Queen-Trace: 1\r\n"), Body: []byte{0, 1, 2, 'x'}}
	first := goCall(t, c, addr, r)
	lc := o.next(t)
	frames := serve(lc)
	f := nextFrame(t, frames)
	var got link.Request
	if f.typ != link.FrameRequest || link.DecodeRequest(f.p, &got) != nil {
		t.Fatalf("frame %d, want a request", f.typ)
	}
	if !reflect.DeepEqual(got, *r) {
		t.Fatalf("relayed %+v, want %+v", got, *r)
	}
	send(t, lc, link.FrameAnswer, f.id, answer("first"))
	a := await(t, first)
	if a.err != nil || string(a.r.Raw) != string(answer("first")) {
		t.Fatalf("answer %q, %v", a.r.Raw, a.err)
	}
	second := goCall(t, c, addr, req("/echo", ""))
	f = nextFrame(t, frames)
	send(t, lc, link.FrameAnswer, f.id, answer("other"))
	if b := await(t, second); b.err != nil || string(b.r.Raw) != string(answer("other")) {
		t.Fatalf("second answer %q, %v", b.r.Raw, b.err)
	}
	if string(a.r.Raw) != string(answer("first")) {
		t.Fatalf("the first answer changed to %q after the second arrived", a.r.Raw)
	}
}

// Each refusal ends its call by its reason: busy is ErrOverloaded, never
// served; too large is ErrTooLarge, served (only its answer was refused);
// lost is served; closing is not. Every one is forward-failed.
func TestRefusalsEndCallsByTheirReason(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
	var lc net.Conn
	var frames <-chan frame
	for i, want := range []struct {
		reason byte
		kind   error
		sent   bool
	}{
		{link.RefuseBusy, ErrOverloaded, false},
		{link.RefuseTooLarge, ErrTooLarge, true},
		{link.RefuseLost, ErrUnreachable, true},
		{link.RefuseClosing, ErrUnreachable, false},
		{99, ErrUnreachable, true}, // a reason it cannot read: maybe served
	} {
		ch := goCall(t, c, addr, req("/x", ""))
		if i == 0 {
			lc = o.next(t)
			frames = serve(lc)
		}
		f := nextFrame(t, frames)
		send(t, lc, link.FrameRefuse, f.id, []byte{want.reason})
		err := await(t, ch).err
		if !errors.Is(err, want.kind) || MaybeDelivered(err) != want.sent || !ForwardFailed(err) {
			t.Errorf("refused with reason %d: %v (maybe delivered %v); want %v, maybe delivered %v", want.reason, err, MaybeDelivered(err), want.kind, want.sent)
		}
	}
	if c.Dials() != 1 {
		t.Fatalf("%d dials: a refusal ended the link", c.Dials())
	}
}

// Cancelling a call whose frame left ends it with ErrCanceled (not
// forward-failed: nobody waits) and sends the owner a cancel frame for its
// stream; a deadline, or CallTimeout for a context without one, ends it
// with ErrTimeout (forward-failed). Both may have been acted on.
func TestCancellationReachesTheOwner(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1; cfg.CallTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	if err := c.Go(ctx, addr, req("/park", ""), func(_ link.Response, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	frames := serve(o.next(t))
	f := nextFrame(t, frames)
	cancel()
	if err := <-got; !errors.Is(err, ErrCanceled) || ForwardFailed(err) || !MaybeDelivered(err) {
		t.Fatalf("cancelled: %v (forward failed %v, maybe delivered %v)", err, ForwardFailed(err), MaybeDelivered(err))
	}
	if cf := nextFrame(t, frames); cf.typ != link.FrameCancel || cf.id != f.id {
		t.Fatalf("frame %d on stream %d, want the cancel of %d", cf.typ, cf.id, f.id)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer dcancel()
	for _, ctx := range []context.Context{dctx, context.Background()} {
		_, err := c.Do(ctx, addr, req("/park", ""))
		if !errors.Is(err, ErrTimeout) || !ForwardFailed(err) || !MaybeDelivered(err) {
			t.Fatalf("past its deadline: %v", err)
		}
		f := nextFrame(t, frames)
		if cf := nextFrame(t, frames); cf.typ != link.FrameCancel || cf.id != f.id {
			t.Fatalf("frame %d on stream %d, want the cancel of %d", cf.typ, cf.id, f.id)
		}
	}
}

// A 24 MiB answer arrives whole, past the link's read buffer, while small
// calls go on over the other connection (ConnsPerPeer, round robin).
func TestHugeAnswer(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 2 })
	const size = 24 << 20
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	// The stand-in answers /huge with body, anything else with "s".
	go func() {
		for range 2 {
			select {
			case lc := <-o.conns:
				go func() {
					for f := range serve(lc) {
						var r link.Request
						if f.typ != link.FrameRequest || link.DecodeRequest(f.p, &r) != nil {
							continue
						}
						raw := answer("s")
						if string(r.Target) == "/huge" {
							raw = body
						}
						lc.Write(append(link.AppendHeader(nil, link.FrameAnswer, f.id, len(raw)), raw...))
					}
				}()
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	huge := goCall(t, c, addr, req("/huge", ""))
	for i := range 50 {
		if r, err := c.Do(context.Background(), addr, req("/small", strconv.Itoa(i))); err != nil || string(r.Raw) != string(answer("s")) {
			t.Fatalf("small call %d: %q, %v", i, r.Raw, err)
		}
	}
	r := await(t, huge)
	if r.err != nil || !bytes.Equal(r.r.Raw, body) {
		t.Fatalf("huge answer: %d bytes, %v", len(r.r.Raw), r.err)
	}
	if c.Dials() != 2 {
		t.Fatalf("%d dials, want 2", c.Dials())
	}
}

// A request over MaxFrameBytes, or whose tenant or method does not fit
// their length fields, fails at once with ErrTooLarge: nothing was sent.
func TestRequestOverTheFrameLimitIsNotSent(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.MaxFrameBytes = 1 << 20 })
	over := req("/x", "")
	over.Body = make([]byte, 1<<20-over.EncodedLen()+1)
	longTenant := req("/x", "")
	longTenant.Tenant = []byte(strings.Repeat("t", 1<<16))
	for _, r := range []*link.Request{over, longTenant} {
		err := c.Go(context.Background(), addr, r, func(link.Response, error) { t.Error("done called for a call not started") })
		if !errors.Is(err, ErrTooLarge) || MaybeDelivered(err) {
			t.Fatalf("%v (maybe delivered %v), want ErrTooLarge, never sent", err, MaybeDelivered(err))
		}
	}
	if c.Dials() != 0 || o.adopted.Load() != 0 {
		t.Fatalf("dialled %d times for requests that were never sent", c.Dials())
	}
}

// Nothing listening: unreachable, never sent.
func TestNoOwnerListening(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, nil)
	_, err := c.Do(context.Background(), addr, req("/echo", ""))
	if !errors.Is(err, ErrUnreachable) || MaybeDelivered(err) || !ForwardFailed(err) {
		t.Fatalf("%v (maybe delivered %v)", err, MaybeDelivered(err))
	}
}

// Zero or negative settings take the documented defaults (ServerConfig,
// ClientConfig); a server needs a secret and an Adopt.
func TestConfigDefaults(t *testing.T) {
	adopt := func(c net.Conn) { c.Close() }
	for _, d := range []time.Duration{0, -1} {
		n := int(d)
		srv, err := NewServer(ServerConfig{Secret: testSecret, Adopt: adopt, HandshakeTimeout: d, MaxHandshakes: n, MaxHandshakesPerAddr: n})
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.cfg; got.HandshakeTimeout != 5*time.Second || got.MaxHandshakes != 128 || got.MaxHandshakesPerAddr != 32 || got.Logger == nil {
			t.Errorf("server settings %d: %+v", d, got)
		}
		if srv.adm.max != 128 || srv.adm.perAddr != 32 {
			t.Errorf("server settings %d: admission bounds %d and %d, want 128 and 32", d, srv.adm.max, srv.adm.perAddr)
		}
		c, err := NewClient(ClientConfig{Secret: testSecret, ConnsPerPeer: n, MaxInFlightPerPeer: n, MaxFrameBytes: n,
			DialTimeout: d, PingInterval: d, PingTimeout: d, CallTimeout: d})
		if err != nil {
			t.Fatal(err)
		}
		wantC := ClientConfig{Secret: testSecret, ConnsPerPeer: 2, MaxInFlightPerPeer: 65536, MaxFrameBytes: 80 << 20,
			DialTimeout: 2 * time.Second, PingInterval: time.Second, PingTimeout: 5 * time.Second, CallTimeout: 6 * time.Minute}
		if gotC := c.cfg; !reflect.DeepEqual(gotC, wantC) {
			t.Errorf("client settings %d: %+v, want %+v", d, gotC, wantC)
		}
		c.Close()
	}
	for _, cfg := range []ServerConfig{{Secret: testSecret}, {Adopt: adopt}} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
	if _, err := NewClient(ClientConfig{}); err == nil {
		t.Error("NewClient without a secret accepted")
	}
}

// A call cancelled while its link is still being dialled (here: a peer
// that accepts and never says hello) ends at once, and was not sent.
func TestCallCancelledBeforeItsLinkIsUpWasNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			io.Copy(io.Discard, c) // until the client gives up its dial
		}
	}()
	c := newClient(t, func(cfg *ClientConfig) { cfg.DialTimeout = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	ends := make(chan error, 2)
	if err := c.Go(ctx, ln.Addr().String(), req("/x", ""), func(_ link.Response, err error) { ends <- err }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-ends; !errors.Is(err, ErrCanceled) || MaybeDelivered(err) {
		t.Fatalf("cancelled while dialling: %v (maybe delivered %v)", err, MaybeDelivered(err))
	}
	brokertest.Eventually(t, 5*time.Second, "the dial to give up", func() bool { return c.Dials() == 1 && c.Conns(ln.Addr().String()) == 0 })
	c.Close() // waits for the dial: the call must not end a second time
	if len(ends) != 0 {
		t.Fatalf("the call ended again: %v", <-ends)
	}
}

// An answer that begins and stalls ends its call at the ping timeout (its
// bytes count as heard only while they arrive), as unreachable and maybe
// delivered: the owner had the request.
func TestStalledAnswerFailsAtThePingTimeout(t *testing.T) {
	_, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) {
		cfg.PingInterval = 20 * time.Millisecond
		cfg.PingTimeout = 300 * time.Millisecond
	})
	ch := goCall(t, c, addr, req("/x", ""))
	lc := o.next(t)
	// Read by hand, not by serve: an owner in the middle of a frame sends
	// nothing else, not even pongs (serve's would be read as the
	// answer's bytes, and keep the link).
	var id uint64
	for typ := byte(0); typ != link.FrameRequest; { // pings may come first
		var h [link.HeaderLen]byte
		if _, err := io.ReadFull(lc, h[:]); err != nil {
			t.Fatal(err)
		}
		var n int
		typ, id, n = link.ParseHeader(h[:])
		if _, err := io.CopyN(io.Discard, lc, int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	go io.Copy(io.Discard, lc) // the pings, never answered
	if _, err := lc.Write(link.AppendHeader(nil, link.FrameAnswer, id, 1<<20)); err != nil {
		t.Fatal(err)
	}
	lc.Write([]byte("HTTP/1.1 200")) // and no more
	if err := await(t, ch).err; !errors.Is(err, ErrUnreachable) || !errors.Is(err, link.ErrSilent) || !MaybeDelivered(err) {
		t.Fatalf("stalled answer: %v (maybe delivered %v)", err, MaybeDelivered(err))
	}
}
