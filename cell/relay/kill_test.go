package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
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
		if err := c.Go(context.Background(), addr, req("/park", string(rune('a'+i))), func(_ Response, err error) { got <- err }); err != nil {
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
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v to give up on a paused owner", d)
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
// is kept, and the next call uses it without a redial.
func TestIdleConnectionSurvivesPings(t *testing.T) {
	o := newOwner()
	_, addr := startServer(t, o, nil)
	c := newClient(t, func(cfg *ClientConfig) {
		cfg.ConnsPerPeer = 1
		cfg.PingInterval = 20 * time.Millisecond
		cfg.PingTimeout = 100 * time.Millisecond
	})
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if _, err := c.Do(context.Background(), addr, req("/echo", "")); err != nil {
		t.Fatal(err)
	}
	if c.Dials() != 1 || c.Conns(addr) != 1 {
		t.Fatalf("dials %d, connections %d", c.Dials(), c.Conns(addr))
	}
}
