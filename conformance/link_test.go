package conformance

// The link (docs/link.md) against HTTP. A client link is written here from
// docs/link.md alone: the upgrade, and frames encoded and decoded by hand
// (nothing of the broker's or the SDKs' is imported). The differential
// tests send the same requests, in the same order, over HTTP to one broker
// and over a link to another started alike, and require the same status,
// the same headers a route sets (Content-Type, Retry-After, Allow,
// X-Queen-Delivered) and the same body, byte for byte. The one thing two
// fresh brokers differ in is their incarnation, which message ids carry
// (D6): each side's is written as {INC} in what is sent and compared.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// Frame types and refusal reasons, as docs/link.md names them.
const (
	frameRequest = 1
	frameAnswer  = 2
	frameCancel  = 3
	frameRefuse  = 4
	framePing    = 5
	framePong    = 6
	frameToken   = 7
)

// rawLink is a client link spoken to by hand.
type rawLink struct {
	t    testing.TB
	c    net.Conn
	br   *bufio.Reader
	next uint64 // the next stream id
}

// upgradeLink sends the upgrade with extra header lines ("Name: value")
// and returns the answer, and the link on 101.
func (b *broker) upgradeLink(t testing.TB, lines ...string) (rawReply, *rawLink) {
	t.Helper()
	rc := b.dial(t)
	rc.send(httpReq("GET", "/api/v1/ephemeral/link", "", append([]string{"Connection: Upgrade", "Upgrade: queen-link/1"}, lines...)...))
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		t.Fatalf("reading the upgrade's answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	r := rawReply{status: resp.StatusCode, proto: resp.Proto, header: resp.Header, body: body}
	if resp.StatusCode != 101 {
		return r, nil
	}
	if resp.Header.Get("Upgrade") != "queen-link/1" || !strings.EqualFold(resp.Header.Get("Connection"), "Upgrade") {
		t.Fatalf("101 with Upgrade %q, Connection %q", resp.Header.Get("Upgrade"), resp.Header.Get("Connection"))
	}
	return r, &rawLink{t: t, c: rc.c, br: rc.br}
}

// openLink upgrades and requires 101.
func (b *broker) openLink(t testing.TB, lines ...string) *rawLink {
	t.Helper()
	r, l := b.upgradeLink(t, lines...)
	if l == nil {
		t.Fatalf("upgrade refused: %s", r)
	}
	return l
}

// linkFrame is a frame: the 13-byte header, then the payload.
func linkFrame(typ byte, id uint64, payload []byte) []byte {
	f := make([]byte, 13, 13+len(payload))
	binary.BigEndian.PutUint32(f[0:4], uint32(len(payload)))
	f[4] = typ
	binary.BigEndian.PutUint64(f[5:13], id)
	return append(f, payload...)
}

// linkRequest is a request frame's payload on a client link: no tenant, no
// access level, the method, the target, no header lines, the body.
func linkRequest(method, target, body string) []byte {
	p := []byte{0, 0, 0, byte(len(method))}
	p = append(p, method...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(target)))
	p = append(p, target...)
	p = binary.BigEndian.AppendUint32(p, 0)
	return append(p, body...)
}

// write writes bytes to the link.
func (l *rawLink) write(b []byte) {
	l.t.Helper()
	_ = l.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := l.c.Write(b); err != nil {
		l.t.Fatalf("writing to the link: %v", err)
	}
}

// request sends one request frame and returns its stream id.
func (l *rawLink) request(method, target, body string) uint64 {
	l.t.Helper()
	id := l.next
	l.next++
	l.write(linkFrame(frameRequest, id, linkRequest(method, target, body)))
	return id
}

// readFrame reads one frame within d.
func (l *rawLink) readFrame(d time.Duration) (typ byte, id uint64, payload []byte, err error) {
	_ = l.c.SetReadDeadline(time.Now().Add(d))
	var h [13]byte
	if _, err = io.ReadFull(l.br, h[:]); err != nil {
		return 0, 0, nil, err
	}
	payload = make([]byte, binary.BigEndian.Uint32(h[0:4]))
	if _, err = io.ReadFull(l.br, payload); err != nil {
		return 0, 0, nil, err
	}
	return h[4], binary.BigEndian.Uint64(h[5:13]), payload, nil
}

// answer reads the next frame, which must be an answer, and parses the
// HTTP answer it carries: exactly one, nothing after its body.
func (l *rawLink) answer() (uint64, rawReply) {
	l.t.Helper()
	typ, id, p, err := l.readFrame(15 * time.Second)
	if err != nil {
		l.t.Fatalf("reading a frame: %v", err)
	}
	if typ != frameAnswer {
		l.t.Fatalf("frame type %d on stream %d (%q), want an answer", typ, id, p)
	}
	return id, parseAnswer(l.t, p)
}

// parseAnswer parses an answer frame's payload.
func parseAnswer(t testing.TB, p []byte) rawReply {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(p))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("an answer frame's HTTP answer: %v in %q", err, p)
	}
	body, _ := io.ReadAll(resp.Body)
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the answer's body in its frame: %q", br.Buffered(), p)
	}
	if _, ok := resp.Header["Connection"]; ok {
		t.Fatalf("an answer on a link carries Connection: %q", resp.Header["Connection"])
	}
	return rawReply{status: resp.StatusCode, proto: resp.Proto, header: resp.Header, body: body}
}

// do sends one request and reads its answer, which must come on its stream.
func (l *rawLink) do(method, target, body string) rawReply {
	l.t.Helper()
	id := l.request(method, target, body)
	got, r := l.answer()
	if got != id {
		l.t.Fatalf("answer on stream %d, want %d", got, id)
	}
	return r
}

// expectClosed requires the broker to close the link within d, with nothing
// more sent.
func (l *rawLink) expectClosed(d time.Duration) {
	l.t.Helper()
	_ = l.c.SetReadDeadline(time.Now().Add(d))
	n, err := l.br.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case n > 0:
		l.t.Fatal("expected the link closed, got more bytes")
	case err == nil || errorsAs(err, &ne) && ne.Timeout():
		l.t.Fatalf("expected the link closed within %v: %v", d, err)
	}
}

func errorsAs(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}

// ---------------------------------------------------------------------------
// The differential

// pair is a broker spoken to over HTTP and its twin spoken to over a link.
type pair struct {
	h, l       *broker
	hc         *rawConn
	lk         *rawLink
	hInc, lInc string
	ident      []string // the HTTP requests' identity header lines
}

// newPair starts two brokers with env and opens an HTTP connection to one
// and a link to the other, both with the identity header lines.
func newPair(t *testing.T, env map[string]string, ident ...string) *pair {
	t.Helper()
	p := &pair{ident: ident}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.h = startBroker(t, env) }()
	go func() { defer wg.Done(); p.l = startBroker(t, env) }()
	wg.Wait()
	if p.h == nil || p.l == nil {
		t.FailNow()
	}
	p.hc = p.h.dial(t)
	p.lk = p.l.openLink(t, ident...)
	p.hInc, p.lInc = p.h.health(t).Incarnation, p.l.health(t).Incarnation
	return p
}

// step sends method target body over both, compares the answers and
// returns the HTTP one.
func (p *pair) step(t *testing.T, method, target, body string) rawReply {
	t.Helper()
	p.hc.send(httpReq(method, strings.ReplaceAll(target, "{INC}", p.hInc), strings.ReplaceAll(body, "{INC}", p.hInc), p.ident...))
	h := p.hc.read()
	l := p.lk.do(method, strings.ReplaceAll(target, "{INC}", p.lInc), strings.ReplaceAll(body, "{INC}", p.lInc))
	sameAnswer(t, fmt.Sprintf("%s %s %.80s", method, target, body), h, p.hInc, l, p.lInc)
	return h
}

// both runs an HTTP request (a system route) on each broker.
func (p *pair) both(t *testing.T, method, path, body string, headers ...string) {
	t.Helper()
	for _, b := range []*broker{p.h, p.l} {
		if r := b.doH(t, method, path, body, headers...); r.Status != 200 {
			t.Fatalf("%s %s: %s", method, path, r)
		}
	}
}

// sameAnswer requires the link's answer l to be the HTTP answer h: the
// status, the headers a route sets and the body, byte for byte once each
// broker's incarnation is written {INC}.
func sameAnswer(t *testing.T, what string, h rawReply, hInc string, l rawReply, lInc string) {
	t.Helper()
	hb := bytes.ReplaceAll(h.body, []byte(hInc), []byte("{INC}"))
	lb := bytes.ReplaceAll(l.body, []byte(lInc), []byte("{INC}"))
	if h.status != l.status || !bytes.Equal(hb, lb) {
		t.Fatalf("%s:\n  HTTP %d %s\n  link %d %s", what, h.status, hb, l.status, lb)
	}
	for _, k := range []string{"Content-Type", "Retry-After", "Allow", "X-Queen-Delivered"} {
		if hv, lv := h.header.Values(k), l.header.Values(k); strings.Join(hv, ",") != strings.Join(lv, ",") {
			t.Fatalf("%s: %s over HTTP %q, over the link %q", what, k, hv, lv)
		}
	}
	if l.proto != "HTTP/1.1" {
		t.Fatalf("%s: the link's answer's status line says %q", what, l.proto)
	}
}

// familySteps is every route of docs/routes.md with the refusals it lists
// for shape, bounds, methods and paths, in an order whose answers are
// deterministic on a fresh broker.
func familySteps() [][3]string {
	long := strings.Repeat("a", 513)
	items := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	const (
		push  = "/api/v1/ephemeral/push"
		pop   = "/api/v1/ephemeral/pop"
		ack   = "/api/v1/ephemeral/ack"
		conf  = "/api/v1/ephemeral/configure"
		reset = "/api/v1/ephemeral/reset"
		queue = "/api/v1/ephemeral/queue/"
		qs    = "/api/v1/ephemeral/queues"
	)
	return [][3]string{
		// configure: the answer echoes the options sent; then refusals.
		{"POST", conf, `{"queue":"c","options":{"maxLength":2,"policy":"reject"}}`},
		{"POST", conf, `{"queue":"c","options":{"maxLength":2, "leaseSeconds":60}}`},
		{"POST", conf, `{"queue":"d"}`},
		{"POST", conf, `{"options":{}}`},
		{"POST", conf, `{"queue":"` + long + `"}`},
		{"POST", conf, `{"queue":"q\n"}`},
		{"POST", conf, `{"queue":"q","option":{}}`},
		{"POST", conf, `{"queue":"q","options":[]}`},
		{"POST", conf, `{"queue":"q","options":{"ttlSeconds":1.5}}`},
		{"POST", conf, `{"queue":"q","options":{"maxLength":0}}`},
		{"POST", conf, `{"queue":"q","options":{"policy":"dropNewest"}}`},
		{"POST", conf, `{"queue":"q","options":{"nope":1}}`},
		{"POST", conf, `{"queue":"q","options":{"windowBuffer":{"ms":1,"count":1,"size":1}}}`},
		// push: accepted, full, and every shape refusal.
		{"POST", push, `{"queue":"c","messages":[{"payload":{"n":1}},{"payload":null}]}`},
		{"POST", push, `{"queue":"c","messages":[{"payload":3}]}`},
		{"POST", push, `{"queue":"p","partition":"x","messages":[{"payload":"a"},{"payload":[1,2]}]}`},
		{"POST", push, `{"queue":`},
		{"POST", push, ``},
		{"POST", push, `[1]`},
		{"POST", push, `{"messages":[{"payload":1}]}`},
		{"POST", push, `{"queue":7,"messages":[]}`},
		{"POST", push, `{"queue":"","messages":[]}`},
		{"POST", push, `{"queue":"` + long + `","messages":[]}`},
		{"POST", push, `{"queue":"a\u0001b","messages":[]}`},
		{"POST", push, "{\"queue\":\"a\x7fb\",\"messages\":[]}"},
		{"POST", push, `{"queue":"q","partition":"` + long + `","messages":[]}`},
		{"POST", push, `{"queue":"q"}`},
		{"POST", push, `{"queue":"q","messages":{"payload":1}}`},
		{"POST", push, `{"queue":"q","messages":[1]}`},
		{"POST", push, `{"queue":"q","messages":[{}]}`},
		{"POST", push, `{"queue":"q","messages":[{"payload":1,"transactionId":"x"}]}`},
		{"POST", push, `{"queue":"q","messages":[],"tenant":"t"}`},
		{"POST", push, `{"queue":"q","messages":[` + items(10001, `{"payload":1}`) + `]}`},
		// pop: what was pushed, nothing, a wait that times out, refusals.
		{"GET", pop + "?queue=c&batch=10", ""},
		{"GET", pop + "?queue=p&partition=x&autoAck=true", ""},
		{"GET", pop + "?queue=p&group=g&batch=5", ""},
		{"GET", pop + "?queue=empty", ""},
		{"GET", pop + "?queue=empty&wait=true&timeout=50", ""},
		{"GET", pop + "?batch=1", ""},
		{"GET", pop + "?queue=", ""},
		{"GET", pop + "?queue=" + long, ""},
		{"GET", pop + "?queue=a%01b", ""},
		{"GET", pop + "?queue=q&partition=%7F", ""},
		{"GET", pop + "?queue=q&group=%C2%85", ""},
		{"GET", pop + "?queue=q&batch=0", ""},
		{"GET", pop + "?queue=q&batch=ten", ""},
		{"GET", pop + "?queue=q&timeout=-5", ""},
		{"GET", pop + "?queue=q&wait=yes", ""},
		{"GET", pop + "?queue=q&autoAck=2", ""},
		// ack: the ids popped above (c's are leased), unknown and stale
		// ids, refusals.
		{"POST", ack, `{"queue":"c","acks":[{"id":"e:{INC}:Default:0"},{"id":"e:{INC}:Default:1","status":"retry"},{"id":"nope"},{"id":""}]}`},
		{"POST", ack, `{"queue":"p","group":"g","acks":[{"id":"e:{INC}:x:1","status":"failed","error":"boom"}]}`},
		{"POST", ack, `{"queue":"c","acks":[{"id":"e:000000000000:Default:0"}]}`},
		{"POST", ack, `nope`},
		{"POST", ack, `{"acks":[]}`},
		{"POST", ack, `{"queue":"q"}`},
		{"POST", ack, `{"queue":"q","acks":"e:1:p:0"}`},
		{"POST", ack, `{"queue":"q","acks":[{"status":"completed"}]}`},
		{"POST", ack, `{"queue":"q","acks":[{"id":41}]}`},
		{"POST", ack, `{"queue":"q","acks":[{"id":"x","status":"done"}]}`},
		{"POST", ack, `{"queue":"q","acks":[{"id":"x","partition":"p"}]}`},
		{"POST", ack, `{"queue":"q","group":"g\u001f","acks":[]}`},
		{"POST", ack, `{"queue":"q","acks":[` + items(10001, `{"id":"x"}`) + `]}`},
		// The reads: the listing, depths, the depth 404, refusals.
		{"GET", qs, ""},
		{"GET", qs + "/c/depth", ""},
		{"GET", qs + "/p/depth?group=g", ""},
		{"GET", qs + "/nosuch/depth", ""},
		{"GET", qs + "//depth", ""},
		{"GET", qs + "/" + long + "/depth", ""},
		{"GET", qs + "/a%7F/depth", ""},
		{"GET", qs + "/q/depth?group=%01", ""},
		// reset and delete, twice each, and refusals.
		{"POST", reset, `{"queue":"c"}`},
		{"POST", reset, `{"queue":"c"}`},
		{"POST", reset, `{"queue":"nosuch"}`},
		{"POST", reset, `{}`},
		{"POST", reset, `{"queue":"q","group":"g"}`},
		{"DELETE", queue + "c", ""},
		{"DELETE", queue + "c", ""},
		{"DELETE", queue + "p", ""},
		{"DELETE", queue, ""},
		{"DELETE", queue + long, ""},
		{"DELETE", queue + "a%01", ""},
		{"GET", qs, ""},
		// Methods a route does not take, paths that are none.
		{"GET", push, ""},
		{"POST", pop + "?queue=q", ""},
		{"GET", ack, ""},
		{"DELETE", conf, ""},
		{"GET", reset, ""},
		{"GET", queue + "d", ""},
		{"POST", qs, `{}`},
		{"DELETE", qs + "/d/depth", ""},
		{"GET", "/api/v1/ephemeral/nosuch", ""},
		{"GET", "/api/v1/ephemeral", ""},
		{"POST", "/api/v1/ephemeral/push/extra", `{}`},
		// the cell's view read (D19): a single broker's answer, at once,
		// after a timeout, and its refusals.
		{"GET", "/api/v1/ephemeral/cell", ""},
		{"GET", "/api/v1/ephemeral/cell?after=0&timeout=20", ""},
		{"GET", "/api/v1/ephemeral/cell?after=7", ""},
		{"GET", "/api/v1/ephemeral/cell?after=x", ""},
		{"GET", "/api/v1/ephemeral/cell?timeout=1&timeout=2", ""},
		{"POST", "/api/v1/ephemeral/cell", `{}`},
	}
}

// TestLinkDifferential: every route and refusal, over HTTP and over a link
// (mode none), then the queue bounds, the rate, the tenant's allowance and
// the kill switch, each set alike on both brokers over HTTP.
func TestLinkDifferential(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	for _, s := range familySteps() {
		r := p.step(t, s[0], s[1], s[2])
		if strings.Contains(s[2], "e:{INC}:Default:0") && !strings.Contains(string(r.body), `"outcome":"acked"`) {
			t.Fatalf("the ack of a popped id: %s", r) // the ids sent are each broker's own
		}
	}

	// A pop that parks, answered by a push: over HTTP on a connection of its
	// own, over the link on its stream, the push on the same link.
	const popW = "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=10000"
	hp := p.h.dial(t)
	hp.send(httpReq("GET", popW, ""))
	wid := p.lk.request("GET", popW, "")
	brokertest.Eventually(t, 5*time.Second, "both pops parked", func() bool {
		return p.h.gauge(t, "queen_ephemeral_parked_pops") == 1 && p.l.gauge(t, "queen_ephemeral_parked_pops") == 1
	})
	p.hc.send(httpReq("POST", "/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":"wake"}]}`))
	hPush := p.hc.read()
	pid := p.lk.request("POST", "/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":"wake"}]}`)
	got := map[uint64]rawReply{}
	for range 2 {
		id, r := p.lk.answer()
		got[id] = r
	}
	sameAnswer(t, "the push that wakes", hPush, p.hInc, got[pid], p.lInc)
	sameAnswer(t, "the parked pop", hp.read(), p.hInc, got[wid], p.lInc)

	// Queue bounds and the rate (a grant's messagesPerSecond of 1: the
	// first push spends the bucket, the next is refused with Retry-After).
	p.step(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"full","options":{"maxLength":1}}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"full","messages":[{"payload":1}]}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"full","messages":[{"payload":2}]}`).wantErr(t, 429, "queue_full")
	p.both(t, "PUT", "/api/v1/system/ephemeral/grants/default", `{"messagesPerSecond":1}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"rate","messages":[{"payload":1},{"payload":2},{"payload":3}]}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"rate","messages":[{"payload":4}]}`).wantErr(t, 429, "rate_limited")
	p.both(t, "PUT", "/api/v1/system/ephemeral/grants/default", `{"maxQueues":1}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"one-too-many","messages":[{"payload":1}]}`).wantErr(t, 403, "ephemeral_quota_exceeded")
	p.step(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"another"}`).wantErr(t, 403, "ephemeral_quota_exceeded")
	p.both(t, "DELETE", "/api/v1/system/ephemeral/grants/default", "")

	// The kill switch: every route 503 ephemeral_disabled with Retry-After;
	// then served again, on the same link.
	p.both(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":7}`)
	for _, s := range familySteps()[:40] {
		r := p.step(t, s[0], s[1], s[2])
		r.wantErr(t, 503, "ephemeral_disabled")
		if r.header.Get("Retry-After") != "7" {
			t.Fatalf("paused: Retry-After %q", r.header.Get("Retry-After"))
		}
	}
	p.both(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`)
	p.step(t, "GET", "/api/v1/ephemeral/queues", "")
	p.step(t, "GET", "/api/v1/ephemeral/pop?queue=full", "")
}

// TestLinkDifferentialBudget: the broker total's refusal, 503
// ephemeral_unavailable, and a message over its queue's maxBytes, over a
// link as over HTTP.
func TestLinkDifferentialBudget(t *testing.T) {
	t.Parallel()
	p := newPair(t, map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": "1048576"})
	big := `{"queue":"b%d","messages":[{"payload":"` + strings.Repeat("x", 200<<10) + `"}]}`
	p.step(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"small","options":{"maxBytes":100}}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"small","messages":[{"payload":"`+strings.Repeat("y", 200)+`"}]}`)
	var last rawReply
	for i := range 8 {
		last = p.step(t, "POST", "/api/v1/ephemeral/push", fmt.Sprintf(big, i))
	}
	last.wantErr(t, 503, "ephemeral_unavailable")
}

// gauge reads an unlabelled gauge from the broker's /metrics.
func (b *broker) gauge(t testing.TB, name string) float64 {
	t.Helper()
	r := b.doH(t, "GET", "/metrics", nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		var v float64
		if strings.HasPrefix(line, name+" ") {
			if _, err := fmt.Sscan(strings.TrimPrefix(line, name+" "), &v); err == nil {
				return v
			}
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// TestLinkDifferentialJWT: in mode jwt the identity is the upgrade's, its
// level is judged per frame: a read-only token's link is refused what its
// HTTP requests are (403 forbidden) and served the reads; the upgrade
// itself is refused as any request of the family without a valid token.
func TestLinkDifferentialJWT(t *testing.T) {
	t.Parallel()
	secret := []byte("link-conformance-secret")
	env := map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": string(secret)}
	tok := func(role string) string {
		return sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"tenant": "acme", "role": role, "exp": time.Now().Add(time.Hour).Unix()})
	}
	ro := "Authorization: Bearer " + tok("read-only")
	p := newPair(t, env, ro)
	for _, s := range familySteps() {
		r := p.step(t, s[0], s[1], s[2])
		if s[0] != "GET" && r.status != 405 && r.status != 404 {
			r.wantErr(t, 403, "forbidden") // every change needs more than read-only
		}
	}
	// The upgrade's identity refusals are the family's.
	for _, lines := range [][]string{nil, {"Authorization: Bearer not-a-token"}, {"Authorization: Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another"), jwt.MapClaims{"tenant": "acme", "role": "admin", "exp": time.Now().Add(time.Hour).Unix()})}} {
		up, l := p.l.upgradeLink(t, lines...)
		if l != nil {
			t.Fatalf("upgrade with %q: 101", lines)
		}
		h := p.h.dial(t)
		h.send(httpReq("GET", "/api/v1/ephemeral/queues", "", lines...))
		hr := h.read()
		if up.status != 401 || hr.status != 401 || !bytes.Equal(up.body, hr.body) {
			t.Fatalf("upgrade with %q: %s; GET /queues: %s", lines, up, hr)
		}
		checkErrBody(t, up.body, "unauthorized")
	}
	// A read-write token's link is served what the read-only one was refused.
	rw := p.l.openLink(t, "Authorization: Bearer "+tok("read-write"))
	rw.do("POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`).want(t, 201, nil)
}

// TestLinkDifferentialGateway: in mode gateway with grants required, the
// tenant of the upgrade's gateway headers is refused 403 feature_gated per
// frame until it has a grant, then held to the grant's allowance and rate.
func TestLinkDifferentialGateway(t *testing.T) {
	t.Parallel()
	env := map[string]string{"QUEEN_AUTH_MODE": "gateway", "QUEEN_GATEWAY_SECRET": gwSecret, "QUEEN_EPHEMERAL_REQUIRE_GRANT": "true", "QUEEN_OPERATOR_TENANT": "ops"}
	ident := []string{"X-Queen-Gateway-Secret: " + gwSecret, "X-Queen-Tenant: t", "X-Queen-Access: read-write"}
	p := newPair(t, env, ident...)
	for _, s := range familySteps()[:20] {
		p.step(t, s[0], s[1], s[2]).wantErr(t, 403, "feature_gated")
	}
	p.both(t, "PUT", "/api/v1/system/ephemeral/grants/t", `{"maxQueues":2,"messagesPerSecond":1}`, gw("ops", "admin")...)
	for _, s := range familySteps() {
		p.step(t, s[0], s[1], s[2])
	}
	// Without the secret, or without a tenant, the upgrade is refused as
	// any request of the family is.
	for _, lines := range [][]string{{"X-Queen-Tenant: t", "X-Queen-Access: admin"}, {"X-Queen-Gateway-Secret: " + gwSecret, "X-Queen-Access: admin"}, {"X-Queen-Gateway-Secret: " + gwSecret, "X-Queen-Tenant: t"}} {
		up, l := p.l.upgradeLink(t, lines...)
		h := p.h.dial(t)
		h.send(httpReq("GET", "/api/v1/ephemeral/queues", "", lines...))
		hr := h.read()
		if l != nil || up.status != hr.status || !bytes.Equal(up.body, hr.body) {
			t.Fatalf("upgrade with %q: %s; GET /queues: %s", lines, up, hr)
		}
	}
}

// ---------------------------------------------------------------------------
// Lifecycle: the kill switch, SIGTERM and SIGKILL with pops parked on a link,
// and 10,000 of them on one link.

// parkOnBoth parks a pop of queue on an HTTP connection of its own to p.h
// and on a stream of p.lk, and waits until both are parked.
func (p *pair) parkOnBoth(t *testing.T, queue string) (*rawConn, uint64) {
	t.Helper()
	target := "/api/v1/ephemeral/pop?queue=" + queue + "&wait=true&timeout=30000"
	hc := p.h.dial(t)
	hc.send(httpReq("GET", target, "", p.ident...))
	id := p.lk.request("GET", target, "")
	brokertest.Eventually(t, 5*time.Second, "both pops parked", func() bool {
		return p.h.gauge(t, "queen_ephemeral_parked_pops") == 1 && p.l.gauge(t, "queen_ephemeral_parked_pops") == 1
	})
	return hc, id
}

// TestLinkKillSwitchAnswersParkedPops: pausing answers a pop parked on a
// link as it answers one parked on an HTTP connection (200, no messages),
// the link stays open, its next requests are refused 503
// ephemeral_disabled, and once resumed it is served again.
func TestLinkKillSwitchAnswersParkedPops(t *testing.T) {
	t.Parallel()
	p := newPair(t, nil)
	hc, id := p.parkOnBoth(t, "w")
	p.both(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":3}`)
	got, l := p.lk.answer()
	if got != id {
		t.Fatalf("answer on stream %d, want the parked pop's %d", got, id)
	}
	h := hc.read()
	sameAnswer(t, "the parked pop when paused", h, p.hInc, l, p.lInc)
	if h.status != 200 || string(h.body) != `{"queue":"w","messages":[]}` {
		t.Fatalf("the parked pop when paused: %s", h)
	}
	p.step(t, "GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=30000", "").wantErr(t, 503, "ephemeral_disabled")
	p.both(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`)
	p.step(t, "POST", "/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":1}]}`).want(t, 201, nil)
}

// TestLinkShutdownAnswersParkedPops: SIGTERM answers the pops parked on a
// link as those parked on HTTP connections (200, no messages: the broker
// releases its waiters before it stops), then the link closes.
func TestLinkShutdownAnswersParkedPops(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	hc := b.dial(t)
	hc.send(httpReq("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=30000", ""))
	l := b.openLink(t)
	const n = 50
	for range n {
		l.request("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=30000", "")
	}
	brokertest.Eventually(t, 5*time.Second, "the pops parked", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == n+1 })
	b.stop(t)
	if h := hc.read(); h.status != 200 || string(h.body) != `{"queue":"w","messages":[]}` {
		t.Fatalf("the HTTP pop at SIGTERM: %s", h)
	}
	seen := map[uint64]bool{}
	for range n {
		id, r := l.answer()
		if seen[id] || id >= n || r.status != 200 || string(r.body) != `{"queue":"w","messages":[]}` {
			t.Fatalf("stream %d (seen before: %v) at SIGTERM: %s", id, seen[id], r)
		}
		seen[id] = true
	}
	l.expectClosed(5 * time.Second)
}

// TestLinkKill9WithCallsInFlight: a broker killed while a client streams
// pushes on a link, with pops parked on it: the link ends (EOF or a reset,
// not a silence), nothing is answered twice, and nothing is answered on a
// stream that was not asked. The pushes left unanswered may have been
// applied (docs/link.md): a client reports them so and sends nothing again.
func TestLinkKill9WithCallsInFlight(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	l := b.openLink(t)
	const pops, killAfter = 100, 500
	var out []byte
	for range pops {
		out = append(out, linkFrame(frameRequest, l.next, linkRequest("GET", "/api/v1/ephemeral/pop?queue=idle&wait=true&timeout=30000", ""))...)
		l.next++
	}
	l.write(out)
	brokertest.Eventually(t, 5*time.Second, "the pops parked", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == pops })
	// The writer sends pushes in batches of 100 until the link fails; sent
	// is the number of streams written so far.
	var mu sync.Mutex
	sent := uint64(pops)
	go func() {
		for i := 0; ; i++ {
			mu.Lock()
			from := sent
			mu.Unlock()
			var batch []byte
			for k := range uint64(100) {
				batch = append(batch, linkFrame(frameRequest, from+k, linkRequest("POST", "/api/v1/ephemeral/push", fmt.Sprintf(`{"queue":"q","messages":[{"payload":%d}]}`, i)))...)
			}
			mu.Lock()
			sent += 100 // counted before the write: an answer may come before it returns
			mu.Unlock()
			if _, err := l.c.Write(batch); err != nil {
				return
			}
		}
	}()
	seen := map[uint64]bool{}
	killed := false
	for {
		typ, id, payload, err := l.readFrame(10 * time.Second)
		if err != nil {
			var ne net.Error
			if errorsAs(err, &ne) && ne.Timeout() {
				t.Fatalf("the link stayed silent and open after the broker was killed (killed: %v)", killed)
			}
			break
		}
		mu.Lock()
		asked := id >= pops && id < sent
		mu.Unlock()
		if typ != frameAnswer || !asked || seen[id] {
			t.Fatalf("frame type %d on stream %d (asked: %v, answered before: %v): %q", typ, id, asked, seen[id], payload)
		}
		seen[id] = true
		if r := parseAnswer(t, payload); r.status != 201 {
			t.Fatalf("stream %d: %s", id, r)
		}
		if len(seen) == killAfter {
			b.kill(t) // the answers already sent stay readable
			killed = true
		}
	}
	if !killed {
		t.Fatalf("the link ended after %d answers, before the kill", len(seen))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d pushes sent, %d answered; the others end unanswered (may have been applied)", sent-pops, len(seen))
}

// TestLinkTenThousandParkedPops: 10,000 pops parked on one link, then one
// push of 10,000 messages: every pop is answered once, on its own stream,
// with one message, and each message goes to exactly one pop.
func TestLinkTenThousandParkedPops(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	l := b.openLink(t)
	const n = 10000
	var out []byte
	for range n {
		out = append(out, linkFrame(frameRequest, l.next, linkRequest("GET", "/api/v1/ephemeral/pop?queue=many&autoAck=true&wait=true&timeout=120000", ""))...)
		l.next++
	}
	l.write(out)
	brokertest.Eventually(t, 20*time.Second, "10,000 pops parked", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == n })
	if links := b.gauge(t, "queen_ephemeral_client_links"); links != 1 {
		t.Fatalf("queen_ephemeral_client_links %v, want 1", links)
	}
	b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"many","messages":[`+strings.TrimSuffix(strings.Repeat(`{"payload":7},`, n), ",")+`]}`).want(t, 201, nil)
	streams, ids := map[uint64]bool{}, map[string]bool{}
	for range n {
		id, r := l.answer()
		var pr popResp
		r.want(t, 200, &pr)
		if streams[id] || len(pr.Messages) != 1 || ids[pr.Messages[0].ID] {
			t.Fatalf("stream %d (answered before: %v): %s", id, streams[id], r)
		}
		streams[id], ids[pr.Messages[0].ID] = true, true
	}
	if parked := b.gauge(t, "queen_ephemeral_parked_pops"); parked != 0 {
		t.Fatalf("%v pops still parked", parked)
	}
	if d := b.depth(t, "many", ""); d.Pending != 0 {
		t.Fatalf("pending %d after 10,000 pops took 10,000 messages", d.Pending)
	}
}

// ---------------------------------------------------------------------------
// The upgrade and the frames other than requests (docs/link.md)

// TestLinkUpgradeAndFrames: the upgrade's refusals; frames sent in the
// upgrade's own write; ping and pong; a cancel that lets a parked pop go
// with no answer; a token frame outside mode jwt; a frame of a type the
// broker does not take, which closes the link.
func TestLinkUpgradeAndFrames(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	// A version the broker does not speak, or none: 426 naming those it does.
	for _, up := range []string{"Upgrade: queen-link/2", "Upgrade: websocket", ""} {
		rc := b.dial(t)
		lines := []string{"Connection: Upgrade"}
		if up != "" {
			lines = append(lines, up)
		}
		rc.send(httpReq("GET", "/api/v1/ephemeral/link", "", lines...))
		r := rc.read()
		r.wantErr(t, 426, "ephemeral_bad_request")
		if r.header.Get("Upgrade") != "queen-link/1" {
			t.Fatalf("426 with Upgrade %q, want queen-link/1", r.header.Get("Upgrade"))
		}
		// The connection is still HTTP.
		rc.send(httpReq("GET", "/api/v1/ephemeral/queues", ""))
		rc.read().want(t, 200, nil)
	}
	rc := b.dial(t)
	rc.send(httpReq("POST", "/api/v1/ephemeral/link", "", "Connection: Upgrade", "Upgrade: queen-link/1"))
	rc.read().wantErr(t, 405, "method_not_allowed")

	// Frames in the upgrade's own write are read once it is answered.
	c := b.dial(t)
	up := httpReq("GET", "/api/v1/ephemeral/link", "", "Connection: Upgrade", "Upgrade: queen-link/2, queen-link/1")
	c.send(up + string(linkFrame(frameRequest, 0, linkRequest("POST", "/api/v1/ephemeral/push", `{"queue":"f","messages":[{"payload":1}]}`))))
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "queen-link/1" {
		t.Fatalf("the upgrade offering queen-link/2 and /1: %v %v", resp, err)
	}
	l := &rawLink{t: t, c: c.c, br: c.br, next: 1}
	if id, r := l.answer(); id != 0 || r.status != 201 {
		t.Fatalf("the push sent with the upgrade: stream %d, %s", id, r)
	}

	// Ping: a pong on stream 0.
	l.write(linkFrame(framePing, 0, nil))
	if typ, id, p, err := l.readFrame(10 * time.Second); err != nil || typ != framePong || id != 0 || len(p) != 0 {
		t.Fatalf("the answer to a ping: type %d stream %d %q %v", typ, id, p, err)
	}

	// A cancel lets a parked pop go; no answer follows, and the next
	// message is not taken by it.
	pop := l.request("GET", "/api/v1/ephemeral/pop?queue=idle&wait=true&timeout=30000", "")
	brokertest.Eventually(t, 5*time.Second, "the pop parked", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == 1 })
	l.write(linkFrame(frameCancel, pop, nil))
	brokertest.Eventually(t, 5*time.Second, "the pop let go", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == 0 })
	l.do("POST", "/api/v1/ephemeral/push", `{"queue":"idle","messages":[{"payload":1}]}`).want(t, 201, nil)
	var d depthResp
	l.do("GET", "/api/v1/ephemeral/queues/idle/depth", "").want(t, 200, &d)
	if d.Pending != 1 {
		t.Fatalf("pending %d after the cancelled pop and one push, want 1", d.Pending)
	}
	// A cancel of a stream already answered is ignored.
	l.write(linkFrame(frameCancel, 0, nil))

	// A token frame outside mode jwt: 400 on its stream.
	tok := l.next
	l.next++
	l.write(linkFrame(frameToken, tok, []byte("Bearer x")))
	if id, r := l.answer(); id != tok {
		t.Fatalf("the token's answer on stream %d, want %d", id, tok)
	} else {
		r.wantErr(t, 400, "ephemeral_bad_request")
	}

	// A frame of a type only the broker sends: the link closes.
	l.write(linkFrame(frameAnswer, l.next, []byte("HTTP/1.1 200 OK\r\n\r\n")))
	l.expectClosed(10 * time.Second)
	brokertest.Eventually(t, 5*time.Second, "the link uncounted", func() bool { return b.gauge(t, "queen_ephemeral_client_links") == 0 })
}

// TestLinkStreamsBound: 65,536 requests may wait on one link; one more is
// refused "busy" (reason 1) on its stream, not served; once one is let go
// (a cancel), the link takes a request again.
func TestLinkStreamsBound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	l := b.openLink(t)
	const bound = 65536
	var out []byte
	for range bound {
		out = append(out, linkFrame(frameRequest, l.next, linkRequest("GET", "/api/v1/ephemeral/pop?queue=idle&wait=true&timeout=120000", ""))...)
		l.next++
	}
	l.write(out)
	brokertest.Eventually(t, 30*time.Second, "65,536 pops parked", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == bound })
	over := l.request("POST", "/api/v1/ephemeral/push", `{"queue":"other","messages":[{"payload":1}]}`)
	typ, id, p, err := l.readFrame(10 * time.Second)
	if err != nil || typ != frameRefuse || id != over || len(p) != 1 || p[0] != 1 {
		t.Fatalf("the request past the bound: type %d stream %d %q %v; want a refuse frame, reason busy (1)", typ, id, p, err)
	}
	// Not served: the queue it named was not made.
	b.do(t, "GET", "/api/v1/ephemeral/queues/other/depth", nil).wantErr(t, 404, "ephemeral_queue_not_found")
	l.write(linkFrame(frameCancel, 0, nil))
	brokertest.Eventually(t, 5*time.Second, "one pop let go", func() bool { return b.gauge(t, "queen_ephemeral_parked_pops") == bound-1 })
	if r := l.do("POST", "/api/v1/ephemeral/push", `{"queue":"other","messages":[{"payload":1}]}`); r.status != 201 {
		t.Fatalf("a push once below the bound: %s", r)
	}
}
