package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// The owner receives the identity and request as the landing member sent
// them, and its answer comes back byte for byte.
func TestRoundTripCarriesIdentityAndAnswer(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, nil)
	r := &link.Request{Tenant: []byte("acme"), Access: 7, Method: []byte("PUT"),
		Target: []byte("/echo"), Header: []byte("X-Queen-Trace: 1\r\n"), Body: []byte{0, 1, 2, 'x'}}
	resp, err := c.Do(context.Background(), addr, r)
	if err != nil {
		t.Fatal(err)
	}
	body := "acme|7|PUT|/echo|\"X-Queen-Trace: 1\\r\\n\"|\x00\x01\x02x"
	want := "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if string(resp.Raw) != want {
		t.Fatalf("answer %q, want %q", resp.Raw, want)
	}
}

// Thousands of parked calls share ConnsPerPeer connections, and answers
// released in reverse order reach their own callers.
func TestManyParkedCallsShareFewConnections(t *testing.T) {
	o := newOwner()
	srv, addr := startServer(t, o, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 2 })
	const n = 3000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		key := strconv.Itoa(i)
		err := c.Go(context.Background(), addr, req("/park", key), func(r link.Response, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
				return
			}
			if want := "released " + key; !bytes.HasSuffix(r.Raw, []byte("\r\n\r\n"+want)) {
				errs <- fmt.Errorf("call %s got %q", key, r.Raw)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every call parked", func() bool { return o.parkedCount() == n })
	if got := srv.Conns(); got != 2 {
		t.Fatalf("server has %d connections for %d parked calls, want 2", got, n)
	}
	if got := c.Dials(); got != 2 {
		t.Fatalf("client dialled %d times, want 2", got)
	}
	for i := n - 1; i >= 0; i-- {
		if _, err := c.Do(context.Background(), addr, req("/release", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// On one connection, a quick answer overtakes a slow one sent before it.
func TestAnswersOutOfOrder(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
	order := make(chan string, 2)
	done := func(r link.Response, err error) {
		if err != nil {
			order <- err.Error()
			return
		}
		order <- string(r.Raw[bytes.Index(r.Raw, []byte("\r\n\r\n"))+4:])
	}
	if err := c.Go(context.Background(), addr, req("/delay/300", "slow"), done); err != nil {
		t.Fatal(err)
	}
	if err := c.Go(context.Background(), addr, req("/delay/0", "quick"), done); err != nil {
		t.Fatal(err)
	}
	if a, b := <-order, <-order; a != "quick" || b != "slow" {
		t.Fatalf("answers came %q then %q", a, b)
	}
	if c.Dials() != 1 {
		t.Fatalf("dials %d", c.Dials())
	}
}

// Cancelling the caller's context cancels the handler's on the owner; a
// passed deadline does too and is reported as a timeout.
func TestCancellationReachesOwner(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, nil)

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	if err := c.Go(ctx, addr, req("/park", "gone"), func(_ link.Response, err error) { got <- err }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "parked", func() bool { return o.parkedCount() == 1 })
	cancel()
	err := <-got
	if !errors.Is(err, ErrCanceled) || ForwardFailed(err) {
		t.Fatalf("cancelled call: %v (forward failed %v)", err, ForwardFailed(err))
	}
	select {
	case key := <-o.cancelled:
		if key != "gone" {
			t.Fatalf("owner cancelled %q", key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the owner's context was not cancelled")
	}

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Do(ctx, addr, req("/park", "late"))
	if !errors.Is(err, ErrTimeout) || !ForwardFailed(err) {
		t.Fatalf("timed out call: %v", err)
	}
	if key := <-o.cancelled; key != "late" {
		t.Fatalf("owner cancelled %q", key)
	}
	if o.parkedCount() != 0 {
		t.Fatal("a cancelled call stayed parked")
	}
}

// A client with another secret is refused at the handshake and nothing is
// relayed; so is a peer that skips the handshake and sends a frame. (The
// honest client stops at the refusal by itself, so the handler count here
// shows little: TestRogueClientIgnoringTheRefusalIsNeverServed sends
// frames behind a bad reply.)
func TestWrongSecretIsRefused(t *testing.T) {
	o := newOwner()
	srv, addr := startServer(t, o, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.Secret = []byte("not-the-secret") })
	_, err := c.Do(context.Background(), addr, req("/echo", "x"))
	if !errors.Is(err, ErrAuth) || !ForwardFailed(err) {
		t.Fatalf("wrong secret: %v", err)
	}

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frame, _ := link.AppendRequest(nil, 1, req("/echo", string(make([]byte, 100))))
	nc.Write(frame) // in place of the handshake reply
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(nc)
	if len(rest) != helloLen { // the hello, then closed
		t.Fatalf("a peer without the handshake read %d bytes: %q", len(rest), rest)
	}
	waitFor(t, "two refusals", func() bool { return srv.Refused() == 2 })
	if n := o.callCount(); n != 0 {
		t.Fatalf("the handler ran %d times for unauthenticated peers", n)
	}
	if srv.Conns() != 0 {
		t.Fatalf("%d connections kept", srv.Conns())
	}
}

// A client also refuses a server that does not know the secret.
func TestServerWithWrongSecretIsRefused(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, func(cfg *ServerConfig) { cfg.Secret = []byte("other") })
	c := newClient(t, nil)
	if _, err := c.Do(context.Background(), addr, req("/echo", "x")); !errors.Is(err, ErrAuth) {
		t.Fatalf("got %v", err)
	}
}

// An owner that closes mid-request fails the calls in flight as
// unreachable at once, and a new owner on the same address is redialled.
func TestOwnerRestartFailsInFlightAndRedials(t *testing.T) {
	o := newOwner()
	srv, addr := startServer(t, o, nil)
	c := newClient(t, nil)
	got := make(chan error, 10)
	for i := range 10 {
		if err := c.Go(context.Background(), addr, req("/park", strconv.Itoa(i)), func(_ link.Response, err error) { got <- err }); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "parked", func() bool { return o.parkedCount() == 10 })
	srv.Close()
	for range 10 {
		select {
		case err := <-got:
			if !errors.Is(err, ErrUnreachable) || !ForwardFailed(err) {
				t.Fatalf("in flight when the owner went: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call hung after its owner closed")
		}
	}
	if _, err := c.Do(context.Background(), addr, req("/echo", "x")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("no owner listening: %v", err)
	}
	o2 := newOwner()
	srv2, _ := NewServer(ServerConfig{Secret: testSecret, Handler: o2.handle})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv2.Serve(ln)
	defer srv2.Close()
	if _, err := c.Do(context.Background(), addr, req("/echo", "x")); err != nil {
		t.Fatalf("after the owner came back: %v", err)
	}
}

// A 48 MiB answer arrives whole while small calls keep going on the other
// connection.
func TestHugeAnswer(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 2 })
	const size = 48 << 20
	huge := make(chan link.Response, 1)
	if err := c.Go(context.Background(), addr, req("/size/"+strconv.Itoa(size), ""), func(r link.Response, err error) {
		if err != nil {
			t.Error(err)
		}
		huge <- r
	}); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if _, err := c.Do(context.Background(), addr, req("/echo", "small")); err != nil {
			t.Fatal(err)
		}
	}
	r := <-huge
	if len(r.Raw) != size {
		t.Fatalf("huge answer is %d bytes", len(r.Raw))
	}
	for i := 0; i < size; i += 4093 {
		if r.Raw[i] != byte('a'+i%26) {
			t.Fatalf("byte %d is %q", i, r.Raw[i])
		}
	}
}

// Frames over the limit: a request is refused before it is sent, an answer
// by the owner; the connection survives both.
func TestFrameLimits(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, func(cfg *ServerConfig) { cfg.MaxFrameBytes = 1 << 20 })
	c := newClient(t, func(cfg *ClientConfig) { cfg.MaxFrameBytes = 1 << 20; cfg.ConnsPerPeer = 1 })
	err := c.Go(context.Background(), addr, req("/echo", string(make([]byte, 1<<20))), func(link.Response, error) {})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("big request: %v", err)
	}
	// A request whose frame is exactly the limit is sent, and read by the
	// server; one byte more is refused before it is sent.
	exact := req("/fixed", "")
	exact.Body = make([]byte, 1<<20-exact.EncodedLen())
	if r, err := c.Do(context.Background(), addr, exact); err != nil || !bytes.Equal(r.Raw, fixedAnswer.Raw) {
		t.Fatalf("a request of exactly the frame limit: %q, %v", r.Raw, err)
	}
	exact.Body = append(exact.Body, 'x')
	if err := c.Go(context.Background(), addr, exact, func(link.Response, error) {}); !errors.Is(err, ErrTooLarge) || MaybeDelivered(err) {
		t.Fatalf("a request one byte over the frame limit: %v (maybe delivered %v)", err, MaybeDelivered(err))
	}
	// An answer of exactly the limit is sent; one over it is refused by the
	// owner after it served the request: the request may have been acted on.
	if r, err := c.Do(context.Background(), addr, req("/size/"+strconv.Itoa(1<<20), "")); err != nil || len(r.Raw) != 1<<20 {
		t.Fatalf("an answer of exactly the frame limit: %d bytes, %v", len(r.Raw), err)
	}
	if _, err := c.Do(context.Background(), addr, req("/size/"+strconv.Itoa(2<<20), "")); !errors.Is(err, ErrTooLarge) || !MaybeDelivered(err) {
		t.Fatalf("big answer: %v (maybe delivered %v), want ErrTooLarge, maybe delivered", err, MaybeDelivered(err))
	}
	if _, err := c.Do(context.Background(), addr, req("/echo", "x")); err != nil {
		t.Fatal(err)
	}
	if c.Dials() != 1 {
		t.Fatalf("dials %d", c.Dials())
	}
}

// The in-flight bounds: the client's per peer, the server's per connection.
// Each is checked against a server that does not hit the other: a call the
// server refuses completes and frees the client's slot, so with both bounds
// in play the client's count would race the server's refusals.
func TestBackpressureBounds(t *testing.T) {
	t.Run("client", func(t *testing.T) {
		o := newOwner()
		_, addr := startServer(t, o, nil)
		c := newClient(t, func(cfg *ClientConfig) { cfg.MaxInFlightPerPeer = 8; cfg.ConnsPerPeer = 1 })
		got := make(chan error, 8)
		for i := range 8 {
			if err := c.Go(context.Background(), addr, req("/park", strconv.Itoa(i)), func(_ link.Response, err error) { got <- err }); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Go(context.Background(), addr, req("/echo", ""), func(link.Response, error) {}); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("ninth call: %v", err)
		}
		waitFor(t, "eight parked", func() bool { return o.parkedCount() == 8 })
		releaseAll(t, addr, 8, 8, got)
		// The refused call took no slot: eight fit again, and a ninth is
		// refused again.
		for i := range 8 {
			if err := c.Go(context.Background(), addr, req("/park", strconv.Itoa(i)), func(_ link.Response, err error) { got <- err }); err != nil {
				t.Fatalf("call %d after the first eight were answered: %v", i, err)
			}
		}
		if err := c.Go(context.Background(), addr, req("/echo", ""), func(link.Response, error) {}); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("ninth call, second round: %v", err)
		}
		waitFor(t, "eight parked again", func() bool { return o.parkedCount() == 8 })
		releaseAll(t, addr, 8, 8, got)
	})
	t.Run("server", func(t *testing.T) {
		o := newOwner()
		_, addr := startServer(t, o, func(cfg *ServerConfig) { cfg.MaxStreamsPerConn = 5 })
		c := newClient(t, func(cfg *ClientConfig) { cfg.ConnsPerPeer = 1 })
		got := make(chan error, 8)
		for i := range 8 {
			if err := c.Go(context.Background(), addr, req("/park", strconv.Itoa(i)), func(_ link.Response, err error) { got <- err }); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if err := <-got; !errors.Is(err, ErrOverloaded) || !ForwardFailed(err) {
				t.Fatalf("over the server's bound: %v", err)
			}
		}
		waitFor(t, "five parked", func() bool { return o.parkedCount() == 5 })
		releaseAll(t, addr, 8, 5, got) // c's connection has no stream left for a release
		if c.Dials() != 1 {
			t.Fatalf("dials %d", c.Dials())
		}
	})
}

// releaseAll releases the calls parked as 0..n-1 through a client of its
// own and waits for the answers of the parked ones (a release of a call the
// server refused is answered and does nothing).
func releaseAll(t *testing.T, addr string, n, parked int, got <-chan error) {
	t.Helper()
	other := newClient(t, nil)
	for i := range n {
		if _, err := other.Do(context.Background(), addr, req("/release", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range parked {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}

// Nothing listening: unreachable, at once.
func TestNoOwnerListening(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, nil)
	start := time.Now()
	_, err := c.Do(context.Background(), addr, req("/echo", ""))
	if !errors.Is(err, ErrUnreachable) || time.Since(start) > time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
}

// A closed client fails what is in flight and refuses new calls.
func TestClientClose(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c, _ := NewClient(ClientConfig{Secret: testSecret})
	got := make(chan error, 1)
	c.Go(context.Background(), addr, req("/park", "p"), func(_ link.Response, err error) { got <- err })
	waitFor(t, "parked", func() bool { return o.parkedCount() == 1 })
	c.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("in flight at Close: %v", err)
	}
	if err := c.Go(context.Background(), addr, req("/echo", ""), func(link.Response, error) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if key := <-o.cancelled; key != "p" {
		t.Fatalf("owner cancelled %q", key)
	}
}

// Zero or negative settings take the documented defaults (ServerConfig,
// ClientConfig); a server needs a secret, and a handler unless it adopts
// its connections.
func TestConfigDefaults(t *testing.T) {
	want := ServerConfig{MaxFrameBytes: 80 << 20, MaxStreamsPerConn: 65536, HandshakeTimeout: 5 * time.Second,
		MaxHandshakes: 128, MaxHandshakesPerAddr: 32, PingTimeout: 5 * time.Second, FrameTimeout: 30 * time.Second}
	for _, d := range []time.Duration{0, -1} {
		n := int(d)
		srv, err := NewServer(ServerConfig{Secret: testSecret, Handler: newOwner().handle, MaxFrameBytes: n, MaxStreamsPerConn: n,
			HandshakeTimeout: d, MaxHandshakes: n, MaxHandshakesPerAddr: n, PingTimeout: d, FrameTimeout: d})
		if err != nil {
			t.Fatal(err)
		}
		got := srv.cfg
		if got.MaxFrameBytes != want.MaxFrameBytes || got.MaxStreamsPerConn != want.MaxStreamsPerConn ||
			got.HandshakeTimeout != want.HandshakeTimeout || got.MaxHandshakes != want.MaxHandshakes ||
			got.MaxHandshakesPerAddr != want.MaxHandshakesPerAddr || got.PingTimeout != want.PingTimeout ||
			got.FrameTimeout != want.FrameTimeout || got.Logger == nil {
			t.Errorf("server settings %d: %+v, want %+v", d, got, want)
		}
		if srv.adm.max != 128 || srv.adm.perAddr != 32 {
			t.Errorf("server settings %d: admission bounds %d and %d, want 128 and 32", d, srv.adm.max, srv.adm.perAddr)
		}
		c, err := NewClient(ClientConfig{Secret: testSecret, ConnsPerPeer: n, MaxInFlightPerPeer: n, MaxFrameBytes: n,
			DialTimeout: d, PingInterval: d, PingTimeout: d, FrameTimeout: d, CallTimeout: d})
		if err != nil {
			t.Fatal(err)
		}
		wantC := ClientConfig{Secret: testSecret, ConnsPerPeer: 2, MaxInFlightPerPeer: 65536, MaxFrameBytes: 80 << 20,
			DialTimeout: 2 * time.Second, PingInterval: time.Second, PingTimeout: 5 * time.Second,
			FrameTimeout: 30 * time.Second, CallTimeout: 6 * time.Minute}
		if gotC := c.cfg; !reflect.DeepEqual(gotC, wantC) {
			t.Errorf("client settings %d: %+v, want %+v", d, gotC, wantC)
		}
		c.Close()
	}
	if _, err := NewServer(ServerConfig{Secret: testSecret, Adopt: func(c net.Conn) { c.Close() }}); err != nil {
		t.Errorf("a server that adopts its connections, without a handler: %v", err)
	}
	for _, cfg := range []ServerConfig{{Secret: testSecret}, {Handler: newOwner().handle}} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
	if _, err := NewClient(ClientConfig{}); err == nil {
		t.Error("NewClient without a secret accepted")
	}
}
