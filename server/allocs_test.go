package server

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"github.com/queenmq/ephemeral/link"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// P3 at the server's level: a push, a pop with explicit ack and the ack of
// what it popped, each parsed, routed, served and answered as on a loop,
// allocate nothing in the steady state, together (the engine's pins cover
// only what is below the server; this one covers its glue: the pop's sink,
// the ids it writes, the ack body's decoding and outcomes, the metering).
//
// In gateway mode too, where the requests carry the gateway's headers and
// every pop answer its X-Queen-Delivered line.
func TestPushPopAckAreAllocationFree(t *testing.T) {
	t.Run(identity.ModeNone, func(t *testing.T) { pushPopAckAllocs(t, identity.ModeNone) })
	t.Run(identity.ModeGateway, func(t *testing.T) { pushPopAckAllocs(t, identity.ModeGateway) })
}

func pushPopAckAllocs(t *testing.T, mode string) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	auth, err := identity.New(identity.Config{Mode: mode, GatewaySecret: "gw-secret"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Engine: e, Store: openStore(t), Auth: auth})
	var headers string
	if mode == identity.ModeGateway {
		headers = "X-Queen-Gateway-Secret: gw-secret\r\nX-Queen-Tenant: default\r\nX-Queen-Access: read-write\r\n"
	}
	cs := &conn{s: s, ls: new(loopState)}
	cs.sink = popSink{cs: cs, e: e}

	var p wire.Parser
	var raw, body []byte
	serve := func(method, target string, b []byte) {
		raw = append(raw[:0], method...)
		raw = append(raw, ' ')
		raw = append(raw, target...)
		raw = append(raw, " HTTP/1.1\r\nHost: x\r\n"...)
		raw = append(raw, headers...)
		raw = append(raw, "Content-Length: "...)
		raw = strconv.AppendInt(raw, int64(len(b)), 10)
		raw = append(raw, "\r\n\r\n"...)
		raw = append(raw, b...)
		p.Reset()
		req, _, err := p.Parse(raw)
		if err != nil || req == nil {
			t.Fatalf("parse %s %s: %v", method, target, err)
		}
		cs.out = cs.out[:0]
		cs.route(req)
	}
	push := []byte(`{"queue":"q","partition":"p","messages":[{"payload":{"n":1}}]}`)
	idKey := []byte(`"id":"`)
	deliveredOne := []byte("\r\nX-Queen-Delivered: 1\r\n")
	cycle := func() {
		serve("POST", "/api/v1/ephemeral/push", push)
		if !bytes.HasPrefix(cs.out, []byte("HTTP/1.1 201")) {
			t.Fatalf("push: %s", cs.out)
		}
		serve("GET", "/api/v1/ephemeral/pop?queue=q&group=g", nil)
		i := bytes.Index(cs.out, idKey)
		if i < 0 {
			t.Fatalf("pop: %s", cs.out)
		}
		if bytes.Contains(cs.out, deliveredOne) != (mode == identity.ModeGateway) {
			t.Fatalf("pop in mode %s: %s", mode, cs.out)
		}
		id := cs.out[i+len(idKey):]
		id = id[:bytes.IndexByte(id, '"')]
		body = append(body[:0], `{"queue":"q","group":"g","acks":[{"id":"`...)
		body = append(body, id...)
		body = append(body, `","status":"completed"}]}`...)
		serve("POST", "/api/v1/ephemeral/ack", body)
		if !bytes.Contains(cs.out, []byte(`"outcome":"acked"`)) {
			t.Fatalf("ack: %s", cs.out)
		}
	}
	if n := steadyMallocs(steadyCycles, cycle); n > steadyCycles/100 {
		t.Fatalf("%d cycles of a push, a pop and its ack allocated %d times", steadyCycles, n)
	} else {
		t.Logf("%d cycles: %d allocations (background goroutines included)", steadyCycles, n)
	}
	var d engine.DepthInfo
	e.Depth("default", "q", "g", &d)
	if d.Pending != 0 {
		t.Fatalf("pending %d after every message was acked", d.Pending)
	}
}

// P3 on a gateway link: push and pop frames, each decoded, admitted as
// their tenant, served on a stand-in and answered into the link's output,
// allocate nothing in the steady state (no conn per request, no string per
// frame's tenant).
func TestGatewayLinkFramesAreAllocationFree(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	auth, err := identity.New(identity.Config{Mode: identity.ModeGateway, GatewaySecret: "gw-secret"})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Engine: e, Store: openStore(t), Auth: auth})
	ls := &loopState{s: s, loopLinks: loopLinks{gatewayRead: true}} // answers are gathered, not flushed by a task
	l := &linkConn{s: s, role: linkGateway, ls: ls, streams: map[uint64]*conn{}}
	frame := func(id uint64, method, target, body string) []byte {
		f, err := link.AppendRequest(nil, id, &link.Request{Tenant: []byte("acme"), Access: uint8(identity.ReadWrite), Method: []byte(method), Target: []byte(target), Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return f[link.HeaderLen:]
	}
	push := frame(1, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":{"n":1}}]}`)
	pop := frame(2, "GET", "/api/v1/ephemeral/pop?queue=q&autoAck=true", "")
	delivered := []byte("X-Queen-Delivered: 1\r\n")
	cycle := func() {
		l.out, ls.dirty, l.listed = l.out[:0], ls.dirty[:0], false
		if !s.serveGatewayFrame(l, 1, push) || !s.serveGatewayFrame(l, 2, pop) {
			t.Fatal("a frame did not decode")
		}
		if !bytes.Contains(l.out, []byte("HTTP/1.1 201")) || !bytes.Contains(l.out, delivered) {
			t.Fatalf("the link's output: %q", l.out)
		}
	}
	if n := steadyMallocs(steadyCycles, cycle); n > steadyCycles/100 {
		t.Fatalf("%d cycles of a push frame and a pop frame allocated %d times", steadyCycles, n)
	}
	if qs := e.Queues("acme", nil); len(qs) != 1 {
		t.Fatalf("acme's queues: %+v, want q", qs)
	}
}

// P3 on a client link: push and pop frames, served with the link's
// identity on a stand-in and answered into the link's output, allocate
// nothing in the steady state.
func TestClientLinkFramesAreAllocationFree(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	s := New(Config{Engine: e, Store: openStore(t), Auth: jwtAuth(t, []byte("allocs"))})
	ls := &loopState{s: s, loopLinks: loopLinks{gatewayRead: true}} // answers are gathered, not flushed by a task
	l := &linkConn{s: s, role: linkClient, ls: ls, streams: map[uint64]*conn{}, who: linkIdentity{tenant: "acme", level: identity.ReadWrite}}
	frame := func(id uint64, method, target, body string) []byte {
		f, err := link.AppendRequest(nil, id, &link.Request{Method: []byte(method), Target: []byte(target), Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		return f[link.HeaderLen:]
	}
	push := frame(1, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":{"n":1}}]}`)
	pop := frame(2, "GET", "/api/v1/ephemeral/pop?queue=q&autoAck=true", "")
	cycle := func() {
		l.out, ls.dirty, l.listed = l.out[:0], ls.dirty[:0], false
		if !s.serveClientFrame(l, 1, push) || !s.serveClientFrame(l, 2, pop) {
			t.Fatal("a frame did not decode")
		}
		if !bytes.Contains(l.out, []byte("HTTP/1.1 201")) || !bytes.Contains(l.out, []byte(`"payload":{"n":1}`)) {
			t.Fatalf("the link's output: %q", l.out)
		}
	}
	if n := steadyMallocs(steadyCycles, cycle); n > steadyCycles/100 {
		t.Fatalf("%d cycles of a push frame and a pop frame allocated %d times", steadyCycles, n)
	}
	if qs := e.Queues("acme", nil); len(qs) != 1 {
		t.Fatalf("acme's queues: %+v, want q", qs)
	}
}

// steadyCycles is how many cycles steadyMallocs counts over.
const steadyCycles = 2000

// steadyMallocs counts the heap allocations of n calls of cycle, after
// 1000 calls that grow every buffer to its steady size. Counted over many
// cycles rather than with testing.AllocsPerRun, which divides in integers
// and so hides an allocation made once every few calls (a buffer that
// keeps growing, a map that rehashes).
func steadyMallocs(n int, cycle func()) uint64 {
	for range 1000 {
		cycle()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		cycle()
	}
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}
