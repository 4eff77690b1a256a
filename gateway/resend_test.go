package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// The gateway never sends a request again once it was written to a broker
// (docs/gateway.md, "When a broker fails with a request written"): the
// broker may have served it, and only a request that was never written may
// move to another connection. Each request written before the broker's
// connection or link failed ends its client's connection (a lost answer)
// after the answers before it; none is answered 503 (which the SDKs send
// again), none is left without an end, and none reaches the broker twice.
//
// A counting broker holds six pipelined pushes, from five clients (one of
// them pipelining two), on one connection or link, answers the first
// `answered` of them and drops the connection without answering the rest.
// It counts every request it receives, on any connection, by queue name.
// The client of the last request written has no other request lost, so a
// gateway that forgets that request (i < sent-1 in upConn.failed) leaves
// it open and unanswered, and one that moves it to a new connection shows
// it twice at the broker.
func TestLostAnswersNotSentAgain(t *testing.T) {
	for _, link := range []bool{false, true} {
		for _, answered := range []int{0, 2} {
			name := fmt.Sprintf("http/answered-%d", answered)
			if link {
				name = fmt.Sprintf("link/answered-%d", answered)
			}
			t.Run(name, func(t *testing.T) { lostAnswersNotSentAgain(t, link, answered) })
		}
	}
}

// heldPushes is how many pushes the counting broker holds before it drops
// the connection; the clients below send them in this order.
const heldPushes = 6

func lostAnswersNotSentAgain(t *testing.T, link bool, answered int) {
	fb := startCountingBroker(t, heldPushes, answered)
	g := startGatewayTo(t, fb.url, !link)
	addr := g.Addr().String()
	if link {
		// The first requests open the link (over HTTP meanwhile).
		deadline := time.Now().Add(10 * time.Second)
		for g.links.Load() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the link never opened")
			}
			if status, body, _ := call(t, "POST", "http://"+addr+"/api/v1/ephemeral/push", pushJSON("warm")); status != 201 {
				t.Fatalf("a push opening the link: %d %s", status, body)
			}
		}
	}

	// Five clients, six pushes: held-2 and held-3 pipelined by one client.
	// Each is sent once the broker holds the ones before it, so that the
	// broker's order is the order below.
	clients := [][]string{{"held-0"}, {"held-1"}, {"held-2", "held-3"}, {"held-4"}, {"held-5"}}
	conns := make([]net.Conn, len(clients))
	for i, queues := range clients {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
		var reqs strings.Builder
		for _, q := range queues {
			reqs.WriteString(pushRequest(q))
		}
		if _, err := io.WriteString(nc, reqs.String()); err != nil {
			t.Fatal(err)
		}
		for _, q := range queues {
			select {
			case got := <-fb.held:
				if got != q {
					t.Fatalf("the broker held %s, want %s", got, q)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the broker never received %s", q)
			}
		}
	}

	// The answered pushes come back 201; every other client's connection
	// closes with nothing on it: not a 503, and not never.
	next, lostClients := 0, 0 // next: the broker's index of the push read next
	for i, queues := range clients {
		nc := conns[i]
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(nc)
		lost := false
		for _, q := range queues {
			if next++; next > answered {
				lost = true
				continue
			}
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("client %d: the answer to %s: %v", i, q, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 201 {
				t.Fatalf("client %d: %s, answered by the broker: %d, want 201", i, q, resp.StatusCode)
			}
		}
		if !lost {
			continue
		}
		lostClients++
		rest, err := io.ReadAll(r)
		if len(rest) != 0 {
			t.Fatalf("client %d (%v, written to the broker before it dropped the connection) got %q; want nothing and its connection closed, a lost answer", i, queues, rest)
		}
		if err != nil {
			t.Fatalf("client %d (%v, written to the broker before it dropped the connection): %v; want its connection closed, a lost answer", i, queues, err)
		}
	}
	if n := g.m.lost.Get(); n != uint64(lostClients) {
		t.Fatalf("queen_gateway_answers_lost_total %d, want %d (one per client closed)", n, lostClients)
	}

	// A barrier: a request sent now leaves after anything the failure moved
	// to another connection, so once it is answered the broker has
	// received all the gateway will ever send it of the held pushes.
	if status, body, _ := call(t, "POST", "http://"+addr+"/api/v1/ephemeral/push", pushJSON("after")); status != 201 {
		t.Fatalf("a push after the drop: %d %s, want 201", status, body)
	}
	got := fb.counts()
	for i := range heldPushes {
		q := "held-" + strconv.Itoa(i)
		if got[q] != 1 {
			t.Errorf("the broker received %s %d times, want once (counts %v)", q, got[q], got)
		}
	}
	if got["after"] != 1 {
		t.Errorf("the broker received the push after the drop %d times, want once", got["after"])
	}
}

func pushJSON(queue string) string {
	return `{"queue":"` + queue + `","messages":[{"payload":1}]}`
}

func pushRequest(queue string) string {
	body := pushJSON(queue)
	return "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// countingBroker answers pushes 201 over HTTP or, after the gateway-link
// upgrade, in answer frames, and counts every request it receives by the
// queue its body names. The first connection or link that carries pushes
// to queues named held-* holds them unanswered; once it holds hold of
// them it answers the first answer of them and drops the connection. Every
// request after that is answered at once.
type countingBroker struct {
	url          string
	hold, answer int
	held         chan string // each held push's queue, as it arrives

	mu      sync.Mutex
	got     map[string]int
	holding bool // a connection holds held-* pushes
	dropped bool
}

func startCountingBroker(t *testing.T, hold, answer int) *countingBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fb := &countingBroker{url: "http://" + ln.Addr().String(), hold: hold, answer: answer, held: make(chan string, hold), got: map[string]int{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fb.serve(c)
		}
	}()
	return fb
}

func (fb *countingBroker) counts() map[string]int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	out := make(map[string]int, len(fb.got))
	for k, v := range fb.got {
		out[k] = v
	}
	return out
}

// receive counts a request to queue q and says whether this connection
// holds it (mine: this connection is the one holding).
func (fb *countingBroker) receive(q string, mine *bool) bool {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.got[q]++
	if !strings.HasPrefix(q, "held-") || fb.dropped {
		return false
	}
	if !*mine {
		if fb.holding {
			return false // another connection holds: not expected, answered
		}
		fb.holding, *mine = true, true
	}
	fb.held <- q
	return true
}

// drop marks the holding connection dropped.
func (fb *countingBroker) drop() {
	fb.mu.Lock()
	fb.dropped = true
	fb.mu.Unlock()
}

func queueOf(body []byte) string {
	var b struct {
		Queue string `json:"queue"`
	}
	_ = json.Unmarshal(body, &b)
	return b.Queue
}

func (fb *countingBroker) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	mine, held := false, 0
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		if strings.HasPrefix(req.Header.Get("Upgrade"), "queen-link") { // the gateway asks for queen-link/1
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: queen-link\r\n\r\n")
			fb.serveLink(c, r)
			return
		}
		if !fb.receive(queueOf(body), &mine) {
			if _, err := io.WriteString(c, fakePushAnswer); err != nil {
				return
			}
			continue
		}
		if held++; held == fb.hold {
			// In order: the first answer of those held, then the drop.
			_, _ = io.WriteString(c, strings.Repeat(fakePushAnswer, fb.answer))
			fb.drop()
			return
		}
	}
}

func (fb *countingBroker) serveLink(c net.Conn, r *bufio.Reader) {
	hdr := make([]byte, link.HeaderLen)
	mine := false
	var held []uint64
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		typ, id, n := link.ParseHeader(hdr)
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			return
		}
		if typ != link.FrameRequest {
			continue
		}
		var rq link.Request
		if link.DecodeRequest(p, &rq) != nil {
			return
		}
		answer := func(id uint64) error {
			f := link.AppendHeader(nil, link.FrameAnswer, id, len(fakePushAnswer))
			_, err := c.Write(append(f, fakePushAnswer...))
			return err
		}
		if !fb.receive(queueOf(rq.Body), &mine) {
			if answer(id) != nil {
				return
			}
			continue
		}
		if held = append(held, id); len(held) == fb.hold {
			for _, id := range held[:fb.answer] {
				_ = answer(id)
			}
			fb.drop()
			return
		}
	}
}
