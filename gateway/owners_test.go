package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous/rendezvoustest"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// TestOwnerViewVectors: the gateway's owner of every case of
// cell/testdata/owners.json is the one the file names, whatever order the
// members come in: the gateway, the members and the SDKs cannot disagree
// silently about which member owns a queue.
func TestOwnerViewVectors(t *testing.T) {
	for _, c := range rendezvoustest.Vectors(t) {
		var ms []viewMember
		for i, m := range c.Members {
			ms = append(ms, viewMember{ID: m.ID, URL: "http://127.0.0.1:" + strconv.Itoa(10000+i)})
		}
		// Each member's address is its index in the case's list.
		addr := func(url string) int {
			port, _ := strconv.Atoi(url[strings.LastIndexByte(url, ':')+1:])
			return port - 10000
		}
		reversed := slices.Clone(ms)
		slices.Reverse(reversed)
		for _, order := range [][]viewMember{ms, reversed} {
			v := newOwnerView(1, order, addr)
			if got := v.owner(c.Tenant, []byte(c.Queue)); got < 0 || c.Members[got].ID != c.Owner {
				t.Errorf("(%q, %q) among %v: member %d, want %s", c.Tenant, c.Queue, c.Members, got, c.Owner)
			}
		}
	}
}

// TestOwnerRoutingAllocs: reading a push's or an ack's queue and choosing
// its owner's link allocate nothing per request.
func TestOwnerRoutingAllocs(t *testing.T) {
	g := &Gateway{}
	g.upstreams = make([]upstreamAddr, 3)
	g.nConfigured = 1
	v := newOwnerView(7, []viewMember{{ID: "a:1", URL: "http://a:1"}, {ID: "b:1", URL: "http://b:1"}, {ID: "c:1", URL: "http://c:1"}},
		func(url string) int { return int(url[7] - 'a') })
	g.owners.Store(v)
	ls := &loopState{g: g, links: make([]*linkConn, 3), linkRetryAt: make([]int64, 3)}
	for i := range ls.links {
		ls.links[i] = &linkConn{ls: ls, up: i, state: linkOpen}
	}
	var req wire.Request
	req.Body = []byte(`{"queue":"orders-17","messages":[{"payload":{"n":1}},{"payload":"two"}]}`)
	now := time.Now().UnixNano()
	route := func() {
		g.offerTenant("acme")
		q, items := ls.queueOf(exPush, false, &req, nil)
		if l, how := ls.ownerLink("acme", q, now); l == nil || how != routedOwner || items != 2 {
			t.Fatalf("routed to %v (%d), %d items", l, how, items)
		}
	}
	route()
	if n := testing.AllocsPerRun(1000, route); n != 0 {
		t.Fatalf("%v allocations per routed push, want 0", n)
	}
	var ack wire.Request
	ack.Body = []byte(`{"queue":"orders-17","acks":[{"id":"e:1:Default:0"},{"id":"e:1:Default:1","status":"failed"}]}`)
	routeAck := func() {
		q, _ := ls.queueOf(exOther, true, &ack, nil)
		if l, how := ls.ownerLink("acme", q, now); l == nil || how != routedOwner || string(q) != "orders-17" {
			t.Fatalf("ack of %q routed to %v (%d)", q, l, how)
		}
	}
	routeAck()
	if n := testing.AllocsPerRun(1000, routeAck); n != 0 {
		t.Fatalf("%v allocations per routed ack, want 0", n)
	}
}

// fakeMember answers view reads as a cell member: generation 3 with three
// members at once; after=3 waits for change, then generation 4 without the
// last member; after=4 waits until the read is given up. Tenant "nogrant"
// is refused as a broker refuses a tenant without a grant.
type fakeMember struct {
	srv    *httptest.Server
	change chan struct{}
	mu     sync.Mutex
	reads  []*http.Request
}

func newFakeMember(t *testing.T) *fakeMember {
	f := &fakeMember{change: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reads = append(f.reads, r)
		f.mu.Unlock()
		if r.URL.Path != cellViewPath || r.Header.Get("X-Queen-Gateway-Secret") != testSecret {
			w.WriteHeader(404)
			return
		}
		if r.Header.Get("X-Queen-Tenant") == "nogrant" {
			w.WriteHeader(403)
			_, _ = w.Write([]byte(`{"error":"no grant","code":"feature_gated"}`))
			return
		}
		three := `{"id":"m1:1","url":"` + f.srv.URL + `"},{"id":"m2:1","url":"http://127.0.0.1:9"},{"id":"m3:1"}`
		switch r.URL.Query().Get("after") {
		case "":
			_, _ = w.Write([]byte(`{"generation":3,"tenant":"t","self":"m1:1","members":[` + three + `]}`))
		case "3":
			select {
			case <-f.change:
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write([]byte(`{"generation":4,"tenant":"t","self":"m1:1","members":[` + three[:strings.LastIndexByte(three, ',')] + `]}`))
		default:
			<-r.Context().Done()
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeMember) read(i int) *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i < len(f.reads) {
		return f.reads[i]
	}
	return nil
}

// TestCellWatch: the gateway asks a member for the view as a tenant a loop
// offered, read-only with the gateway secret; a tenant the member refuses
// is dropped for the next one offered; the view maps each member to its
// upstream (a configured one, one learned, none for a member without a
// URL); a waiting read (after=G) brings the next generation; a refresh
// gives the waiting read up and asks at once.
func TestCellWatch(t *testing.T) {
	f := newFakeMember(t)
	auth, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{Upstreams: []string{f.srv.URL}, Secret: testSecret, Auth: auth, Catalog: newMemCatalog()})
	if err != nil {
		t.Fatal(err)
	}
	g.bg.Add(1)
	go g.watchCell()
	t.Cleanup(func() {
		close(g.quit)
		g.bg.Wait()
	})

	brokertest.Eventually(t, 10*time.Second, "the watcher never wanted a tenant", g.watch.wantTenant.Load)
	g.offerTenant("nogrant")
	brokertest.Eventually(t, 10*time.Second, "the refused tenant was not dropped", func() bool { return f.read(0) != nil && g.watch.wantTenant.Load() })
	g.offerTenant("acme")
	brokertest.Eventually(t, 10*time.Second, "no view was published", func() bool { return g.owners.Load() != nil })
	r := f.read(1)
	if r.Header.Get("X-Queen-Tenant") != "acme" || r.Header.Get("X-Queen-Access") != "read-only" || r.URL.RawQuery != "" {
		t.Fatalf("the view read: tenant %q, access %q, query %q", r.Header.Get("X-Queen-Tenant"), r.Header.Get("X-Queen-Access"), r.URL.RawQuery)
	}
	v := g.owners.Load()
	if v.gen != 3 || !slices.Equal(v.ids, []string{"m1:1", "m2:1", "m3:1"}) || !slices.Equal(v.ups, []int{0, 1, -1}) {
		t.Fatalf("view: %+v, want generation 3, m1 at the configured upstream, m2 learned (1), m3 without one", v)
	}
	if a := g.upstreams[1]; a.dial != "127.0.0.1:9" {
		t.Fatalf("the learned address: %+v", a)
	}
	brokertest.Eventually(t, 10*time.Second, "no waiting read", func() bool { return f.read(2) != nil })
	if q := f.read(2).URL.RawQuery; q != "after=3&timeout=10000" {
		t.Fatalf("the waiting read's query: %q", q)
	}
	close(f.change)
	brokertest.Eventually(t, 10*time.Second, "the next generation was not published", func() bool { return g.owners.Load().gen == 4 })
	if v := g.owners.Load(); !slices.Equal(v.ids, []string{"m1:1", "m2:1"}) || !slices.Equal(v.ups, []int{0, 1}) {
		t.Fatalf("view 4: %+v", v)
	}
	brokertest.Eventually(t, 10*time.Second, "no read waiting on generation 4", func() bool { return f.read(3) != nil })
	g.refreshView()
	brokertest.Eventually(t, 10*time.Second, "a refresh did not ask at once", func() bool { return f.read(4) != nil })
	if q := f.read(4).URL.RawQuery; q != "" {
		t.Fatalf("the read a refresh asked for: query %q, want none", q)
	}
}

// TestOwnershipMovedCodes: the answers that make the gateway read the
// cell's view again are a member's owner_moved and ephemeral_forward_failed,
// and no other 503.
func TestOwnershipMovedCodes(t *testing.T) {
	for body, want := range map[string]bool{
		`{"error":"ownership moved","code":"owner_moved"}`:                             true,
		`{"error":"the owner could not be reached","code":"ephemeral_forward_failed"}`: true,
		`{"error":"paused","code":"ephemeral_disabled"}`:                               false,
		`{"error":"full","code":"ephemeral_unavailable"}`:                              false,
	} {
		if got := ownershipMoved([]byte(body)); got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}

// newWatchGateway is a gateway in front of upstreams, not started: its
// watcher is run by the test (watchCell) or its parts called directly.
func newWatchGateway(t *testing.T, logs *syncBuffer, upstreams ...string) *Gateway {
	t.Helper()
	auth, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Upstreams: upstreams, Secret: testSecret, Auth: auth, Catalog: newMemCatalog()}
	if logs != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestViewReadAnswers: what a view read makes of each answer a member may
// give (docs/gateway.md, "Routing to owners"): generation 0 with no
// members, or a 404, is a broker that is not a cell (asked again only after
// notCellRecheck); a cell whose member has not joined yet (a generation,
// no members) is a cell, waited on; 401 and 403 refuse the tenant asked as;
// anything else is a failure (the next configured member is asked).
func TestViewReadAnswers(t *testing.T) {
	for _, c := range []struct {
		status     int
		body       string
		notCell    bool
		gen        uint64
		members    int
		tenantGone bool
		fails      bool
	}{
		{status: 200, body: `{"generation":0,"tenant":"acme","members":[]}`, notCell: true},
		{status: 200, body: `{"generation":0,"tenant":"acme"}`, notCell: true},
		{status: 404, body: `{"error":"not found","code":"not_found"}`, notCell: true},
		{status: 200, body: `{"generation":5,"tenant":"acme","members":[]}`, gen: 5},
		{status: 200, body: `{"generation":7,"tenant":"acme","members":[{"id":"m1:1","url":"http://127.0.0.1:9"},{"id":"m2:1"}]}`, gen: 7, members: 2},
		{status: 401, body: `{"error":"no","code":"unauthorized"}`, tenantGone: true},
		{status: 403, body: `{"error":"no grant","code":"feature_gated"}`, tenantGone: true},
		{status: 503, body: `{"error":"paused","code":"ephemeral_disabled"}`, fails: true},
		{status: 200, body: `{"generation":`, fails: true},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		g := newWatchGateway(t, nil, srv.URL)
		a, poked, err := g.readView(context.Background(), srv.Client(), 0, "acme", 0, false)
		srv.Close()
		switch {
		case poked:
			t.Errorf("%d %s: poked without a refresh", c.status, c.body)
		case c.tenantGone:
			if !errors.Is(err, errViewTenant) {
				t.Errorf("%d %s: %v, want the tenant refused", c.status, c.body, err)
			}
		case c.fails:
			if err == nil || errors.Is(err, errViewTenant) {
				t.Errorf("%d %s: %v, want a failure", c.status, c.body, err)
			}
		case err != nil || a.notCell != c.notCell || a.gen != c.gen || len(a.members) != c.members:
			t.Errorf("%d %s: %+v %v, want not a cell %v, generation %d, %d members", c.status, c.body, a, err, c.notCell, c.gen, c.members)
		}
	}
}

// TestPublishView: a view with members is the loops' view; a later answer
// saying the broker is no cell (or a cell with no member) drops it, so no
// request is routed by a stale view; members the configured upstreams do
// not name are learned at the next free index, up to maxLearned of them,
// the rest reached through the others (-1) with a warning.
func TestPublishView(t *testing.T) {
	var logs syncBuffer
	g := newWatchGateway(t, &logs, "http://127.0.0.1:7000")
	ms := []viewMember{{ID: "m0:1", URL: "http://127.0.0.1:7000"}, {ID: "m1:1", URL: "http://127.0.0.1:7001"}, {ID: "m2:1", URL: "http://127.0.0.1:7002"}}
	g.publishView(viewAnswer{gen: 2, members: ms})
	v := g.owners.Load()
	if v == nil || !slices.Equal(v.ups, []int{0, 1, 2}) {
		t.Fatalf("the view of three members: %+v, want upstreams 0 (configured), 1 and 2 (learned)", v)
	}
	for i, want := range []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"} {
		if got := g.upstreams[i].dial; got != want {
			t.Fatalf("upstream %d dials %q, want %q", i, got, want)
		}
	}
	// How a push to queue q is routed, and the members gauge.
	// (Every member's queues go on its link, the configured member's, at
	// index 0, too.)
	routed := func() (routedHow, string) {
		ls := &loopState{g: g, links: make([]*linkConn, len(g.upstreams)), linkRetryAt: make([]int64, len(g.upstreams))}
		for i := range ls.links {
			ls.links[i] = &linkConn{ls: ls, up: i, state: linkOpen}
		}
		_, how := ls.ownerLink("acme", []byte("q"), time.Now().UnixNano())
		if v := g.owners.Load(); v != nil {
			for i, id := range v.ids {
				q := brokertest.QueueOwnedBy(t, v.ids, "acme", "owned", id)
				if l, how := ls.ownerLink("acme", []byte(q), time.Now().UnixNano()); how != routedOwner || l != ls.links[v.ups[i]] {
					t.Fatalf("a queue of %s (upstream %d): routed %d on %+v, want on its link", id, v.ups[i], how, l)
				}
			}
		}
		var page bytes.Buffer
		g.m.set.WritePrometheus(&page)
		n, _ := unlabelled(page.String(), "queen_gateway_cell_members")
		return how, n
	}
	if how, n := routed(); how != routedOwner || n != "3" {
		t.Fatalf("with the view of three members: routed %d, queen_gateway_cell_members %s; want to its owner, 3", how, n)
	}
	g.publishView(viewAnswer{notCell: true})
	if how, n := routed(); how != routedNone || n != "0" {
		t.Fatalf("after an answer saying not a cell: routed %d, queen_gateway_cell_members %s; want routed by no view, 0", how, n)
	}
	g.publishView(viewAnswer{gen: 3, members: ms})
	g.publishView(viewAnswer{gen: 4})
	if how, n := routed(); how != routedNone || n != "0" {
		t.Fatalf("after a view with no member: routed %d, queen_gateway_cell_members %s; want routed by no view, 0", how, n)
	}

	// 1 configured + maxLearned learned fill every slot: one more member
	// has no upstream.
	g = newWatchGateway(t, &logs, "http://127.0.0.1:7000")
	many := []viewMember{{ID: "c", URL: "http://127.0.0.1:7000"}}
	for i := range maxLearned + 1 {
		many = append(many, viewMember{ID: fmt.Sprintf("m%03d", i), URL: "http://127.0.0.1:" + strconv.Itoa(8000+i)})
	}
	g.publishView(viewAnswer{gen: 5, members: many})
	v = g.owners.Load()
	if v == nil || len(v.ups) != maxLearned+2 {
		t.Fatalf("the view of %d members: %+v", len(many), v)
	}
	for i, up := range v.ups {
		want := i // sorted by id: "c" first, then m000...
		if i == maxLearned+1 {
			want = -1
		}
		if up != want {
			t.Fatalf("member %s at upstream %d, want %d", v.ids[i], up, want)
		}
	}
	if n := strings.Count(logs.String(), "too many cell member addresses learned"); n != 1 {
		t.Fatalf("%d warnings about the member past maxLearned, want 1:\n%s", n, logs.String())
	}
}

// TestRefreshViewIsPaced: an answer saying ownership moved asks for a
// view read at once, but at most every refreshEvery (250 ms): a second one
// sooner asks for nothing.
func TestRefreshViewIsPaced(t *testing.T) {
	g := newWatchGateway(t, nil, "http://127.0.0.1:7000")
	for {
		start := time.Now()
		g.refreshView()
		select {
		case <-g.watch.refresh:
		default:
			t.Fatal("the first refresh asked for no read")
		}
		g.refreshView()
		asked := len(g.watch.refresh) != 0
		if time.Since(start) >= refreshEvery*4/5 {
			// Too slow to tell (a loaded machine): again, a pace later.
			g.watch.lastPoke.Store(0)
			select {
			case <-g.watch.refresh:
			default:
			}
			continue
		}
		if asked {
			t.Fatal("a second refresh within refreshEvery asked for a read again")
		}
		return
	}
}

// TestCellWatchTwoMembers: a view read that fails moves to the next
// configured member; a refresh while a read waits on a member asks that
// same member again at once (no failure, so no move).
func TestCellWatchTwoMembers(t *testing.T) {
	var mu sync.Mutex
	var readsA int
	var queriesB []string
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		readsA++
		mu.Unlock()
		w.WriteHeader(500)
	}))
	t.Cleanup(a.Close)
	var b *httptest.Server
	b = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queriesB = append(queriesB, r.URL.RawQuery)
		mu.Unlock()
		if r.URL.Query().Get("after") != "" {
			<-r.Context().Done() // nothing changes
			return
		}
		_, _ = w.Write([]byte(`{"generation":3,"tenant":"acme","members":[{"id":"a:1","url":"` + a.URL + `"},{"id":"b:1","url":"` + b.URL + `"}]}`))
	}))
	t.Cleanup(b.Close)
	g := newWatchGateway(t, &syncBuffer{}, a.URL, b.URL)
	g.bg.Add(1)
	go g.watchCell()
	t.Cleanup(func() {
		close(g.quit)
		g.bg.Wait()
	})
	brokertest.Eventually(t, 10*time.Second, "the watcher never wanted a tenant", g.watch.wantTenant.Load)
	g.offerTenant("acme")
	brokertest.Eventually(t, 10*time.Second, "no view from the second member after the first failed", func() bool {
		v := g.owners.Load()
		return v != nil && v.gen == 3
	})
	if v := g.owners.Load(); !slices.Equal(v.ups, []int{0, 1}) {
		t.Fatalf("view: %+v, want a and b at their configured upstreams", v)
	}
	waiting := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queriesB) > 0 && queriesB[len(queriesB)-1] == "after=3&timeout=10000"
	}
	brokertest.Eventually(t, 10*time.Second, "no read waiting on the second member", waiting)
	mu.Lock()
	before, nB := readsA, len(queriesB)
	mu.Unlock()
	g.refreshView()
	brokertest.Eventually(t, 10*time.Second, "the refresh asked the second member nothing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queriesB) > nB
	})
	mu.Lock()
	defer mu.Unlock()
	if q := queriesB[nB]; q != "" || readsA != before {
		t.Fatalf("after a refresh: the second member asked %q, the first %d more times; want it asked at once (no query), the first not", q, readsA-before)
	}
}

// TestCellWatchWaitingReadIsHeld: a waiting view read is held by the
// member until the next generation, up to its 10 s (docs/gateway.md,
// "Routing to owners": the gateway's client bound is 12 s), and answered
// at 2.5 s it brings that generation: the gateway does not give it up
// sooner and ask afresh.
func TestCellWatchWaitingReadIsHeld(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	var m *httptest.Server
	m = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		gen := "3"
		switch r.URL.Query().Get("after") {
		case "":
		case "3":
			select {
			case <-time.After(2500 * time.Millisecond): // the next generation, then
			case <-r.Context().Done():
				return
			}
			gen = "4"
		default:
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(`{"generation":` + gen + `,"tenant":"acme","members":[{"id":"m1:1","url":"` + m.URL + `"}]}`))
	}))
	t.Cleanup(m.Close)
	g := newWatchGateway(t, &syncBuffer{}, m.URL)
	g.bg.Add(1)
	go g.watchCell()
	t.Cleanup(func() {
		close(g.quit)
		g.bg.Wait()
	})
	brokertest.Eventually(t, 10*time.Second, "the watcher never wanted a tenant", g.watch.wantTenant.Load)
	g.offerTenant("acme")
	brokertest.Eventually(t, 20*time.Second, "no third read", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(queries) >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "after=3&timeout=10000", "after=4&timeout=10000"}; !slices.Equal(queries[:3], want) {
		t.Fatalf("the view reads: %q, want %q (the waiting read held until answered)", queries, want)
	}
}

// TestOwnerMovedOnALinkRefreshesTheView: a member's answer on a broker
// link saying the queue's owner moved (owner_moved) makes the gateway ask
// for the cell's view again; another 503 does not (docs/gateway.md,
// "Routing to owners").
func TestOwnerMovedOnALinkRefreshesTheView(t *testing.T) {
	var pushAnswer atomic.Pointer[string]
	ok := fakePushAnswer
	pushAnswer.Store(&ok)
	fb := startFakeBrokerAnswering(t, func(target string) string {
		if target == "/api/v1/ephemeral/push" {
			return *pushAnswer.Load()
		}
		return fakePushAnswer
	})
	g := startGatewayWith(t, fb.url, func(*Config) {})
	l := dialTestLink(t, g.Addr().String())
	onLink := func() bool { // the last push went on the link (the gateway's view reads aside)
		rs := slices.DeleteFunc(fb.requests(), func(s string) bool { return s == "http GET "+cellViewPath })
		return len(rs) > 0 && rs[len(rs)-1] == "link POST /api/v1/ephemeral/push"
	}
	brokertest.Eventually(t, 10*time.Second, "a push on the broker link", func() bool {
		if typ, p := l.roundTrip(t, linkPushOf("q")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
			t.Fatalf("a push: frame %d %q", typ, p)
		}
		return onLink()
	})
	for _, c := range []struct {
		code    string
		refresh bool
	}{{"ephemeral_disabled", false}, {"owner_moved", true}} {
		body := `{"error":"x","code":"` + c.code + `"}`
		answer := "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		pushAnswer.Store(&answer)
		typ, p := l.roundTrip(t, linkPushOf("q"))
		if typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 503") || !strings.Contains(string(p), c.code) || !onLink() {
			t.Fatalf("a push answered %s on the broker link: frame %d %q (on the link: %v)", c.code, typ, p, onLink())
		}
		// The view is asked for before the answer is given (link.go).
		if asked := g.watch.lastPoke.Load() != 0; asked != c.refresh {
			t.Fatalf("after a 503 %s: the view asked for again %v, want %v", c.code, asked, c.refresh)
		}
	}
}
