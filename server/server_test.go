package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
)

// In-process tests of the server under the race detector (T2). The
// conformance package tests the real binary end to end; these exercise the
// loops, the async answers and pipelining with -race on.

type testServer struct {
	s    *Server
	e    *engine.Engine
	addr string
}

func startServer(t *testing.T, ecfg engine.Config) *testServer {
	t.Helper()
	return startWith(t, ecfg, openStore(t), 2)
}

func (ts *testServer) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+ts.addr+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rawResponses reads n responses (status line, headers, Content-Length
// body) from r and returns their bodies.
func rawResponses(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, fmt.Sprintf("%d %s", resp.StatusCode, b))
	}
	return out
}

// D13: responses on a connection leave in request order, even when the
// requests were pipelined behind a parked pop that another connection's
// push completes.
func TestPipelinedRequestsAnswerInOrderBehindAParkedPop(t *testing.T) {
	ts := startServer(t, engine.Config{})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	push := `{"queue":"other","messages":[{"payload":1}]}`
	fmt.Fprintf(c, "GET /api/v1/ephemeral/pop?queue=inbox&wait=true&timeout=5000 HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"+
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", len(push), push)
	time.Sleep(50 * time.Millisecond)
	if code, body := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"inbox","messages":[{"payload":"reply"}]}`); code != 201 {
		t.Fatalf("push: %d %s", code, body)
	}
	got := rawResponses(t, bufio.NewReader(c), 3)
	if !strings.HasPrefix(got[0], `200 {"queue":"inbox","messages":[{"id":`) || !strings.Contains(got[0], `"payload":"reply"`) {
		t.Fatalf("first answer is not the woken pop: %s", got[0])
	}
	if got[1] != `201 {"pushed":1}` || !strings.HasPrefix(got[2], `200 {"status":"ok"`) {
		t.Fatalf("answers out of order: %q", got)
	}
}

// D13: a parked pop whose connection closes is removed at once; the next
// message goes to a live consumer instead.
func TestClosedConnectionUnparksItsPop(t *testing.T) {
	ts := startServer(t, engine.Config{})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/v1/ephemeral/pop?queue=q&wait=true&timeout=30000 HTTP/1.1\r\nHost: x\r\n\r\n")
	parked := func() (n int64) {
		ts.e.TenantGauges(func(tenant string, _ int64, _, _ int, p int64) {
			if tenant == "default" {
				n = p
			}
		})
		return n
	}
	waitUntil(t, "the pop parked", func() bool { return parked() == 1 })
	c.Close()
	// Its pop is removed at once (D13), not at its 30 s timeout.
	waitUntil(t, "the closed connection's pop unparked", func() bool { return parked() == 0 })
	if code, _ := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`); code != 201 {
		t.Fatal("push failed")
	}
	// The one message pushed went to nobody: it is pending, not leased.
	var d engine.DepthInfo
	ts.e.Depth("default", "q", "", &d)
	if d.Pending != 1 {
		t.Fatalf("pending %d after one push, want 1: the message went to the closed connection's pop", d.Pending)
	}
}

// waitUntil polls cond every millisecond for up to 2 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

// T2: many connections pushing, popping with wait and acking at once, with
// the race detector on; every message is delivered exactly once.
func TestConcurrentConnections(t *testing.T) {
	ts := startServer(t, engine.Config{})
	const producers, perProducer, consumers = 4, 200, 4
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < perProducer; i++ {
				body := fmt.Sprintf(`{"queue":"work","partition":"p%d","messages":[{"payload":%d}]}`, p%2, p*perProducer+i)
				if code, b := ts.do(t, "POST", "/api/v1/ephemeral/push", body); code != 201 {
					t.Errorf("push: %d %s", code, b)
					return
				}
			}
		}(p)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	total := 0
	for k := 0; k < consumers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				mu.Lock()
				done := total >= producers*perProducer
				mu.Unlock()
				if done {
					return
				}
				code, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue=work&group=g&batch=16&wait=true&timeout=200&autoAck=true", "")
				if code != 200 {
					t.Errorf("pop: %d %s", code, body)
					return
				}
				for _, part := range strings.Split(body, `"payload":`)[1:] {
					v := part[:strings.IndexByte(part, '}')]
					mu.Lock()
					seen[v]++
					total++
					mu.Unlock()
				}
			}
			t.Error("consumers did not drain before the deadline")
		}()
	}
	wg.Wait()
	if len(seen) != producers*perProducer {
		t.Fatalf("saw %d distinct messages of %d", len(seen), producers*perProducer)
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("message %s delivered %d times", v, n)
		}
	}
}

// Shutdown answers parked pops with an empty batch (SIGTERM).
func TestShutdownAnswersParkedPops(t *testing.T) {
	ts := startServer(t, engine.Config{})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/v1/ephemeral/pop?queue=q&wait=true&timeout=30000 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	go ts.s.Shutdown(context.Background())
	got := rawResponses(t, bufio.NewReader(c), 1)
	if got[0] != `200 {"queue":"q","messages":[]}` {
		t.Fatalf("parked pop at shutdown: %s", got[0])
	}
}
