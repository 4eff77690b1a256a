package gateway

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous/rendezvoustest"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
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
