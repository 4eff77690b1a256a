package client

// The harness: build the broker binary once, start brokers on free loopback
// ports with a fresh data directory, stop them with SIGTERM, restart them on
// the same data. (A small copy of conformance/harness_test.go.)

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

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "queen-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "queen")
	cmd := exec.Command("go", "build", "-o", binPath, "./cmd/queen")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./cmd/queen: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type broker struct {
	env  map[string]string
	data string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	port int
	logs *syncBuffer
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

// startBroker starts a broker with env (QUEEN_* variables) on a fresh data
// directory; it is killed when the test ends.
func startBroker(t *testing.T, env map[string]string) *broker {
	t.Helper()
	b := &broker{env: env, data: t.TempDir(), logs: &syncBuffer{}}
	t.Cleanup(func() {
		b.kill()
		if t.Failed() {
			t.Logf("broker log:\n%s", b.logs.String())
		}
	})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	b.startOn(t, port)
	return b
}

func (b *broker) url() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "http://127.0.0.1:" + strconv.Itoa(b.port)
}

func (b *broker) startOn(t *testing.T, port int) {
	t.Helper()
	cmd := exec.Command(binPath)
	cmd.Dir = b.data
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "QUEEN_") || strings.HasPrefix(k, "PG") || k == "PORT" || k == "HOST" {
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "QUEEN_DATA_DIR="+filepath.Join(b.data, "store"), "QUEEN_LOG_LEVEL=warn")
	for k, v := range b.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = b.logs, b.logs
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.mu.Lock()
	b.cmd, b.done, b.port = cmd, done, port
	b.mu.Unlock()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			t.Fatalf("the broker exited before serving:\n%s", b.logs.String())
		default:
		}
		if resp, err := probe.Get(b.url() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the broker did not answer /health within 20 s:\n%s", b.logs.String())
}

// stop sends SIGTERM and waits for the exit.
func (b *broker) stop(t *testing.T) {
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

func (b *broker) kill() {
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

// Ports below the kernel's ephemeral range, from a random start, each
// handed out once per run.
var (
	portMu   sync.Mutex
	nextPort = 20000 + int(time.Now().UnixNano()%12000)
)

func freePort() (int, error) {
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
