package relay

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"go.uber.org/goleak"
)

var testSecret = []byte("cell-secret-for-tests")

// TestMain checks for leaked goroutines, and doubles as the owner process
// that the kill -9 and SIGSTOP tests start (RELAY_CHILD_ADDR set).
func TestMain(m *testing.M) {
	if addr := os.Getenv("RELAY_CHILD_ADDR"); addr != "" {
		childOwner(addr)
		return
	}
	goleak.VerifyTestMain(m)
}

// childOwner serves testOwner's handler on addr and prints "ready <addr>".
func childOwner(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(2)
	}
	o := &testOwner{parked: map[string]func(link.Response){}, cancelled: make(chan string, 1024)}
	srv, _ := NewServer(ServerConfig{Secret: testSecret, Handler: o.handle})
	fmt.Println("ready", ln.Addr().String())
	srv.Serve(ln)
}

// testOwner answers by target: /echo at once with what it received,
// /park when /release names the same body, /delay/<ms> after that long,
// /size/<n> with an n-byte answer. It records every cancelled context.
type testOwner struct {
	mu        sync.Mutex
	parked    map[string]func(link.Response)
	calls     int
	cancelled chan string
}

func answer(body string) link.Response {
	return link.Response{Raw: []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)}
}

func (o *testOwner) handle(ctx context.Context, req *link.Request, reply func(link.Response)) {
	o.mu.Lock()
	o.calls++
	o.mu.Unlock()
	target := string(req.Target)
	switch {
	case target == "/fixed":
		reply(fixedAnswer)
	case target == "/echo":
		reply(answer(fmt.Sprintf("%s|%d|%s|%s|%q|%s", req.Tenant, req.Access, req.Method, req.Target, req.Header, req.Body)))
	case target == "/park":
		key := string(req.Body)
		o.mu.Lock()
		o.parked[key] = reply
		o.mu.Unlock()
		context.AfterFunc(ctx, func() {
			o.mu.Lock()
			delete(o.parked, key)
			o.mu.Unlock()
			o.cancelled <- key
		})
	case target == "/release":
		o.mu.Lock()
		r := o.parked[string(req.Body)]
		delete(o.parked, string(req.Body))
		o.mu.Unlock()
		if r != nil {
			r(answer("released " + string(req.Body)))
		}
		reply(answer("ok"))
	case strings.HasPrefix(target, "/delay/"):
		ms, _ := strconv.Atoi(target[len("/delay/"):])
		time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { reply(answer(string(req.Body))) })
	case strings.HasPrefix(target, "/size/"):
		n, _ := strconv.Atoi(target[len("/size/"):])
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		reply(link.Response{Raw: b})
	default:
		reply(link.Response{Raw: []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")})
	}
}

// fixedAnswer is a pop's answer of one 100-byte message, about the size
// the request/reply benchmarks move.
var fixedAnswer = answer(`{"messages":[{"id":"0000000000000001-0000000000000002","partition":"p","data":"` +
	strings.Repeat("x", 100) + `","attempts":1}]}`)

// releaseAll answers every parked call.
func (o *testOwner) releaseAll() {
	o.mu.Lock()
	ps := o.parked
	o.parked = map[string]func(link.Response){}
	o.mu.Unlock()
	for _, r := range ps {
		r(fixedAnswer)
	}
}

// callCount is how many requests the handler was given.
func (o *testOwner) callCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

func (o *testOwner) parkedCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.parked)
}

func newOwner() *testOwner {
	return &testOwner{parked: map[string]func(link.Response){}, cancelled: make(chan string, 1<<16)}
}

// startServer serves o on a loopback port; Close runs at cleanup.
func startServer(t testing.TB, o *testOwner, mod func(*ServerConfig)) (*Server, string) {
	t.Helper()
	cfg := ServerConfig{Secret: testSecret, Handler: o.handle, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln.Addr().String()
}

func newClient(t testing.TB, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{Secret: testSecret}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func req(target, body string) *link.Request {
	return &link.Request{Tenant: []byte("acme"), Access: 3, Method: []byte("POST"), Target: []byte(target), Body: []byte(body)}
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// readReady reads the child's "ready <addr>" line.
func readReady(t testing.TB, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("child did not start: %q %v", line, err)
	}
	return strings.TrimSpace(line[len("ready "):])
}
