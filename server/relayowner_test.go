package server

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store/embedded"
)

// relayOwner is a broker serving the relay port as cmd/queen wires it: a
// relay.Server that passes the handshake and hands every connection to
// the broker's loops (AdoptRelayConn). It owns, in its view, the queues
// queueOf gives to selfAddr.
type relayOwner struct {
	*testServer
	addr string     // the relay port
	view *cell.View // the owner's view: self is selfAddr
	rs   *relay.Server
}

// ownerView is a relay owner's view: itself (selfAddr) and a member that
// is never dialled.
func ownerView() viewer { return twoMembers("127.0.0.1:2") }

// startRelayOwner starts a relayOwner relaying (what it does not own) with
// opts.
func startRelayOwner(t testing.TB, opts RelayOptions) *relayOwner {
	t.Helper()
	m := ownerView()
	ts := startLanding(t, m, opts)
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: ts.s.AdoptRelayConn})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	return &relayOwner{testServer: ts, addr: ln.Addr().String(), view: m.View(), rs: rs}
}

// queue is a queue of the default tenant that the owner owns.
func (o *relayOwner) queue(t testing.TB) string { return queueOf(t, o.view, selfAddr) }

// relayOwnerProcess is a relay owner as a process of its own (TestMain):
// it serves the relay port on addr ("127.0.0.1:0": any), its store in dir,
// prints "ready <relay address>" and serves until it is killed.
func relayOwnerProcess(addr, dir string) {
	fail := func(err error) {
		fmt.Println("owner:", err)
		os.Exit(2)
	}
	st, err := embedded.Open(embedded.Config{Dir: dir})
	if err != nil {
		fail(err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	pubAddr := pub.Addr().String()
	pub.Close()
	rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
	if err != nil {
		fail(err)
	}
	s := New(Config{Addr: pubAddr, Engine: engine.New(engine.Config{}), Store: st, Loops: 2, Logger: slog.New(slog.DiscardHandler)})
	s.AttachCell(rc, RelayOptions{Secret: testSecret})
	s.cell.m = ownerView()
	if err := s.Start(); err != nil {
		fail(err)
	}
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: s.AdoptRelayConn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail(err)
	}
	fmt.Println("ready", ln.Addr().String())
	_ = rs.Serve(ln)
}

// startOwnerProcess starts this test binary as a relay owner process on
// addr ("127.0.0.1:0" for any port) and returns it with the relay port's
// address. Its queues are those ownerView gives to selfAddr.
func startOwnerProcess(t *testing.T, addr string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RELAY_OWNER_ADDR="+addr, "RELAY_OWNER_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("the owner process did not start: %q %v", line, err)
	}
	return cmd, strings.TrimSpace(line[len("ready "):])
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
