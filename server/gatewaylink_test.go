package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/panjf2000/gnet/v2"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/store"
)

// The gateway link (gatewaylink.go), driven over TCP as the gateway drives
// it: an HTTP upgrade, then the relay's frames.

const upgradeRequest = "GET /api/v1/system/gateway-link HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: queen-link\r\n"

// testLink is a gateway's end of a link.
type testLink struct {
	c      net.Conn
	nextID uint64
}

// dialLink upgrades a connection to ts with the given secret line (empty:
// none) and returns the broker's answer to the upgrade and, on 101, the
// link.
func dialLink(t *testing.T, addr, secret string) (*http.Response, *testLink) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := upgradeRequest
	if secret != "" {
		head += "X-Queen-Gateway-Secret: " + secret + "\r\n"
	}
	if _, err := c.Write([]byte(head + "\r\n")); err != nil {
		t.Fatal(err)
	}
	return readUpgradeAnswer(t, c)
}

// readRest reads what arrives on c within a short while.
func readRest(c net.Conn) string {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return string(out)
		}
	}
}

// send writes one request frame and returns its stream id.
func (l *testLink) send(t *testing.T, tenant string, access identity.Level, method, target, body string) uint64 {
	t.Helper()
	id := l.nextID
	l.nextID++
	f, err := link.AppendRequest(nil, id, &link.Request{Tenant: []byte(tenant), Access: uint8(access), Method: []byte(method), Target: []byte(target), Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.c.Write(f); err != nil {
		t.Fatal(err)
	}
	return id
}

// answer reads one answer frame and parses the HTTP answer it carries.
func (l *testLink) answer(t *testing.T) (id uint64, status int, body string) {
	t.Helper()
	typ, id, p := readFrame(t, l.c)
	if typ != link.FrameAnswer {
		t.Fatalf("frame type %d, want an answer", typ)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(p))), nil)
	if err != nil {
		t.Fatalf("the answer frame's HTTP answer: %v in %q", err, p)
	}
	var sb strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&sb)
	return id, resp.StatusCode, sb.String()
}

func startGatewayMode(t *testing.T, prepare func(*Server)) *testServer {
	t.Helper()
	return serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t)}, prepare)
}

// The upgrade is refused, in the specification's shape, without the
// secret, outside gateway mode, and without the Upgrade header.
func TestGatewayLinkUpgradeRefusals(t *testing.T) {
	gw := startGatewayMode(t, nil)
	none := startServer(t, engine.Config{})
	for _, c := range []struct {
		what, addr, secret, code string
		status                   int
	}{
		{"no secret", gw.addr, "", codeUnauthorized, 401},
		{"wrong secret", gw.addr, "nope", codeUnauthorized, 401},
		{"mode none", none.addr, gwTestSecret, codeNoRoute, 404},
	} {
		resp, l := dialLink(t, c.addr, c.secret)
		if l != nil || resp.StatusCode != c.status {
			t.Fatalf("%s: %d, want %d", c.what, resp.StatusCode, c.status)
		}
		if code := errorCode(t, resp); code != c.code {
			t.Fatalf("%s: code %q, want %q", c.what, code, c.code)
		}
	}
	// Without the Upgrade header it is an ordinary request, refused 400.
	c, _ := net.Dial("tcp", gw.addr)
	defer c.Close()
	c.Write([]byte("GET /api/v1/system/gateway-link HTTP/1.1\r\nHost: b\r\nX-Queen-Gateway-Secret: " + gwTestSecret + "\r\n\r\n"))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || errorCode(t, resp) != codeSystemBadRequest {
		t.Fatalf("no Upgrade header: %d, want 400 %s", resp.StatusCode, codeSystemBadRequest)
	}
}

// Push, pop and ack on a link are served as the tenant the frame names;
// answers come back by stream, in any order: a pop that parks is answered
// after requests sent behind it.
func TestGatewayLinkServesFramesOutOfOrder(t *testing.T) {
	ts := startGatewayMode(t, nil)
	_, l := dialLink(t, ts.addr, gwTestSecret)
	if l == nil {
		t.Fatal("upgrade refused")
	}
	waitUntil(t, "the link counted", func() bool { return ts.s.gatewayLinks.Load() == 1 })
	popID := l.send(t, "acme", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue=q&wait=true&timeout=5000", "")
	waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
	listID := l.send(t, "acme", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue=other", "")
	if id, status, _ := l.answer(t); id != listID || status != 204 && status != 200 {
		t.Fatalf("first answer: stream %d status %d, want the second pop's (%d), served while the first waits", id, status, listID)
	}
	pushID := l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"hi"}]}`)
	got := map[uint64]string{}
	for range 2 {
		id, status, body := l.answer(t)
		got[id] = fmt.Sprint(status, " ", body)
	}
	if a := got[pushID]; !strings.HasPrefix(a, "201 ") {
		t.Fatalf("the push's answer: %q, want 201", a)
	}
	if a := got[popID]; !strings.HasPrefix(a, "200 ") || !strings.Contains(a, `"hi"`) {
		t.Fatalf("the parked pop's answer: %q, want 200 with the message", a)
	}
	// The ack of the delivered message, by id, on the link.
	var pop struct{ Messages []struct{ ID string } }
	json.Unmarshal([]byte(strings.TrimPrefix(got[popID], "200 ")), &pop)
	if len(pop.Messages) != 1 {
		t.Fatalf("the pop's messages: %+v", pop)
	}
	l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/ack", `{"queue":"q","acks":[{"id":"`+pop.Messages[0].ID+`"}]}`)
	if _, status, body := l.answer(t); status != 200 || !strings.Contains(body, "acked") {
		t.Fatalf("ack on the link: %d %s, want 200 acked", status, body)
	}
	// The queues are tenant acme's.
	if qs := ts.e.Queues("acme", nil); len(qs) != 2 {
		t.Fatalf("acme's queues: %+v, want q and other", qs)
	}
	if qs := ts.e.Queues(identity.DefaultTenant, nil); len(qs) != 0 {
		t.Fatalf("the default tenant's queues: %+v, want none", qs)
	}
}

// The gates after identity apply to link requests: the access level, the
// grant, the kill switch (D7).
func TestGatewayLinkRequestsPassTheGates(t *testing.T) {
	ts := serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t), RequireGrant: true}, nil)
	ts.s.setGrant("granted", &store.Grant{Tenant: "granted"})
	_, l := dialLink(t, ts.addr, gwTestSecret)
	push := `{"queue":"q","messages":[{"payload":1}]}`
	for _, c := range []struct {
		what, tenant string
		level        identity.Level
		status       int
		code         string
	}{
		{"no grant", "ungranted", identity.ReadWrite, 403, codeFeatureGated},
		{"read-only pushes", "granted", identity.ReadOnly, 403, codeForbidden},
		{"granted", "granted", identity.ReadWrite, 201, ""},
		{"an empty tenant", "", identity.ReadWrite, 401, codeUnauthorized},
		{"a control character in the tenant", "a\x01b", identity.ReadWrite, 401, codeUnauthorized},
	} {
		l.send(t, c.tenant, c.level, "POST", "/api/v1/ephemeral/push", push)
		_, status, body := l.answer(t)
		if status != c.status || (c.code != "" && !strings.Contains(body, `"code":"`+c.code+`"`)) {
			t.Fatalf("%s: %d %s, want %d %s", c.what, status, body, c.status, c.code)
		}
	}
	// A route the link does not carry is 404.
	l.send(t, "granted", identity.Admin, "GET", "/api/v1/ephemeral/queues", "")
	if _, status, body := l.answer(t); status != 404 || !strings.Contains(body, codeNoRoute) {
		t.Fatalf("listing on a link: %d %s, want 404 %s", status, body, codeNoRoute)
	}
	ts.s.paused.Store(true)
	l.send(t, "granted", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push)
	if _, status, body := l.answer(t); status != 503 || !strings.Contains(body, codeDisabled) {
		t.Fatalf("kill switch: %d %s, want 503 %s", status, body, codeDisabled)
	}
}

// A cancel frame, and the link's closing, let a parked pop go without
// leasing what arrives later (D13).
func TestGatewayLinkCancelAndCloseUnparkPops(t *testing.T) {
	ts := startGatewayMode(t, nil)
	for _, how := range []string{"cancel", "close"} {
		_, l := dialLink(t, ts.addr, gwTestSecret)
		queue := "q-" + how
		id := l.send(t, "acme", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue="+queue+"&wait=true&timeout=30000", "")
		waitUntil(t, how+": the pop parked", func() bool { return parkedPops(ts.e) == 1 })
		if how == "cancel" {
			l.c.Write(link.AppendHeader(nil, link.FrameCancel, id, 0))
		} else {
			l.c.Close()
		}
		waitUntil(t, how+": the pop unparked", func() bool { return parkedPops(ts.e) == 0 })
		pushN(t, ts.addr, queue, 1, true)
		a := gwDo(t, ts.addr, "GET", "/api/v1/ephemeral/pop?queue="+queue, "", true)
		wantDelivered(t, how+": a pop after", a, 1)
	}
}

// errorCode is the code field of a refusal's JSON body.
func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e struct{ Code string }
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("the refusal's body: %v", err)
	}
	return e.Code
}

// On a cell member, a link frame lands like a client's request: a queue
// this member owns is served here; one the peer owns is relayed to it on
// the member's own link, carrying the frame's tenant and level, and the
// owner's answer comes back on the gateway's stream byte for byte. An
// owner that refuses the stream is 503 ephemeral_forward_failed, nothing
// done; an answer lost after the relay sent the request is a refuse frame
// RefuseLost (the gateway closes its client's connection, as the member
// closes a client's own); a cancel frame cancels the relayed call at the
// owner. The stand-ins of relayed frames are taken back.
func TestGatewayLinkOnACellMemberRelays(t *testing.T) {
	o := startOwner(t)
	rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	ts := serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t)}, func(s *Server) {
		s.AttachCell(rc, RelayOptions{Secret: testSecret})
		s.cell.m = twoMembers(o.addr)
	})
	_, l := dialLink(t, ts.addr, gwTestSecret)
	if l == nil {
		t.Fatal("a cell member refused the link")
	}
	v := ts.s.cell.m.View()
	queueOwnedBy := func(owner string) string {
		for i := 0; i < 1000; i++ {
			q := fmt.Sprintf("q%d", i)
			if m, ok := v.Owner("acme", q); ok && m.ID == owner {
				return q
			}
		}
		t.Fatal("no queue of acme owned by " + owner)
		return ""
	}
	mine, theirs := queueOwnedBy(selfAddr), queueOwnedBy(o.addr)
	push := func(q string) string { return `{"queue":"` + q + `","messages":[{"payload":1}]}` }

	// Owned here: served on the member.
	l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push(mine))
	if _, status, body := l.answer(t); status != 201 {
		t.Fatalf("a push to a queue this member owns: %d %s", status, body)
	}

	// Owned by the peer: relayed, answered.
	id := l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push(theirs))
	owner := o.link(t)
	relayed := func() (uint64, link.Request) {
		t.Helper()
		typ, rid, p := readFrame(t, owner)
		for typ == link.FramePing {
			typ, rid, p = readFrame(t, owner)
		}
		var rq link.Request
		if typ != link.FrameRequest || link.DecodeRequest(p, &rq) != nil {
			t.Fatalf("frame type %d at the owner, want a request", typ)
		}
		return rid, rq
	}
	rid, rq := relayed()
	if string(rq.Tenant) != "acme" || identity.Level(rq.Access) != identity.ReadWrite || string(rq.Body) != push(theirs) {
		t.Fatalf("relayed tenant %q level %d body %q", rq.Tenant, rq.Access, rq.Body)
	}
	answer := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":1}"
	owner.Write(append(link.AppendHeader(nil, link.FrameAnswer, rid, len(answer)), answer...))
	typ, gid, p := readFrame(t, l.c)
	if typ != link.FrameAnswer || gid != id || string(p) != answer {
		t.Fatalf("the gateway got frame %d stream %d %q; want the owner's answer on stream %d", typ, gid, p, id)
	}

	// Refused by the owner before it served it: 503, nothing done.
	id = l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push(theirs))
	rid, _ = relayed()
	owner.Write(append(link.AppendHeader(nil, link.FrameRefuse, rid, 1), link.RefuseBusy))
	if gid, status, body := l.answer(t); gid != id || status != 503 || !strings.Contains(body, `"code":"`+codeForwardFailed+`"`) {
		t.Fatalf("a refused relay: stream %d %d %s, want %d 503 %s", gid, status, body, id, codeForwardFailed)
	}

	// Served, but its answer lost: RefuseLost on the gateway's stream.
	id = l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push(theirs))
	rid, _ = relayed()
	owner.Write(append(link.AppendHeader(nil, link.FrameRefuse, rid, 1), link.RefuseTooLarge))
	typ, gid, p = readFrame(t, l.c)
	if typ != link.FrameRefuse || gid != id || len(p) != 1 || p[0] != link.RefuseLost {
		t.Fatalf("a lost relayed answer: frame %d stream %d %v, want a refuse (lost) of %d", typ, gid, p, id)
	}

	// A waiting pop relayed, then cancelled by the gateway: cancelled at
	// the owner.
	id = l.send(t, "acme", identity.ReadWrite, "GET", "/api/v1/ephemeral/pop?queue="+theirs+"&wait=true&timeout=10000", "")
	rid, _ = relayed()
	l.c.Write(link.AppendHeader(nil, link.FrameCancel, id, 0))
	typ, cid, _ := readFrame(t, owner)
	for typ == link.FramePing {
		typ, cid, _ = readFrame(t, owner)
	}
	if typ != link.FrameCancel || cid != rid {
		t.Fatalf("frame %d stream %d at the owner, want a cancel of %d", typ, cid, rid)
	}

	// Relayed frames take their stand-ins back.
	made := func() int {
		n := make(chan int, 1)
		ts.s.loops.Range(func(loop gnet.EventLoop, ls *loopState) bool {
			_ = loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				n <- ls.standInsMade
				return nil
			}))
			return false
		})
		return <-n
	}
	before := made()
	for range 20 {
		id := l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", push(theirs))
		rid, _ := relayed()
		owner.Write(append(link.AppendHeader(nil, link.FrameAnswer, rid, len(answer)), answer...))
		if gid, status, _ := l.answer(t); gid != id || status != 201 {
			t.Fatalf("relayed push: stream %d status %d", gid, status)
		}
	}
	if after := made(); after != before {
		t.Fatalf("20 relayed frames made %d stand-ins, want none", after-before)
	}
}

// A stand-in whose pop parked is taken back once that pop is answered or
// let go, however it ends: completed on the link's loop (a push on the
// link), completed elsewhere (its timeout, answered by AsyncWrite) or
// cancelled. A steady request/reply through a gateway parks a pop for
// nearly every message, and a stand-in made for each (a conn and its
// buffers grown again) was most of the broker's allocation behind it.
func TestGatewayLinkReusesParkedStandIns(t *testing.T) {
	ts := startGatewayMode(t, nil)
	_, l := dialLink(t, ts.addr, gwTestSecret)
	if l == nil {
		t.Fatal("upgrade refused")
	}
	pop := "/api/v1/ephemeral/pop?queue=q&wait=true&timeout="
	cycle := func(how string) {
		switch how {
		case "pushed":
			popID := l.send(t, "acme", identity.ReadWrite, "GET", pop+"5000&autoAck=true", "")
			waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
			l.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`)
			got := map[uint64]int{}
			for range 2 {
				id, status, _ := l.answer(t)
				got[id] = status
			}
			if got[popID] != 200 {
				t.Fatalf("the parked pop: %v, want 200", got)
			}
		case "timed out":
			l.send(t, "acme", identity.ReadWrite, "GET", pop+"1", "")
			if _, status, body := l.answer(t); status != 200 || !strings.Contains(body, `"messages":[]`) {
				t.Fatalf("a timed-out pop: %d %s, want 200 with no messages", status, body)
			}
		case "cancelled":
			id := l.send(t, "acme", identity.ReadWrite, "GET", pop+"5000", "")
			waitUntil(t, "the pop parked", func() bool { return parkedPops(ts.e) == 1 })
			l.c.Write(link.AppendHeader(nil, link.FrameCancel, id, 0))
			waitUntil(t, "the pop let go", func() bool { return parkedPops(ts.e) == 0 })
		}
	}
	made := func() int { // read on the loop, which alone writes it
		n := make(chan int, 1)
		ts.s.loops.Range(func(loop gnet.EventLoop, ls *loopState) bool {
			_ = loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				n <- ls.standInsMade
				return nil
			}))
			return false // one loop (startGatewayMode)
		})
		return <-n
	}
	for _, how := range []string{"pushed", "timed out", "cancelled"} {
		cycle(how)
		before := made()
		for range 50 {
			cycle(how)
		}
		if after := made(); after != before {
			t.Errorf("%s: 50 parked pops made %d stand-ins, want none (taken back and lent again)", how, after-before)
		}
	}
}
