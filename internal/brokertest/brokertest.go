// Package brokertest is the one harness that starts the real broker binary
// for tests outside the server package (the conformance suite, the SDK, the
// examples, queenctl, the dashboard in a browser, the reliability cases):
// build each binary once per test process (Binary, Main), start brokers on
// free loopback ports with a fresh data directory and an environment of
// QUEEN_* variables, wait until they serve, keep their log (printed when the
// test fails), signal, stop and kill them, and start them again on the same
// data. Around the brokers, what the suites that run them share: a cell of
// brokers on one PostgreSQL schema and a wait for its live set (cell.go),
// one request sent and its answer read whole (reply.go), and a wait on a
// condition and a reader of /metrics (wait.go). It is for tests only.
package brokertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// Broker is one broker process, its restarts, and the data directory and
// log it keeps across them.
type Broker struct {
	// The options below are read at each start: set them before Start, or
	// between a stop and the next start, from the goroutine that starts.

	// WaitStoreOK: a start waits for /health to report "store": "ok" as
	// well as 200.
	WaitStoreOK bool
	// NoFile, when above 0, is the descriptor limit (soft and hard) the
	// process starts under.
	NoFile int
	// KeepPort: a start after the first listens on the port the broker
	// had, so that clients holding its URL reach it again.
	KeepPort bool
	// LogTail is how much of the log's end a failed test prints (and a
	// failed start reports); 0 is all of it.
	LogTail int

	bin  string
	env  map[string]string
	data string
	logs LockedBuffer

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when the current process exited
	state *os.ProcessState
	port  int
}

// Start starts the broker binary bin (see Binary) with env on a free port
// and a fresh data directory (New, then Broker.Start).
func Start(t testing.TB, bin string, env map[string]string) *Broker {
	t.Helper()
	b := New(t, bin, env)
	b.Start(t)
	return b
}

// StartQueen starts the broker built from Queen (Binary) with env: Start
// for the tests that want the broker as it is.
func StartQueen(t testing.TB, env map[string]string) *Broker {
	t.Helper()
	return Start(t, Binary(t, Queen), env)
}

// New is a broker not started yet, so that its options can be set first.
// Its environment is this process's less every variable that would choose
// or configure the store or the broker behind the test's back (QUEEN_*,
// PG*, HOST, PORT), then HOST and PORT, QUEEN_LOG_LEVEL=warn and, unless
// env names QUEEN_DATA_DIR or QUEEN_DATABASE_URL, an embedded store in the
// broker's own directory; then env, which wins. The broker is killed when
// the test ends, and its log printed if the test failed.
func New(t testing.TB, bin string, env map[string]string) *Broker {
	b := &Broker{bin: bin, env: env, data: t.TempDir()}
	t.Cleanup(func() {
		b.Kill()
		if t.Failed() {
			t.Logf("broker log%s:\n%s", b.tailNote(), b.logTail())
		}
	})
	return b
}

// BaseEnv is this process's environment less the variables that choose or
// configure a store or the broker (QUEEN_*, PG*, HOST, PORT): what every
// broker process starts from.
func BaseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "QUEEN_") || strings.HasPrefix(k, "PG") || k == "PORT" || k == "HOST" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Start starts the broker (again, on the same data) on a free port, or on
// the port it had when KeepPort is set, and waits until it serves.
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	b.startOn(t, 0)
}

// StartOn starts the broker (again, on the same data) on port.
func (b *Broker) StartOn(t testing.TB, port int) {
	t.Helper()
	b.startOn(t, port)
}

func (b *Broker) startOn(t testing.TB, port int) {
	t.Helper()
	var err error
	// A port taken between FreePort and the broker's bind: try another.
	for range 3 {
		if err = b.tryStart(port); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("starting the broker: %v\nlog:\n%s", err, b.logTail())
	}
}

func (b *Broker) tryStart(port int) error {
	b.mu.Lock()
	if port == 0 && b.KeepPort {
		port = b.port
	}
	b.mu.Unlock()
	if port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		port = p
	}
	cmd := exec.Command(b.bin)
	if b.NoFile > 0 {
		cmd = exec.Command("/bin/sh", "-c", "ulimit -n "+strconv.Itoa(b.NoFile)+" && exec \"$0\"", b.bin)
	}
	cmd.Dir = b.data
	cmd.Env = append(BaseEnv(), "HOST=127.0.0.1", "PORT="+strconv.Itoa(port), "QUEEN_LOG_LEVEL=warn")
	if b.env["QUEEN_DATA_DIR"] == "" && b.env["QUEEN_DATABASE_URL"] == "" {
		cmd.Env = append(cmd.Env, "QUEEN_DATA_DIR="+filepath.Join(b.data, "store"))
	}
	for k, v := range b.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = &b.logs, &b.logs
	DieWithParent(cmd)
	fmt.Fprintf(&b.logs, "=== start on port %d\n", port)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	b.mu.Lock()
	b.cmd, b.done, b.state, b.port = cmd, done, nil, port
	b.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		b.mu.Lock()
		b.state = cmd.ProcessState
		b.mu.Unlock()
		close(done)
	}()
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-done:
			return fmt.Errorf("the broker exited before serving (%v): %s", b.exitState(), b.logs.Tail(2000))
		default:
		}
		if b.ready(probe) {
			return nil
		}
	}
	_ = cmd.Process.Kill()
	<-done
	if b.WaitStoreOK {
		return errors.New("GET /health did not answer 200 with store ok within 20 s")
	}
	return errors.New("GET /health did not answer 200 within 20 s")
}

// ready is GET /health = 200 (with "store": "ok" under WaitStoreOK).
func (b *Broker) ready(probe *http.Client) bool {
	resp, err := probe.Get(b.URL() + "/health")
	if err != nil {
		return false
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return false
	}
	if !b.WaitStoreOK {
		return true
	}
	var h struct{ Store string }
	return json.Unmarshal(body, &h) == nil && h.Store == "ok"
}

func (b *Broker) exitState() *os.ProcessState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// URL is the broker's base URL, http://127.0.0.1:port.
func (b *Broker) URL() string {
	return "http://" + b.Addr()
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string {
	return "127.0.0.1:" + strconv.Itoa(b.Port())
}

// Port is the port the broker listens (or last listened) on.
func (b *Broker) Port() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.port
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

// CPU is the user and system CPU time the running process has used so far
// (/proc/PID/stat, in clock ticks of 10 ms), for a measurement's CPU per
// operation.
func (b *Broker) CPU(t testing.TB) time.Duration {
	t.Helper()
	pid := b.PID()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: state is field 3,
	// utime 14 and stime 15.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// Log is everything the broker's processes printed so far, each start
// marked by a line "=== start on port N".
func (b *Broker) Log() string { return b.logs.String() }

func (b *Broker) logTail() string {
	if b.LogTail > 0 {
		return b.logs.Tail(b.LogTail)
	}
	return b.logs.String()
}

func (b *Broker) tailNote() string {
	if b.LogTail > 0 {
		return fmt.Sprintf(" (the last %d bytes)", b.LogTail)
	}
	return ""
}

// Signal sends sig to the broker now running, without waiting (SIGSTOP,
// SIGCONT).
func (b *Broker) Signal(sig syscall.Signal) error {
	b.mu.Lock()
	cmd := b.cmd
	b.mu.Unlock()
	return cmd.Process.Signal(sig)
}

// SignalWait sends sig and waits (at most wait) for the process to exit;
// it answers the exit code (-1 when killed by a signal) and how long the
// exit took. It fails t when the process does not exit in time.
func (b *Broker) SignalWait(t testing.TB, sig syscall.Signal, wait time.Duration) (code int, took time.Duration) {
	t.Helper()
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	start := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the broker did not exit within %v of %v", wait, sig)
	}
	return b.exitState().ExitCode(), time.Since(start)
}

// Stop sends SIGTERM and waits for the exit (5 s at most).
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.SignalWait(t, syscall.SIGTERM, 5*time.Second)
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
