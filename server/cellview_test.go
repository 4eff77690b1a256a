package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/link"
)

// GET /api/v1/ephemeral/cell (cellview.go): the view for clients.

const cellViewPath = "/api/v1/ephemeral/cell"

var urlMembers = []cell.Member{
	{ID: "10.0.0.1:7000", Incarnation: "aaa", URL: "http://10.0.0.1:6632"},
	{ID: "10.0.0.2:7000", Incarnation: "bbb", URL: "https://b.example.com"},
	{ID: "10.0.0.3:7000", Incarnation: "ccc"}, // publishes none
}

const urlView4 = `{"generation":4,"tenant":"default","self":"10.0.0.2:7000","members":[{"id":"10.0.0.1:7000","url":"http://10.0.0.1:6632"},{"id":"10.0.0.2:7000","url":"https://b.example.com"},{"id":"10.0.0.3:7000"}]}`

// A broker outside a cell: generation 0, no members, the caller's tenant;
// a view read that waits for another generation waits its whole timeout
// (nothing changes outside a cell) and answers the same.
func TestCellViewSingleBroker(t *testing.T) {
	ts := startServer(t, engine.Config{})
	want := `{"generation":0,"tenant":"default","members":[]}`
	if code, body := ts.do(t, "GET", cellViewPath, ""); code != 200 || body != want {
		t.Fatalf("%d %s, want 200 %s", code, body, want)
	}
	t0 := time.Now()
	if code, body := ts.do(t, "GET", cellViewPath+"?after=0&timeout=150", ""); code != 200 || body != want {
		t.Fatalf("parked: %d %s", code, body)
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Fatalf("a view read of the current generation answered after %v, before its timeout", d)
	}
	if code, body := ts.do(t, "GET", cellViewPath+"?after=3&timeout=30000", ""); code != 200 || body != want {
		t.Fatalf("another generation: %d %s", code, body)
	}
}

// Every refusal, in the order of the status reads: method, identity, the
// kill switch, the grant, the query's shape.
func TestCellViewRefusals(t *testing.T) {
	ts := startServer(t, engine.Config{})
	ts.wantRefusal(t, "POST", cellViewPath, "{}", 405, "method_not_allowed")
	ts.wantRefusal(t, "GET", cellViewPath+"?after=x", "", 400, codeBadRequest)
	ts.wantRefusal(t, "GET", cellViewPath+"?after=1&after=2", "", 400, codeBadRequest)
	ts.wantRefusal(t, "GET", cellViewPath+"?timeout=-1", "", 400, codeBadRequest)
	ts.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":3}`, 200, "")
	ts.wantRefusal(t, "GET", cellViewPath, "", 503, "ephemeral_disabled")
	ts.wantRefusal(t, "GET", cellViewPath+"?after=x", "", 503, "ephemeral_disabled") // before shape
	ts.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`, 200, "")

	gated := startConfigured(t, Config{RequireGrant: true})
	gated.wantRefusal(t, "GET", cellViewPath, "", 403, "feature_gated")

	secret := []byte("view-secret")
	jts := startConfigured(t, Config{Auth: jwtAuth(t, secret)})
	jts.wantRefusal(t, "GET", cellViewPath, "", 401, "unauthorized")
	for role, want := range map[string]int{"write-only": 403, "read-only": 200, "read-write": 200, "admin": 200} {
		tok := hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": role, "exp": time.Now().Add(time.Hour).Unix()})
		req, _ := http.NewRequest("GET", "http://"+jts.addr+cellViewPath, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode != want:
			t.Fatalf("%s: %d %s, want %d", role, resp.StatusCode, b, want)
		case want == 403 && !strings.Contains(string(b), `"code":"forbidden"`):
			t.Fatalf("%s: %s, want code forbidden", role, b)
		case want == 200 && string(b) != `{"generation":0,"tenant":"acme","members":[]}`:
			t.Fatalf("%s: %s, want the caller's tenant", role, b)
		}
	}
}

// changeView publishes next on f as a Membership does: stored, then the
// server told.
func changeView(ts *testServer, f *fakeCell, next *cell.View) {
	prev := f.v.Swap(next)
	ts.s.CellChanged(prev, next)
}

// In a cell: the members of this member's view with their URLs (none for
// a member that published none). A read waiting on the current generation
// is answered when the view changes, with the new one, and one waiting on
// another generation at once; its timeout answers the same view.
func TestCellViewInACell(t *testing.T) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	if code, body := ts.do(t, "GET", cellViewPath, ""); code != 200 || body != urlView4 {
		t.Fatalf("%d %s, want 200 %s", code, body, urlView4)
	}
	if code, body := ts.do(t, "GET", cellViewPath+"?after=3", ""); code != 200 || body != urlView4 {
		t.Fatalf("after an older generation: %d %s", code, body)
	}
	t0 := time.Now()
	if code, body := ts.do(t, "GET", cellViewPath+"?after=4&timeout=100", ""); code != 200 || body != urlView4 || time.Since(t0) < 100*time.Millisecond {
		t.Fatalf("timed out: %d %s after %v", code, body, time.Since(t0))
	}

	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		code, body := ts.do(t, "GET", cellViewPath+"?after=4&timeout=30000", "")
		got <- answer{code, body}
	}()
	waitUntil(t, "the view read parked", func() bool { return ts.s.views.n.Load() == 1 })
	// A view of the same generation wakes nothing (the fake never does
	// this; a Membership publishes a new generation with every change).
	ts.s.CellChanged(f.View(), f.View())
	changeView(ts, f, cell.StaticView(5, "10.0.0.2:7000", urlMembers[:2], false))
	select {
	case a := <-got:
		want := `{"generation":5,"tenant":"default","self":"10.0.0.2:7000","members":[{"id":"10.0.0.1:7000","url":"http://10.0.0.1:6632"},{"id":"10.0.0.2:7000","url":"https://b.example.com"}]}`
		if a.code != 200 || a.body != want {
			t.Fatalf("woken: %d %s, want 200 %s", a.code, a.body, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the parked view read was not answered when the view changed")
	}
	if n := ts.s.views.n.Load(); n != 0 {
		t.Fatalf("%d view reads still listed", n)
	}
	// Fenced: this member leaves itself out, as its ownership does.
	changeView(ts, f, cell.StaticView(6, "10.0.0.2:7000", []cell.Member{urlMembers[0]}, true))
	ts.want(t, "GET", cellViewPath, "", 200, `{"generation":6,"tenant":"default","self":"10.0.0.2:7000","members":[{"id":"10.0.0.1:7000","url":"http://10.0.0.1:6632"}]}`)
}

// A parked view read whose connection closes is let go at once, and the
// connection's requests behind it wait for its answer (HTTP/1.1 order).
func TestCellViewLetGoWhenTheConnectionCloses(t *testing.T) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A parked view read, and a push pipelined behind it.
	req := "GET " + cellViewPath + "?after=4 HTTP/1.1\r\nHost: b\r\n\r\n" +
		"POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: b\r\nContent-Length: 40\r\n\r\n" + `{"queue":"q","messages":[{"payload":1}]}`
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the view read parked", func() bool { return ts.s.views.n.Load() == 1 })
	changeView(ts, f, cell.StaticView(5, "10.0.0.2:7000", urlMembers, false))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := rawResponses(t, bufio.NewReader(c), 2)
	if !strings.HasPrefix(got[0], `200 {"generation":5,`) || got[1] != `201 {"pushed":1}` {
		t.Fatalf("answers %q", got)
	}
	if _, err := c.Write([]byte("GET " + cellViewPath + "?after=5 HTTP/1.1\r\nHost: b\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "parked again", func() bool { return ts.s.views.n.Load() == 1 })
	c.Close()
	waitUntil(t, "let go with its connection", func() bool { return ts.s.views.n.Load() == 0 })
}

// Over a client link: the view read is a route of the link; a parked one
// holds only its stream (a push sent behind it is answered first), is
// answered on its stream when the view changes, and is let go by a cancel
// frame. At most maxLinkViewReads park per link (one more is answered at
// once), and they do not count among the link's requests served off the
// loop: a configure behind four parked view reads is served.
func TestCellViewOverAClientLink(t *testing.T) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	l := openClientLink(t, ts.addr, "")
	read := l.send(t, "", 0, "GET", cellViewPath, "")
	if id, code, body := l.answer(t); id != read || code != 200 || body != urlView4 {
		t.Fatalf("stream %d: %d %s", id, code, body)
	}
	parked := l.send(t, "", 0, "GET", cellViewPath+"?after=4", "")
	push := l.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`)
	if id, code, _ := l.answer(t); id != push || code != 201 {
		t.Fatalf("behind the parked view read: stream %d %d, want the push's 201", id, code)
	}
	changeView(ts, f, cell.StaticView(5, "10.0.0.2:7000", urlMembers, false))
	if id, code, body := l.answer(t); id != parked || code != 200 || !strings.HasPrefix(body, `{"generation":5,"tenant":"default",`) {
		t.Fatalf("woken: stream %d %d %s", id, code, body)
	}
	if n := offLoopCount(t, ts); n != 0 {
		t.Fatalf("%d requests counted off the loop after a view read was answered, want 0", n)
	}

	// A cancel frame lets it go; no answer follows.
	cancelled := l.send(t, "", 0, "GET", cellViewPath+"?after=5", "")
	waitUntil(t, "parked", func() bool { return ts.s.views.n.Load() == 1 })
	if _, err := l.c.Write(link.AppendHeader(nil, link.FrameCancel, cancelled, 0)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "let go by the cancel", func() bool { return ts.s.views.n.Load() == 0 })

	// The bound: four park, the fifth is answered at once.
	for range maxLinkViewReads {
		l.send(t, "", 0, "GET", cellViewPath+"?after=5", "")
	}
	waitUntil(t, "four parked", func() bool { return ts.s.views.n.Load() == maxLinkViewReads })
	fifth := l.send(t, "", 0, "GET", cellViewPath+"?after=5", "")
	if id, code, body := l.answer(t); id != fifth || code != 200 || !strings.HasPrefix(body, `{"generation":5,`) {
		t.Fatalf("the fifth: stream %d %d %s, want answered at once", id, code, body)
	}
	// Not counted as served off the loop: four configures go through.
	for i := range maxLinkOffLoop {
		l.send(t, "", 0, "POST", "/api/v1/ephemeral/configure", `{"queue":"c`+string(rune('0'+i))+`"}`)
	}
	for range maxLinkOffLoop {
		typ, id, p := readFrame(t, l.c)
		if typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
			t.Fatalf("a configure behind the parked view reads: frame %d on stream %d: %q", typ, id, p)
		}
	}
	if n := offLoopCount(t, ts); n != 0 {
		t.Fatalf("%d requests counted off the loop with four view reads parked, want 0", n)
	}
	// The link's end lets the four go.
	l.c.Close()
	waitUntil(t, "let go with the link", func() bool { return ts.s.views.n.Load() == 0 })
}

// Shutdown answers the parked view reads, as it answers parked pops.
func TestCellViewAnsweredOnShutdown(t *testing.T) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", urlMembers, false), nil, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	l := openClientLink(t, ts.addr, "")
	parked := l.send(t, "", 0, "GET", cellViewPath+"?after=4", "")
	waitUntil(t, "parked", func() bool { return ts.s.views.n.Load() == 1 })
	go ts.s.Shutdown(t.Context())
	if id, code, body := l.answer(t); id != parked || code != 200 || body != urlView4 {
		t.Fatalf("on shutdown: stream %d %d %s", id, code, body)
	}
}

// offLoopCount sums, on each loop, what its client links count as served
// off the loop (maxLinkOffLoop's count).
func offLoopCount(t *testing.T, ts *testServer) int {
	t.Helper()
	total := 0
	ts.s.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		done := make(chan int, 1)
		_ = ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			n := 0
			for l := range ls.clientLinks {
				n += l.offLoop
			}
			done <- n
			return nil
		}))
		select {
		case n := <-done:
			total += n
		case <-time.After(5 * time.Second):
			t.Fatal("a loop did not run the count")
		}
		return true
	})
	return total
}
