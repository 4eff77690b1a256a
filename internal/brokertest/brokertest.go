// Package brokertest starts the real broker binary for tests outside the
// server package (the SDKs, the examples): build it once, start brokers on
// free loopback ports with a fresh data directory, stop them with SIGTERM and
// start them again on the same data. It is for tests only.
package brokertest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds the Go package pkg (e.g. "./cmd/queen") of the module rooted
// at moduleDir into out.
func Build(moduleDir, pkg, out string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// Broker is one broker process and the data directory it keeps across
// restarts.
type Broker struct {
	bin  string
	env  map[string]string
	data string
	logs syncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	port int
}

// Start starts the broker binary bin with env (QUEEN_* variables) on a free
// port and a fresh data directory, and waits for GET /health = 200. It is
// killed when the test ends, and its log is printed if the test failed.
func Start(t testing.TB, bin string, env map[string]string) *Broker {
	t.Helper()
	b := &Broker{bin: bin, env: env, data: t.TempDir()}
	t.Cleanup(func() {
		b.Kill()
		if t.Failed() {
			t.Logf("broker log:\n%s", b.logs.String())
		}
	})
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b.StartOn(t, port)
	return b
}

// URL is the broker's base URL.
func (b *Broker) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://127.0.0.1:" + strconv.Itoa(b.port)
}

// PID is the process id of the broker now running (0 before the first
// start): what /proc/PID/status and prlimit need.
func (b *Broker) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// StartOn starts the broker (again, on the same data) on port.
func (b *Broker) StartOn(t testing.TB, port int) {
	t.Helper()
	cmd := exec.Command(b.bin)
	cmd.Dir = b.data
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "QUEEN_") && !strings.HasPrefix(k, "PG") && k != "PORT" && k != "HOST" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOST=127.0.0.1", "PORT="+strconv.Itoa(port),
		"QUEEN_DATA_DIR="+filepath.Join(b.data, "store"), "QUEEN_LOG_LEVEL=warn")
	for k, v := range b.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = &b.logs, &b.logs
	DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done, b.port = cmd, done, port
	b.mu.Unlock()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("the broker exited before serving:\n%s", b.logs.String())
		default:
		}
		if resp, err := probe.Get(b.URL() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("the broker did not answer /health within 20 s:\n%s", b.logs.String())
}

// Stop sends SIGTERM and waits for the exit (5 s at most).
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("the broker did not exit within 5 s of SIGTERM")
	}
}

// Kill ends the broker at once if it still runs.
func (b *Broker) Kill() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Kill()
		<-done
	}
}

// Brokers listen on ports below the kernel's ephemeral range (32768 and up on
// Linux), from a random start, each port handed out once per run: so a broker
// never gets a port that another broker of this run, or a connection the
// kernel numbered, holds or held a moment ago (a port taken in between would
// let the /health probe reach another process while ours fails to bind).
var (
	portMu   sync.Mutex
	nextPort = 20000 + int(time.Now().UnixNano()%12000)
)

// FreePort returns a loopback port nothing listens on.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 12000 {
		p := nextPort
		nextPort++
		if nextPort >= 32000 {
			nextPort = 20000
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("no free port")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
