package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
)

// The relay on the event loops (relaylink.go), against a stand-in owner: a
// relay.Server whose connections the test holds (Adopt) and reads or
// answers frame by frame, or leaves silent. The real brokers' side is in
// the conformance package (TestCell...).

var testSecret = []byte("relay-link-test-secret")

// fixedView is a membership whose view never changes.
type fixedView struct{ v *cell.View }

func (f fixedView) View() *cell.View { return f.v }

// owner is a member that the server under test relays to: every
// connection it accepts (past the handshake) is handed to the test.
type owner struct {
	addr  string
	conns chan net.Conn
}

func startOwner(t *testing.T) *owner {
	t.Helper()
	o := &owner{conns: make(chan net.Conn, 8)}
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: func(c net.Conn) { o.conns <- c }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.addr = ln.Addr().String()
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	return o
}

// link waits for the server under test to dial the owner.
func (o *owner) link(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-o.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not dial the owner")
		return nil
	}
}

// readFrame reads one frame from a relay connection.
func readFrame(t *testing.T, c net.Conn) (typ byte, id uint64, payload []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var h [link.HeaderLen]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	typ, id, n := link.ParseHeader(h[:])
	payload = make([]byte, n)
	if _, err := io.ReadFull(c, payload); err != nil {
		t.Fatalf("reading a frame's payload: %v", err)
	}
	return typ, id, payload
}

// selfAddr is the address of the member under test in its views: never
// dialled, since nothing is relayed to oneself.
const selfAddr = "127.0.0.1:1"

// twoMembers is the view, fixed, of a cell of the member under test and
// peer.
func twoMembers(peer string) viewer {
	return fixedView{cell.StaticView(1, selfAddr, []cell.Member{{ID: selfAddr}, {ID: peer}}, false)}
}

// startLanding starts a server that is a member of a cell whose view
// comes from m, relaying with opts.
func startLanding(t testing.TB, m viewer, opts RelayOptions) *testServer {
	t.Helper()
	rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	opts.Secret = testSecret
	return serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 2}, func(s *Server) {
		s.AttachCell(rc, opts)
		s.cell.m = m
	})
}

// queueOf returns a queue name of the default tenant (no identity) that
// the view gives to owner.
func queueOf(t testing.TB, v *cell.View, owner string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		q := fmt.Sprintf("q%d", i)
		if m, ok := v.Owner(identity.DefaultTenant, q); ok && m.ID == owner {
			return q
		}
	}
	t.Fatal("no queue owned by " + owner)
	return ""
}

// sendPush writes a push of one message to queue on a new connection.
func sendPush(t *testing.T, ts *testServer, queue string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	body := `{"queue":"` + queue + `","messages":[{"payload":1}]}`
	fmt.Fprintf(c, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return c
}

// readAnswer reads what the server answers on c: the whole answer, or the
// error that ended the connection (io.EOF: closed without an answer).
func readAnswer(c net.Conn, within time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(within))
	r := bufio.NewReader(c)
	var sb strings.Builder
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if line == "\r\n" {
			break
		}
	}
	head := sb.String()
	var n int
	for _, l := range strings.Split(head, "\r\n") {
		if v, ok := strings.CutPrefix(l, "Content-Length: "); ok {
			fmt.Sscan(v, &n)
		}
	}
	body := make([]byte, n)
	_, err := io.ReadFull(r, body)
	return head + string(body), err
}

// The request frame carries the identity established where the request
// landed and the request itself; the owner's answer comes back byte for
// byte.
func TestRelayCarriesTheRequestAndReturnsTheAnswer(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{})
	q := queueOf(t, ts.s.cell.m.View(), o.addr)
	c := sendPush(t, ts, q)
	lc := o.link(t)
	typ, id, p := readFrame(t, lc)
	if typ != link.FrameRequest {
		t.Fatalf("frame type %d, want a request", typ)
	}
	var rq link.Request
	if err := link.DecodeRequest(p, &rq); err != nil {
		t.Fatal(err)
	}
	if string(rq.Method) != "POST" || string(rq.Target) != "/api/v1/ephemeral/push" ||
		string(rq.Body) != `{"queue":"`+q+`","messages":[{"payload":1}]}` || string(rq.Tenant) != identity.DefaultTenant {
		t.Fatalf("relayed %q %q %q tenant %q", rq.Method, rq.Target, rq.Body, rq.Tenant)
	}
	answer := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":1}"
	frame := link.AppendHeader(nil, link.FrameAnswer, id, len(answer))
	lc.Write(append(frame, answer...))
	got, err := readAnswer(c, 5*time.Second)
	if err != nil || got != answer {
		t.Fatalf("answer %q, %v; want the owner's %q", got, err, answer)
	}
}

// An owner that cannot be reached: 503 ephemeral_forward_failed, nothing
// was sent.
func TestRelayToAnUnreachableOwnerIsRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	ts := startLanding(t, twoMembers(dead), RelayOptions{DialTimeout: time.Second})
	q := queueOf(t, ts.s.cell.m.View(), dead)
	// Two pushes on one connection (one loop): the first dials and fails,
	// the second, within redialAfter, is refused without dialling again.
	c := sendPush(t, ts, q)
	for i := 1; i <= 2; i++ {
		got, err := readAnswer(c, 5*time.Second)
		if err != nil || !strings.HasPrefix(got, "HTTP/1.1 503 ") || !strings.Contains(got, `"code":"ephemeral_forward_failed"`) {
			t.Fatalf("answer %d %q, %v; want 503 ephemeral_forward_failed", i, got, err)
		}
		if i == 1 {
			body := `{"queue":"` + q + `","messages":[{"payload":1}]}`
			fmt.Fprintf(c, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	}
	if ff, lost := ts.s.RelayCounts(); ff != 2 || lost != 0 {
		t.Fatalf("RelayCounts %d forward-failed, %d lost; want 2, 0", ff, lost)
	}
	if d := ts.s.cell.dials.Get(); d != 1 {
		t.Fatalf("%d dials, want 1 (the second push within redialAfter of the failure)", d)
	}
}

// A call past its deadline: the owner may have acted, so the client's
// connection is closed without an answer, and the owner is told to let
// the call go (a cancel frame for its stream).
func TestRelayedCallPastItsDeadlineClosesTheConnection(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{CallDeadline: 200 * time.Millisecond, PingInterval: 50 * time.Millisecond})
	c := sendPush(t, ts, queueOf(t, ts.s.cell.m.View(), o.addr))
	lc := o.link(t)
	_, id, _ := readFrame(t, lc)
	// The owner answers pings but never the call.
	cancelled := make(chan uint64, 1)
	go func() {
		var h [link.HeaderLen]byte
		for {
			if _, err := io.ReadFull(lc, h[:]); err != nil {
				return
			}
			typ, fid, n := link.ParseHeader(h[:])
			io.CopyN(io.Discard, lc, int64(n))
			switch typ {
			case link.FramePing:
				lc.Write(link.AppendHeader(nil, link.FramePong, 0, 0))
			case link.FrameCancel:
				cancelled <- fid
			}
		}
	}()
	start := time.Now()
	got, err := readAnswer(c, 5*time.Second)
	if !errors.Is(err, io.EOF) || got != "" {
		t.Fatalf("got %q, %v; want the connection closed without an answer", got, err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("closed after %v, before the deadline", took)
	}
	select {
	case fid := <-cancelled:
		if fid != id {
			t.Fatalf("cancel for stream %d, want %d", fid, id)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the owner was not told to let the call go")
	}
	if ff, lost := ts.s.RelayCounts(); ff != 0 || lost != 1 {
		t.Fatalf("RelayCounts %d forward-failed, %d lost; want 0, 1", ff, lost)
	}
}

// An owner that goes silent (paused, cut off) fails the link after the ping
// timeout: the call it holds may have been applied, so its client's
// connection is closed; a call made afterwards dials afresh.
func TestSilentOwnerFailsTheLink(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{PingInterval: 50 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	q := queueOf(t, ts.s.cell.m.View(), o.addr)
	c := sendPush(t, ts, q)
	first := o.link(t)
	readFrame(t, first) // the request; nothing is answered, not even pings
	got, err := readAnswer(c, 5*time.Second)
	if !errors.Is(err, io.EOF) || got != "" {
		t.Fatalf("got %q, %v; want the connection closed without an answer", got, err)
	}
	c2 := sendPush(t, ts, q)
	second := o.link(t) // dialled anew
	_, id, _ := readFrame(t, second)
	answer := "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":1}"
	second.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(answer)), answer...))
	if got, err := readAnswer(c2, 5*time.Second); err != nil || got != answer {
		t.Fatalf("after the redial: %q, %v", got, err)
	}
}

// The client going away while its pop is relayed: the owner gets a cancel
// frame for the stream, so a parked pop is let go there.
func TestClientGoneCancelsTheRelayedCall(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{})
	q := queueOf(t, ts.s.cell.m.View(), o.addr)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /api/v1/ephemeral/pop?queue=%s&wait=true&timeout=10000 HTTP/1.1\r\nHost: x\r\n\r\n", q)
	lc := o.link(t)
	typ, id, _ := readFrame(t, lc)
	if typ != link.FrameRequest {
		t.Fatalf("frame type %d", typ)
	}
	c.Close()
	typ, cid, _ := readFrame(t, lc)
	for typ == link.FramePing {
		typ, cid, _ = readFrame(t, lc)
	}
	if typ != link.FrameCancel || cid != id {
		t.Fatalf("frame type %d stream %d, want a cancel of %d", typ, cid, id)
	}
}

// Many calls from many connections on the loops: every one is answered
// with its own answer (stream ids keep them apart) whatever the order the
// owner answers in.
func TestRelayedAnswersFindTheirCalls(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{})
	q := queueOf(t, ts.s.cell.m.View(), o.addr)
	const n = 40
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = sendPush(t, ts, q)
	}
	// Up to one link per loop: gather the calls from whichever link.
	type call struct {
		link net.Conn
		id   uint64
	}
	calls := make(chan call, n)
	go func() {
		for {
			select {
			case l := <-o.conns:
				t.Cleanup(func() { l.Close() })
				go func() {
					var h [link.HeaderLen]byte
					for {
						if _, err := io.ReadFull(l, h[:]); err != nil {
							return
						}
						typ, id, sz := link.ParseHeader(h[:])
						io.CopyN(io.Discard, l, int64(sz))
						if typ == link.FrameRequest {
							calls <- call{l, id}
						}
					}
				}()
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	got := make([]call, 0, n)
	for len(got) < n {
		select {
		case c := <-calls:
			got = append(got, c)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d calls reached the owner", len(got), n)
		}
	}
	// Answer in reverse order, each with a body of its own.
	for i := len(got) - 1; i >= 0; i-- {
		body := fmt.Sprintf(`{"answer":%d}`, i)
		answer := fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		got[i].link.Write(append(link.AppendHeader(nil, link.FrameAnswer, got[i].id, len(answer)), answer...))
	}
	seen := map[string]bool{}
	for i, c := range conns {
		a, err := readAnswer(c, 5*time.Second)
		if err != nil || !strings.HasPrefix(a, "HTTP/1.1 201 ") {
			t.Fatalf("connection %d: %q, %v", i, a, err)
		}
		body := a[strings.Index(a, "\r\n\r\n")+4:]
		if seen[body] {
			t.Fatalf("answer %s given twice", body)
		}
		seen[body] = true
	}
}

// startAccepting starts a cell member whose relay port hands every
// authenticated connection to its loops (AdoptRelayConn), as cmd/queen
// wires it; it returns the relay port's address.
func startAccepting(t *testing.T, opts RelayOptions) string {
	t.Helper()
	return startRelayOwner(t, opts).addr
}

// dialMember passes the relay's handshake to addr, as another member.
func dialMember(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := relay.Dial(addr, testSecret, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosed reads c until the member under test closes it, within d; it
// returns how long that took.
func waitClosed(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("the link was not closed within %v: %v", d, err)
	}
	return time.Since(start)
}

// every writes b to c every d until the test ends or a write fails.
func every(t *testing.T, c net.Conn, d time.Duration, b []byte) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(d):
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}
	}()
}

// A link another member dialled that then goes silent (paused, cut off)
// fails after the ping timeout, as a dialled one does; one that pings is
// kept and answered.
func TestSilentMemberFailsTheAcceptedLink(t *testing.T) {
	addr := startAccepting(t, RelayOptions{PingInterval: 50 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	pinging := dialMember(t, addr)
	every(t, pinging, 50*time.Millisecond, link.AppendHeader(nil, link.FramePing, 0, 0))
	silent := dialMember(t, addr)
	if took := waitClosed(t, silent, 5*time.Second); took < 250*time.Millisecond {
		t.Fatalf("closed after %v, before the ping timeout", took)
	}
	if typ, _, _ := readFrame(t, pinging); typ != link.FramePong {
		t.Fatalf("the pinging member got frame type %d, want a pong", typ)
	}
}

// A link whose frame begins and never completes, a byte dribbled now and
// then so that it is never silent, fails after the frame timeout: the
// bytes of the partial frame are not held longer than that.
func TestStalledFrameFailsTheAcceptedLink(t *testing.T) {
	addr := startAccepting(t, RelayOptions{PingInterval: 50 * time.Millisecond, PingTimeout: 200 * time.Millisecond, FrameTimeout: 400 * time.Millisecond})
	c := dialMember(t, addr)
	head := link.AppendHeader(nil, link.FrameRequest, 1, 64<<20)
	if _, err := c.Write(append(head, make([]byte, 64<<10)...)); err != nil {
		t.Fatal(err)
	}
	every(t, c, 40*time.Millisecond, []byte{0})
	if took := waitClosed(t, c, 5*time.Second); took < 350*time.Millisecond {
		t.Fatalf("closed after %v, before the frame timeout", took)
	}
}

// A frame that stalls inside its header is under the frame timeout too,
// not only the (here much longer) ping timeout.
func TestFrameStalledInItsHeaderFailsTheAcceptedLink(t *testing.T) {
	addr := startAccepting(t, RelayOptions{PingInterval: 50 * time.Millisecond, PingTimeout: time.Minute, FrameTimeout: 300 * time.Millisecond})
	c := dialMember(t, addr)
	if _, err := c.Write(link.AppendHeader(nil, link.FrameRequest, 1, 100)[:5]); err != nil {
		t.Fatal(err)
	}
	// 10 s: the frame timeout, generously, and far short of the ping timeout.
	if took := waitClosed(t, c, 10*time.Second); took < 250*time.Millisecond {
		t.Fatalf("closed after %v, before the frame timeout", took)
	}
}

// A dialled link is pinged every interval even while the owner keeps
// sending (answers to parked pops, here unasked pongs): the owner fails an
// accepted link that has sent it nothing for its ping timeout.
func TestDialledLinkPingsWhileTheOwnerSends(t *testing.T) {
	o := startOwner(t)
	ts := startLanding(t, twoMembers(o.addr), RelayOptions{PingInterval: 100 * time.Millisecond, PingTimeout: 5 * time.Second})
	sendPush(t, ts, queueOf(t, ts.s.cell.m.View(), o.addr))
	lc := o.link(t)
	if typ, _, _ := readFrame(t, lc); typ != link.FrameRequest {
		t.Fatalf("frame type %d, want the request", typ)
	}
	every(t, lc, 20*time.Millisecond, link.AppendHeader(nil, link.FramePong, 0, 0))
	if typ, _, _ := readFrame(t, lc); typ != link.FramePing {
		t.Fatalf("frame type %d, want a ping", typ)
	}
}
