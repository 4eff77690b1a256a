package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/store"
)

// The bounds on a client link's unread answers and frames (linkbounds.go),
// with limits small enough to reach in a test.

// boundedConfig has an outbound soft limit of 64 KiB and a hard one of
// 1 MiB, and closes a link stopped over the soft limit after soft.
func boundedConfig(loops int, soft time.Duration) Config {
	return Config{Loops: loops, OutboundSoft: 64 << 10, OutboundHard: 1 << 20, OutboundSoftTime: soft}
}

// dialSmallWindow dials addr with a 4 KiB receive buffer, set before the
// connect so that the window the kernel advertises stays small: a client
// that does not read holds little in its own socket.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openSlowLink upgrades a small-window connection to a client link.
func openSlowLink(t *testing.T, addr string) *testLink {
	t.Helper()
	c := dialSmallWindow(t, addr)
	if _, err := c.Write([]byte("GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\n" + v1 + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, l := readUpgradeAnswer(t, c)
	if l == nil {
		t.Fatalf("upgrade refused: %d", resp.StatusCode)
	}
	return l
}

// pushBig pushes n messages of size bytes each to queue over HTTP.
func pushBig(t *testing.T, ts *testServer, queue string, n, size int) {
	t.Helper()
	payload := `"` + strings.Repeat("x", size) + `"`
	for n > 0 {
		k := min(n, 50)
		n -= k
		body := `{"queue":"` + queue + `","messages":[` + strings.Repeat(`{"payload":`+payload+`},`, k-1) + `{"payload":` + payload + `}]}`
		if status, answer := ts.do(t, "POST", "/api/v1/ephemeral/push", body); status != 201 {
			t.Fatalf("push: %d %s", status, answer)
		}
	}
}

// pendingOf is the queue's pending messages (not yet delivered).
func pendingOf(ts *testServer, queue string) int64 {
	var d engine.DepthInfo
	ts.e.Depth("default", queue, "", &d)
	return d.Pending
}

// clientLinkOutbound is the largest outbound buffer of the server's client
// links, read on their loops.
func clientLinkOutbound(t *testing.T, ts *testServer) int {
	t.Helper()
	most := 0
	ts.s.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		done := make(chan int, 1)
		err := ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			n := 0
			for l := range ls.clientLinks {
				n = max(n, l.c.OutboundBuffered())
			}
			done <- n
			return nil
		}))
		if err == nil {
			most = max(most, <-done)
		}
		return true
	})
	return most
}

// popFrames is n pops of one message each of queue, in one write: with
// autoAck, since a lease would let one pop of the group at a time take
// from the partition (D1).
func popFrames(t *testing.T, l *testLink, queue string, n int) {
	t.Helper()
	var out []byte
	for range n {
		var err error
		out, err = link.AppendRequest(out, l.nextID, &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?autoAck=true&queue=" + queue)})
		if err != nil {
			t.Fatal(err)
		}
		l.nextID++
	}
	if _, err := l.c.Write(out); err != nil {
		t.Fatal(err)
	}
}

// A client that pipelines pops of large messages on a link and reads
// nothing: the link stops being read once its unsent answers pass the soft
// limit (what gnet holds for it stays under the hard limit), other clients
// are served meanwhile, and after QUEEN_OUTBOUND_SOFT_S over the soft limit
// the link is closed and counted. The pops it never got to are not served.
func TestClientLinkSlowReaderIsStoppedThenClosed(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), boundedConfig(1, 2*time.Second))
	const n, size = 400, 32 << 10
	pushBig(t, ts, "big", n, size)
	l := openSlowLink(t, ts.addr)
	popFrames(t, l, "big", n)

	waitFor(t, 5*time.Second, "the link stopped for its unread answers", func() bool { return ts.s.nThrottled.Load() == 1 })
	if out := clientLinkOutbound(t, ts); out > ts.s.cfg.OutboundHard {
		t.Fatalf("the stopped link's outbound buffer holds %d bytes, over the hard limit %d", out, ts.s.cfg.OutboundHard)
	}
	// Others are served while it is stopped.
	if status, body := ts.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"other","messages":[{"payload":1}]}`); status != 201 {
		t.Fatalf("another client's push: %d %s", status, body)
	}
	if status, body := ts.do(t, "GET", "/api/v1/ephemeral/pop?queue=other", ""); status != 200 || !strings.Contains(body, `"payload":1`) {
		t.Fatalf("another client's pop: %d %s", status, body)
	}
	left := pendingOf(ts, "big")
	if left == 0 {
		t.Fatal("every pop of the stopped link was served")
	}
	waitFor(t, 10*time.Second, "the stopped link closed", func() bool { return ts.s.clientLinks.Load() == 0 })
	if shed := ts.s.tm.outboundShed.Get(); shed != 1 {
		t.Fatalf("queen_ephemeral_outbound_closed_total %d, want 1", shed)
	}
	waitFor(t, 5*time.Second, "the watcher unlisted it", func() bool { return ts.s.nThrottled.Load() == 0 })
	if got := pendingOf(ts, "big"); got != left {
		t.Fatalf("pending %d after the link closed, %d before: its unread pops were served", got, left)
	}
	if held := ts.s.inflight.Load(); held != 0 {
		t.Fatalf("%d bytes of the in-flight bound still held after the link closed", held)
	}
}

// A client that reads slowly: the link stops and is served again each time
// its client has read, and every pop is answered, in full.
func TestClientLinkSlowReaderResumes(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), boundedConfig(1, 30*time.Second))
	const n, size = 200, 32 << 10
	pushBig(t, ts, "big", n, size)
	l := openSlowLink(t, ts.addr)
	popFrames(t, l, "big", n)
	waitFor(t, 5*time.Second, "the link stopped for its unread answers", func() bool { return ts.s.nThrottled.Load() == 1 })
	seen := map[uint64]bool{}
	for range n {
		id, status, body := l.answer(t)
		if status != 200 || len(body) < size || seen[id] {
			t.Fatalf("stream %d: %d, %d bytes (seen before: %v)", id, status, len(body), seen[id])
		}
		seen[id] = true
	}
	if pendingOf(ts, "big") != 0 {
		t.Fatalf("pending %d after every pop was answered", pendingOf(ts, "big"))
	}
	waitFor(t, 5*time.Second, "the watcher unlisted it", func() bool { return ts.s.nThrottled.Load() == 0 })
	if shed := ts.s.tm.outboundShed.Get(); shed != 0 {
		t.Fatalf("queen_ephemeral_outbound_closed_total %d, want 0: the client read", shed)
	}
}

// Parked pops completed by pushes of other connections, on the link's loop
// (the loop's flush writes them) and on another (each completer writes its
// answer), to a client that reads none: once the unsent answers pass the
// hard limit the link is closed and counted.
func TestClientLinkUnreadAnswersPastTheHardLimitClose(t *testing.T) {
	for _, loops := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d loops", loops), func(t *testing.T) {
			ts := serve(t, engine.New(engine.Config{}), openStore(t), boundedConfig(loops, 30*time.Second))
			const n, size = 300, 32 << 10
			l := openSlowLink(t, ts.addr)
			var out []byte
			for range n {
				out, _ = link.AppendRequest(out, l.nextID, &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=big&autoAck=true&wait=true&timeout=30000")})
				l.nextID++
			}
			if _, err := l.c.Write(out); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the pops parked", func() bool { return parkedPops(ts.e) == n })
			pushBig(t, ts, "big", n, size)
			waitFor(t, 10*time.Second, "the link closed", func() bool { return ts.s.clientLinks.Load() == 0 })
			if shed := ts.s.tm.outboundShed.Get(); shed != 1 {
				t.Fatalf("queen_ephemeral_outbound_closed_total %d, want 1", shed)
			}
		})
	}
}

// What a link leaves unread holds the in-flight bound: a frame still
// arriving that the bound cannot hold closes the link, counted as an
// in-flight refusal, and gives back what it held.
func TestClientLinkUnreadFrameHoldsTheInflightBound(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, MaxInflightBytes: 256 << 10})
	l := openClientLink(t, ts.addr, "")
	// The start of a 1 MiB push: its header and 300 KiB of it.
	f := link.AppendHeader(nil, link.FrameRequest, 0, 1<<20)
	f = append(f, make([]byte, 300<<10)...)
	if _, err := l.c.Write(f); err != nil {
		t.Fatal(err)
	}
	// The refusal, then the close: the link may not be counted yet when the
	// frame is written (it is enrolled on its loop), so wait on both.
	waitFor(t, 5*time.Second, "the frame refused and the link closed", func() bool {
		return ts.s.tm.bodyRefused.Get() >= 1 && ts.s.clientLinks.Load() == 0
	})
	if got := ts.s.tm.bodyRefused.Get(); got != 1 {
		t.Fatalf("queen_ephemeral_inflight_refusals_total %d, want 1", got)
	}
	if held := ts.s.inflight.Load(); held != 0 {
		t.Fatalf("%d bytes still held", held)
	}
	// A frame the bound holds is served.
	l = openClientLink(t, ts.addr, "")
	body := `{"queue":"q","messages":[{"payload":"` + strings.Repeat("y", 200<<10) + `"}]}`
	l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", body)
	if _, status, answer := l.answer(t); status != 201 {
		t.Fatalf("a 200 KiB push under a 256 KiB bound: %d %s", status, answer)
	}
}

// A request frame over link.BigFrame still arriving is read aside only once
// its whole length is held of the in-flight bound (not only what has
// arrived), is served whole when its last byte comes, and then gives the
// bound back; one whose length the bound cannot hold is refused on its
// header.
func TestClientLinkBigFrameHoldsItsLength(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, MaxInflightBytes: 4 << 20})
	l := openClientLink(t, ts.addr, "")
	body := `{"queue":"q","messages":[{"payload":"` + strings.Repeat("y", 1<<20) + `"}]}`
	f, err := link.AppendRequest(nil, 0, &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"),
		Header: []byte("Content-Type: application/json\r\n"), Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.c.Write(f[:100<<10]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the frame's whole length held", func() bool { return ts.s.inflight.Load() == int64(len(f)) })
	if _, err := l.c.Write(f[100<<10:]); err != nil {
		t.Fatal(err)
	}
	if _, status, answer := l.answer(t); status != 201 {
		t.Fatalf("a 1 MiB push in two writes: %d %s", status, answer)
	}
	waitFor(t, 5*time.Second, "the bound given back", func() bool { return ts.s.inflight.Load() == 0 })
	if n := pendingOf(ts, "q"); n != 1 {
		t.Fatalf("%d messages pending, want the one pushed", n)
	}

	// Under a bound that cannot hold its length, it is refused on its
	// stream as HTTP refuses such a body, 503 ephemeral_unavailable, and
	// the link closed, although what arrived (100 KiB) was within the
	// bound: nothing is set aside for a frame before its length is held.
	ts = serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, MaxInflightBytes: 512 << 10})
	l = openClientLink(t, ts.addr, "")
	if _, err := l.c.Write(f[:100<<10]); err != nil {
		t.Fatal(err)
	}
	if _, status, answer := l.answer(t); status != 503 || !strings.Contains(answer, `"code":"ephemeral_unavailable"`) {
		t.Fatalf("a 1 MiB frame under a 512 KiB bound: %d %s; want 503 ephemeral_unavailable", status, answer)
	}
	waitFor(t, 5*time.Second, "the frame refused and the link closed", func() bool {
		return ts.s.tm.bodyRefused.Get() == 1 && ts.s.clientLinks.Load() == 0 && ts.s.inflight.Load() == 0
	})
}

// gatedStore holds every declaration write until it is let through, and
// keeps how many were held at once.
type gatedStore struct {
	store.Store
	gate chan struct{}
	mu   sync.Mutex
	now  int
	most int
}

func (g *gatedStore) PutDeclaration(ctx context.Context, d store.Declaration) error {
	g.mu.Lock()
	g.now++
	g.most = max(g.most, g.now)
	g.mu.Unlock()
	<-g.gate
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
	return g.Store.PutDeclaration(ctx, d)
}

func (g *gatedStore) held() (now, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now, g.most
}

// A link's requests served off the loop are at most maxLinkOffLoop at once:
// of ten configures sent together (each a store write off the loop) four
// reach the store and six are refused "busy" at once; a read and a push
// sent behind them are served meanwhile, and the four are answered once
// their writes go through.
func TestClientLinkRequestsOffTheLoopAreBounded(t *testing.T) {
	gs := &gatedStore{Store: openStore(t), gate: make(chan struct{})}
	ts := serve(t, engine.New(engine.Config{}), gs, Config{Loops: 1})
	l := openClientLink(t, ts.addr, "")
	var out []byte
	const n = 10
	for i := range n {
		out, _ = link.AppendRequest(out, l.nextID, &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/configure"), Body: []byte(fmt.Sprintf(`{"queue":"c%d"}`, i))})
		l.nextID++
	}
	for _, r := range []link.Request{
		{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/queues")},
		{Method: []byte("DELETE"), Target: []byte("/api/v1/ephemeral/queue/c0")},
		{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/reset"), Body: []byte(`{"queue":"c0"}`)},
		{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/queues/c0/depth")},
		{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"), Body: []byte(`{"queue":"p","messages":[{"payload":1}]}`)},
	} {
		out, _ = link.AppendRequest(out, l.nextID, &r)
		l.nextID++
	}
	if _, err := l.c.Write(out); err != nil {
		t.Fatal(err)
	}
	// Nothing is let through yet: 6 configures, the listing, the delete and
	// the reset are refused busy; the depth read (404: nothing is declared
	// yet) and the push are answered.
	refused := map[uint64]bool{}
	answered := map[uint64]int{}
	for range n - maxLinkOffLoop + 5 {
		typ, id, p := readFrame(t, l.c)
		switch {
		case typ == link.FrameRefuse && len(p) == 1 && p[0] == link.RefuseBusy:
			refused[id] = true
		case typ == link.FrameAnswer:
			answered[id] = statusOf(t, p)
		default:
			t.Fatalf("frame type %d on stream %d: %q", typ, id, p)
		}
	}
	for id := uint64(maxLinkOffLoop); id < n+3; id++ {
		if !refused[id] {
			t.Fatalf("stream %d not refused busy; refused %v, answered %v", id, refused, answered)
		}
	}
	if answered[n+3] != 404 || answered[n+4] != 201 {
		t.Fatalf("the depth read and the push behind the configures: %v", answered)
	}
	// The four reach the store off the loop, after their streams' places
	// were taken: wait for them there (CI saw 0 held when it looked at once).
	waitUntil(t, "the configures let through to reach the store", func() bool {
		now, _ := gs.held()
		return now == maxLinkOffLoop
	})
	for range maxLinkOffLoop {
		gs.gate <- struct{}{}
		if id, status, body := l.answer(t); id >= maxLinkOffLoop || status != 201 {
			t.Fatalf("stream %d: %d %s", id, status, body)
		}
	}
	if _, most := gs.held(); most != maxLinkOffLoop {
		t.Fatalf("%d declaration writes of one link at once, want %d", most, maxLinkOffLoop)
	}
	// Below the bound again, a configure is served.
	l.send(t, "", 0, "POST", "/api/v1/ephemeral/configure", `{"queue":"again"}`)
	gs.gate <- struct{}{}
	if _, status, body := l.answer(t); status != 201 {
		t.Fatalf("a configure after the others were answered: %d %s", status, body)
	}
}

// statusOf is the status of the HTTP answer in an answer frame.
func statusOf(t *testing.T, p []byte) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), nil)
	if err != nil {
		t.Fatalf("an answer frame: %v in %q", err, p)
	}
	return resp.StatusCode
}
