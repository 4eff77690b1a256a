package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// startChild starts this test binary as an owner process (TestMain's
// childOwner) on addr ("127.0.0.1:0" for any port) and returns it with
// the address it listens on.
func startChild(t *testing.T, addr string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RELAY_CHILD_ADDR="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, readReady(t, bufio.NewReader(out))
}

// kill -9 of the owner process mid-request: the calls in flight fail as
// unreachable (never hang), and the owner restarted on its address is
// reached again by new calls.
func TestOwnerKilledMidRequest(t *testing.T) {
	cmd, addr := startChild(t, "127.0.0.1:0")
	c := newClient(t, nil)
	got := make(chan error, 20)
	for i := range 20 {
		if err := c.Go(context.Background(), addr, req("/park", string(rune('a'+i))), func(_ link.Response, err error) { got <- err }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err) // the parked calls went out before this answer came back on their connection
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for range 20 {
		select {
		case err := <-got:
			if !errors.Is(err, ErrUnreachable) || !ForwardFailed(err) {
				t.Fatalf("call in flight at kill -9: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call hung after its owner was killed")
		}
	}
	cmd.Wait()
	startChild(t, addr)
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatalf("after the owner restarted: %v", err)
	}
}

// An owner stopped with SIGSTOP keeps its connections open but answers
// nothing: the pings go unanswered and the calls fail as unreachable after
// PingTimeout, not after their own (long) deadline.
func TestPausedOwnerFailsAfterPingTimeout(t *testing.T) {
	cmd, addr := startChild(t, "127.0.0.1:0")
	c := newClient(t, func(cfg *ClientConfig) {
		cfg.PingInterval = 50 * time.Millisecond
		cfg.PingTimeout = 400 * time.Millisecond
	})
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	waitFor(t, "the owner to stop", func() bool { return procState(cmd.Process.Pid) == 'T' })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	_, err := c.Do(ctx, addr, req("/echo", ""))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("paused owner: %v", err)
	}
	// The rule is a time: given up on after PingTimeout (400 ms), not after
	// the call's own deadline (a minute). 20 s is the margin a loaded
	// machine needs and still far from the minute.
	if d := time.Since(start); d > 400*time.Millisecond+20*time.Second {
		t.Fatalf("took %v to give up on a paused owner; want the ping timeout (400 ms), not the call's deadline (1 min)", d)
	}
	cmd.Process.Signal(syscall.SIGCONT)
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatalf("after the owner resumed: %v", err)
	}
}

// procState is the state letter in /proc/<pid>/stat ('T' once stopped).
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// A healthy owner answers pings: a connection idle for many ping timeouts
// is kept, and the next call uses it without a redial. The idle span is
// counted in the pings the owner read, not slept: the client pings at most
// once an interval, so 150 of them span at least three ping timeouts
// however slow the machine. The ping timeout is 50 intervals, so that a
// loaded machine's late pong does not pass for a silent owner.
func TestIdleConnectionSurvivesPings(t *testing.T) {
	const interval, timeout = 10 * time.Millisecond, 500 * time.Millisecond
	o := newOwner()
	srv, err := NewServer(ServerConfig{Secret: testSecret, Handler: o.handle, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	addr := raw.Addr().String()
	c := newClient(t, func(cfg *ClientConfig) {
		cfg.ConnsPerPeer = 1
		cfg.PingInterval = interval
		cfg.PingTimeout = timeout
	})
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
	idle := ln.read.Load()
	const pings = 3 * timeout / interval
	for deadline := time.Now().Add(30 * time.Second); ln.read.Load()-idle < int64(pings)*link.HeaderLen; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the owner read %d bytes of pings in 30 s, want %d pings (dials %d, connections %d: a dropped connection pings no more)", ln.read.Load()-idle, pings, c.Dials(), c.Conns(addr))
		}
	}
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
	if c.Dials() != 1 || c.Conns(addr) != 1 {
		t.Fatalf("dials %d, connections %d", c.Dials(), c.Conns(addr))
	}
}

// countingListener counts the bytes read from the connections it accepts.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}
