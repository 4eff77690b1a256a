package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// A request written to a broker whose connection then fails before the
// answer may have been served: the gateway must not answer it 503
// ephemeral_forward_failed (which says nothing was done, and which the SDKs
// send again: a push would be applied twice). Its client gets the answers
// before it and then a closed connection, a lost answer, as from the broker
// itself. Over HTTP connections and over the link, against a fake broker
// that answers every push but one whose body names the queue "lose", on
// which it closes the connection.
func TestAnswerLostClosesTheClient(t *testing.T) {
	for _, link := range []bool{false, true} {
		name := "http"
		if link {
			name = "link"
		}
		t.Run(name, func(t *testing.T) {
			fb := startFakeBroker(t)
			g := startGatewayTo(t, fb.url, !link)
			if link {
				// The first requests open the link (over HTTP meanwhile).
				deadline := time.Now().Add(5 * time.Second)
				for g.links.Load() == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the link never opened")
					}
					call(t, "POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", `{"queue":"keep","messages":[{"payload":1}]}`)
					time.Sleep(5 * time.Millisecond)
				}
			}
			c, err := net.Dial("tcp", g.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			push := func(queue string) string {
				body := `{"queue":"` + queue + `","messages":[{"payload":1}]}`
				return "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: " +
					strconv.Itoa(len(body)) + "\r\n\r\n" + body
			}
			// Pipelined: answered, lost, and one behind the lost one.
			if _, err := io.WriteString(c, push("keep")+push("lose")+push("keep")); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			r := bufio.NewReader(c)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("the first push's answer: %v", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != 201 {
				t.Fatalf("the first push: %d, want 201", resp.StatusCode)
			}
			rest, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("after the lost answer: %v, want the connection closed", err)
			}
			if len(rest) != 0 {
				t.Fatalf("after the lost answer the client got %q, want nothing and the connection closed", rest)
			}
			if fb.lost.Load() == 0 {
				t.Fatal("the fake broker never saw the push to lose")
			}
			if n := g.m.lost.Get(); n != 1 {
				t.Fatalf("queen_gateway_answers_lost_total %d, want 1", n)
			}
			// A lost push meters nothing: what it held of the allowance is
			// given back.
			ts := g.tenant("default")
			brokertest.Eventually(t, 10*time.Second, "the lost pushes' items given back", func() bool { return ts.pending.Load() == 0 })
		})
	}
}

// startGatewayTo starts an in-process gateway in mode none (tenant default,
// on a plan with ephemeral) in front of upstream.
func startGatewayTo(t *testing.T, upstream string, noLink bool) *Gateway {
	t.Helper()
	cat := newMemCatalog()
	_ = cat.PutPlan(context.Background(), catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}})
	_ = cat.PutTenant(context.Background(), catalog.Tenant{Name: "default", Plan: "pro"})
	auth, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{
		Addr: "127.0.0.1:0", Upstreams: []string{upstream}, Secret: testSecret, Auth: auth, Catalog: cat,
		PollInterval: 20 * time.Millisecond, FlushInterval: 20 * time.Millisecond, Loops: 1, NoLink: noLink,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g
}

// fakeBroker answers pushes 201, over HTTP or, after the gateway-link
// upgrade, in answer frames, but closes the connection on a request whose
// body contains "lose" (lost counts them).
type fakeBroker struct {
	url    string
	lost   atomic.Int64
	open   atomic.Int64               // connections open to it now
	dialed atomic.Int64               // connections it accepted
	answer func(target string) string // the answer to a request for target; nil: fakePushAnswer

	mu   sync.Mutex
	seen []string // "http METHOD path" or "link METHOD path" of each request received
}

func (fb *fakeBroker) received(how, method, target string) {
	path, _, _ := strings.Cut(target, "?")
	fb.mu.Lock()
	fb.seen = append(fb.seen, how+" "+method+" "+path)
	fb.mu.Unlock()
}

// requests is what fb received so far.
func (fb *fakeBroker) requests() []string {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return slices.Clone(fb.seen)
}

const fakePushAnswer = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

func startFakeBroker(t testing.TB) *fakeBroker {
	t.Helper()
	return startFakeBrokerAnswering(t, nil)
}

// startFakeBrokerAnswering is startFakeBroker answering a request for
// target answer(target) instead of fakePushAnswer.
func startFakeBrokerAnswering(t testing.TB, answer func(target string) string) *fakeBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fb := &fakeBroker{url: "http://" + ln.Addr().String(), answer: answer}
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

func (fb *fakeBroker) serve(c net.Conn) {
	fb.dialed.Add(1)
	fb.open.Add(1)
	defer fb.open.Add(-1)
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		if req.Header.Get("Upgrade") == "queen-link/1" {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n")
			fb.serveLink(c, r)
			return
		}
		if strings.Contains(string(body), "lose") {
			fb.lost.Add(1)
			return
		}
		fb.received("http", req.Method, req.URL.RequestURI())
		if _, err := io.WriteString(c, fb.answerTo(req.URL.RequestURI())); err != nil {
			return
		}
	}
}

func (fb *fakeBroker) answerTo(target string) string {
	if fb.answer == nil {
		return fakePushAnswer
	}
	return fb.answer(target)
}

func (fb *fakeBroker) serveLink(c net.Conn, r *bufio.Reader) {
	hdr := make([]byte, link.HeaderLen)
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
		if strings.Contains(string(rq.Body), "lose") {
			fb.lost.Add(1)
			return
		}
		fb.received("link", string(rq.Method), string(rq.Target))
		a := fb.answerTo(string(rq.Target))
		f := link.AppendHeader(nil, link.FrameAnswer, id, len(a))
		if _, err := c.Write(append(f, a...)); err != nil {
			return
		}
	}
}

// A pop's deliveries are the broker's X-Queen-Delivered; without it (a
// broker not in gateway mode) the gateway counts the answer's messages,
// chunked or not, and only of a 200 (docs/gateway.md, "Metering").
func TestPopDeliveriesCountedWithoutTheHeader(t *testing.T) {
	broker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("queue") {
		case "chunked":
			_, _ = io.WriteString(w, `{"queue":"chunked","messages":[{"id":"a","payload":{"messages":[1,2]}},`)
			w.(http.Flusher).Flush() // the rest in a chunk of its own
			_, _ = io.WriteString(w, `{"id":"b","payload":2}]}`)
		case "whole":
			w.Header().Set("Content-Length", "60")
			_, _ = io.WriteString(w, `{"queue":"whole","messages":[{"id":"c","payload":"],[,"}]}`+strings.Repeat(" ", 60-len(`{"queue":"whole","messages":[{"id":"c","payload":"],[,"}]}`)))
		default:
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"queue":"x","messages":[{},{},{}]}`)
		}
	}))
	defer broker.Close()
	g := startGatewayTo(t, broker.URL, true)
	base := "http://" + g.Addr().String()
	for _, q := range []string{"chunked", "whole", "missing"} {
		call(t, "GET", base+"/api/v1/ephemeral/pop?queue="+q, "")
	}
	ts := g.tenant("default")
	if d := ts.delivs.Load(); d != 3 {
		t.Fatalf("deliveries metered: %d, want 3 (2 chunked, 1 whole, none of the 404)", d)
	}

	// The same on the link to the broker.
	const whole = `{"queue":"whole","messages":[{"id":"c","payload":1},{"id":"d","payload":"],[,"}]}`
	fb := startFakeBrokerAnswering(t, func(target string) string {
		switch {
		case strings.Contains(target, "queue=whole"):
			return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(whole)) + "\r\n\r\n" + whole
		case strings.Contains(target, "queue=missing"):
			return "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 35\r\n\r\n" + `{"queue":"x","messages":[{},{},{}]}`
		}
		return fakePushAnswer
	})
	g = startGatewayTo(t, fb.url, false)
	base = "http://" + g.Addr().String()
	brokertest.Eventually(t, 10*time.Second, "the link to the broker open", func() bool {
		call(t, "POST", base+"/api/v1/ephemeral/push", `{"queue":"warm","messages":[{"payload":1}]}`) // opens it
		return g.links.Load() == 1
	})
	for _, q := range []string{"whole", "missing"} {
		call(t, "GET", base+"/api/v1/ephemeral/pop?queue="+q, "")
	}
	if d := g.tenant("default").delivs.Load(); d != 2 {
		t.Fatalf("deliveries metered on the link: %d, want 2 (the 200's two messages, none of the 404)", d)
	}
}
