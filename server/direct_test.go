package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
)

// writeDirect (conn.go): a parked pop completed from another event loop or
// the timing wheel is written to its socket by the completer. These run
// with two loops, so some completions cross loops, under -race.

// Requests pipelined behind a parked pop, sent before it parks and after,
// are answered after the pop and in order, whichever goroutine answers it
// (D13); the direct path is taken and wakes the loop for them.
func TestDirectAnswerKeepsOrderBehindAParkedPop(t *testing.T) {
	ts := startServer(t, engine.Config{})
	const n = 16
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		pop := fmt.Sprintf("GET /api/v1/ephemeral/pop?queue=inbox-%d&wait=true&timeout=10000 HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if i%2 == 0 {
			pop += "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" // already waiting when the pop parks
		}
		fmt.Fprint(c, pop)
	}
	// Every pop parks and its answers so far leave: the completer may then
	// write the answer itself (stDirect), and knows of the health waiting
	// behind half of them (stDirectInput).
	waitFor(t, 10*time.Second, "every pop parked on the direct path", func() bool {
		direct, input := directStates(ts.s)
		return direct == n/2 && input == n/2
	})
	for i, c := range conns {
		if i%2 == 1 {
			fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n") // arrives while parked
		}
	}
	waitFor(t, 10*time.Second, "the server saw every health behind a parked pop", func() bool {
		_, input := directStates(ts.s)
		return input == n
	})
	// One connection wakes them all: it sits on one loop, so about half of
	// the pops are completed from the other.
	w, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var batch strings.Builder
	for i := range n {
		body := fmt.Sprintf(`{"queue":"inbox-%d","messages":[{"payload":%d}]}`, i, i)
		fmt.Fprintf(&batch, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	fmt.Fprint(w, batch.String())
	for _, a := range rawResponses(t, bufio.NewReader(w), n) {
		if !strings.HasPrefix(a, "201 ") {
			t.Fatalf("push: %s", a)
		}
	}
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := rawResponses(t, bufio.NewReader(c), 2)
			if !strings.HasPrefix(got[0], fmt.Sprintf(`200 {"queue":"inbox-%d","messages":[{"id":`, i)) || !strings.Contains(got[0], fmt.Sprintf(`"payload":%d}`, i)) {
				t.Errorf("connection %d: first answer is not its pop: %s", i, got[0])
			}
			if !strings.HasPrefix(got[1], `200 {"status":"ok"`) {
				t.Errorf("connection %d: second answer is not the health: %s", i, got[1])
			}
		}()
	}
	wg.Wait()
	if !eventually(func() bool { return ts.s.directWrites.Load() > 0 }) {
		t.Fatal("no parked pop was answered by writeDirect")
	}
}

// A parked pop that times out is answered from the timing wheel's
// goroutine, directly, and the connection serves the next request.
func TestDirectAnswerOnTimeout(t *testing.T) {
	ts := startServer(t, engine.Config{})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for round := range 3 {
		before := ts.s.directWrites.Load()
		fmt.Fprint(c, "GET /api/v1/ephemeral/pop?queue=quiet&wait=true&timeout=150 HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got := rawResponses(t, r, 1); got[0] != `200 {"queue":"quiet","messages":[]}` {
			t.Fatalf("round %d: timed-out pop answered %s", round, got[0])
		}
		if !eventually(func() bool { return ts.s.directWrites.Load() > before }) {
			t.Fatalf("round %d: the timeout's answer did not take the direct path", round)
		}
	}
}

// A connection that closes while its parked pop is answered directly does
// not take the answer down with anything else: the others still get theirs.
func TestDirectAnswerRacingClose(t *testing.T) {
	ts := startServer(t, engine.Config{})
	for round := range 20 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /api/v1/ephemeral/pop?queue=race-%d&wait=true&timeout=5000 HTTP/1.1\r\nHost: x\r\n\r\n", round)
		time.Sleep(5 * time.Millisecond)
		go c.Close()
		ts.do(t, "POST", "/api/v1/ephemeral/push", fmt.Sprintf(`{"queue":"race-%d","messages":[{"payload":1}]}`, round))
	}
	if code, body := ts.do(t, "GET", "/health", ""); code != 200 {
		t.Fatalf("health after the races: %d %s", code, body)
	}
}

// directStates counts the server's connections whose parked pop its
// completer may answer directly: with nothing behind it (stDirect), and
// with requests that arrived behind it (stDirectInput).
func directStates(s *Server) (direct, input int) {
	s.conns.Range(func(cs *conn, _ struct{}) bool {
		switch cs.state.Load() {
		case stDirect:
			direct++
		case stDirectInput:
			input++
		}
		return true
	})
	return direct, input
}

// eventually polls cond for up to 10 s (a loaded machine's margin): the
// completer counts a direct write after the bytes left, so a client may
// read them first.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// A parked pop of a request that asked to close ("Connection: close") is
// answered directly, and then the connection is closed by the server.
func TestDirectAnswerThenCloseWhenAsked(t *testing.T) {
	ts := startServer(t, engine.Config{})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := ts.s.directWrites.Load()
	fmt.Fprint(c, "GET /api/v1/ephemeral/pop?queue=bye&wait=true&timeout=100 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if got := rawResponses(t, r, 1); got[0] != `200 {"queue":"bye","messages":[]}` {
		t.Fatalf("answer: %s", got[0])
	}
	if !eventually(func() bool { return ts.s.directWrites.Load() > before }) {
		t.Fatal("the timeout's answer did not take the direct path")
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the server to close (EOF)", err)
	}
}
