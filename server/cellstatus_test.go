package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/store/postgres"
	"github.com/queenmq/ephemeral/store/storetest"
)

// fakeCell is a CellStatus over a view the test may replace (published
// atomically, as a Membership publishes) and fixed rows.
type fakeCell struct {
	v    atomic.Pointer[cell.View]
	rows []cell.Row
	err  error
}

func newFakeCell(v *cell.View, rows []cell.Row, err error) *fakeCell {
	f := &fakeCell{rows: rows, err: err}
	f.v.Store(v)
	return f
}

func (f *fakeCell) View() *cell.View { return f.v.Load() }
func (f *fakeCell) Rows(context.Context) ([]cell.Row, error) {
	return f.rows, f.err
}

var _ CellStatus = (*cell.Membership)(nil) // the real one fits

var threeMembers = []cell.Member{{ID: "10.0.0.1:7000", Incarnation: "aaa"}, {ID: "10.0.0.2:7000", Incarnation: "bbb"}, {ID: "10.0.0.3:7000", Incarnation: "ccc"}}

func TestHealthInACell(t *testing.T) {
	f := newFakeCell(cell.StaticView(4, "10.0.0.2:7000", threeMembers, false), nil, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	ts.want(t, "GET", "/health", "", 200, `,"cell":{"members":3,"self":"10.0.0.2:7000","fenced":false}}`)
	// Fenced: the member leaves itself out of its live set.
	f.v.Store(cell.StaticView(5, "10.0.0.2:7000", []cell.Member{threeMembers[0], threeMembers[2]}, true))
	ts.want(t, "GET", "/health", "", 200, `,"cell":{"members":2,"self":"10.0.0.2:7000","fenced":true}}`)
	// Outside a cell /health is as before: no cell key.
	plain := startWithStore(t, openStore(t))
	if body := plain.want(t, "GET", "/health", "", 200, `"status":"ok"`); strings.Contains(body, "cell") {
		t.Fatalf("health outside a cell: %s", body)
	}
}

func TestCellRouteOutsideACell(t *testing.T) {
	ts := startWithStore(t, openStore(t))
	if body := ts.want(t, "GET", cellPath, "", 200, ""); body != `{"enabled":false,"fenced":false,"members":[]}` {
		t.Fatalf("cell route outside a cell: %s", body)
	}
	ts.want(t, "POST", cellPath, "{}", 405, `"code":"method_not_allowed"`)
}

// GET /api/v1/system/cell lists every member row with its incarnation,
// timestamps and liveness, and counts the queues each owns: declared
// queues by the rendezvous owner in this member's view (so they add up to
// every declared queue), and this member's implicit queues on its own
// entry only.
func TestCellRouteListsMembers(t *testing.T) {
	self := "10.0.0.2:7000"
	v := cell.StaticView(7, self, threeMembers, false)
	t0 := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	rows := []cell.Row{
		{ID: "10.0.0.1:7000", Incarnation: "aaa", JoinedAt: t0, HeartbeatAt: t0.Add(3 * time.Second), Live: true, PublicURL: "http://10.0.0.1:6632"},
		{ID: "10.0.0.2:7000", Incarnation: "bbb", JoinedAt: t0, HeartbeatAt: t0.Add(4 * time.Second), Live: true},
		{ID: "10.0.0.3:7000", Incarnation: "ccc", JoinedAt: t0, HeartbeatAt: t0.Add(2 * time.Second), Live: true},
		{ID: "10.0.0.9:7000", Incarnation: "zzz", JoinedAt: t0, HeartbeatAt: t0.Add(-time.Minute), Live: false},
	}
	e := engine.New(engine.Config{})
	ts := serve(t, e, openStore(t), Config{Loops: 1, Cell: newFakeCell(v, rows, nil)})
	wantDeclared := map[string]int{}
	for i := range 60 {
		q := fmt.Sprint("d", i)
		if err := e.Configure(identity.DefaultTenant, q, engine.OptionSet{}); err != nil {
			t.Fatal(err)
		}
		m, _ := v.Owner(identity.DefaultTenant, q)
		wantDeclared[m.ID]++
	}
	wantImplicit := 0
	for i := range 40 {
		q := fmt.Sprint("i", i)
		if _, err := e.Push(identity.DefaultTenant, q, "", [][]byte{[]byte("1")}); err != nil {
			t.Fatal(err)
		}
		if v.Owns(identity.DefaultTenant, q) {
			wantImplicit++
		}
	}
	body := ts.want(t, "GET", cellPath, "", 200, "")
	var got cellListing
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if !got.Enabled || got.Self != self || got.Generation != 7 || got.Fenced || len(got.Members) != 4 {
		t.Fatalf("listing: %s", body)
	}
	total := 0
	for _, m := range got.Members {
		total += m.DeclaredQueues
		switch {
		case m.Member == "10.0.0.9:7000":
			if m.Live || m.InView || m.DeclaredQueues != 0 || m.ImplicitQueues != nil {
				t.Fatalf("a dead row: %+v", m)
			}
		case m.DeclaredQueues != wantDeclared[m.Member] || !m.Live || !m.InView:
			t.Fatalf("%s: %+v; want %d declared queues, live, in view", m.Member, m, wantDeclared[m.Member])
		case m.Self != (m.Member == self):
			t.Fatalf("%s: self %v", m.Member, m.Self)
		case m.Self && (m.ImplicitQueues == nil || *m.ImplicitQueues != wantImplicit):
			t.Fatalf("self: implicit %v, want %d", m.ImplicitQueues, wantImplicit)
		case !m.Self && m.ImplicitQueues != nil:
			t.Fatalf("%s: implicit queues of another member reported: %d", m.Member, *m.ImplicitQueues)
		}
	}
	if total != 60 {
		t.Fatalf("declared queues owned add up to %d, want 60", total)
	}
	for _, want := range []string{`"member":"10.0.0.1:7000","incarnation":"aaa","publicUrl":"http://10.0.0.1:6632","joinedAt":"2026-12-01T05:00:00Z","heartbeatAt":"2026-12-01T05:00:03Z","live":true,"inView":true,"self":false`,
		`"member":"10.0.0.2:7000","incarnation":"bbb","publicUrl":"",`,
		`"implicitQueues":null`} {
		if !strings.Contains(body, want) {
			t.Fatalf("listing lacks %s: %s", want, body)
		}
	}
}

func TestCellRouteDatabaseDown(t *testing.T) {
	f := newFakeCell(cell.StaticView(1, "a:1", []cell.Member{{ID: "a:1"}}, false), nil, errors.New("connection refused"))
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f})
	ts.want(t, "GET", cellPath, "", 503, `"code":"ephemeral_unavailable"`)
}

// The route is broker-wide: the admin token when one is set (as /metrics
// and the grants of other tenants).
func TestCellRouteAdminScope(t *testing.T) {
	f := newFakeCell(cell.StaticView(1, "a:1", []cell.Member{{ID: "a:1"}}, false), []cell.Row{{ID: "a:1", Live: true}}, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f, AdminToken: []byte("s3cret")})
	ts.want(t, "GET", cellPath, "", 401, `"code":"unauthorized"`)
	req, _ := http.NewRequest("GET", "http://"+ts.addr+cellPath, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the admin token: %d", resp.StatusCode)
	}
}

// With real memberships (cell.Start) on the throwaway PostgreSQL, beside
// the brokers' stores: both members see a cell of two on /health, list
// each other with live rows, and, once a configure on A has reached B,
// count the same owners for the declared queues.
func TestCellStatusWithRealMembership(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	schema := pg.FreshSchema(t)
	start := func(addr string) *testServer {
		e := engine.New(engine.Config{})
		m, err := cell.Start(cell.Options{
			Config:      cell.Config{Advertise: addr, Secret: []byte("0123456789abcdef"), Heartbeat: 100 * time.Millisecond, MemberTimeout: 500 * time.Millisecond},
			DatabaseURL: pg.URL(), Schema: schema, Incarnation: e.Incarnation(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Stop(context.Background()) })
		st, err := postgres.Open(context.Background(), postgres.Config{URL: pg.URL(), Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		<-st.Ready()
		t.Cleanup(func() { st.Close() })
		ts := serve(t, e, st, Config{Loops: 1, Cell: m, SyncInterval: 100 * time.Millisecond})
		waitFor(t, 5*time.Second, "the boot load", func() bool { return ts.s.loaded.Load() })
		return ts
	}
	a, b := start("127.0.0.1:17001"), start("127.0.0.1:17002")
	for _, ts := range []*testServer{a, b} {
		waitFor(t, 5*time.Second, "a cell of two on /health", func() bool {
			_, body := ts.do(t, "GET", "/health", "")
			return strings.Contains(body, `"cell":{"members":2,`) && strings.Contains(body, `"fenced":false}`)
		})
	}
	for i := range 20 {
		a.want(t, "POST", "/api/v1/ephemeral/configure", fmt.Sprintf(`{"queue":"d%d"}`, i), 201, "")
	}
	waitFor(t, time.Second, "the declarations on B", func() bool { return strings.Count(b.listing(t), `"tier":"declared"`) == 20 })
	counts := func(ts *testServer) map[string]int {
		var l cellListing
		if err := json.Unmarshal([]byte(ts.want(t, "GET", cellPath, "", 200, `"enabled":true`)), &l); err != nil {
			t.Fatal(err)
		}
		c := map[string]int{}
		total := 0
		for _, m := range l.Members {
			if !m.Live || !m.InView {
				t.Fatalf("member %+v not live or not in view", m)
			}
			c[m.Member] = m.DeclaredQueues
			total += m.DeclaredQueues
		}
		if len(l.Members) != 2 || total != 20 {
			t.Fatalf("listing on %s: %+v", l.Self, l)
		}
		return c
	}
	if ca, cb := counts(a), counts(b); fmt.Sprint(ca) != fmt.Sprint(cb) {
		t.Fatalf("A counts %v, B counts %v: the same view should give the same owners", ca, cb)
	}
}

// In jwt mode the operator tenant's admin may read the cell; another
// tenant's admin may not (member addresses are broker-wide).
func TestCellRouteTenantAdminForbidden(t *testing.T) {
	secret := []byte("jwt-secret")
	auth, err := identity.New(identity.Config{Mode: identity.ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeCell(cell.StaticView(1, "a:1", []cell.Member{{ID: "a:1"}}, false), []cell.Row{{ID: "a:1", Live: true}}, nil)
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Cell: f, Auth: auth, OperatorTenant: "ops"})
	get := func(tenant string) (int, string) {
		tok := hs256(t, secret, jwt.MapClaims{"tenant": tenant, "role": "admin", "exp": time.Now().Add(time.Hour).Unix()})
		req, _ := http.NewRequest("GET", "http://"+ts.addr+cellPath, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if c, body := get("acme"); c != 403 || !strings.Contains(body, `"code":"forbidden"`) {
		t.Fatalf("a tenant's admin: %d %s; want 403 forbidden", c, body)
	}
	if c, body := get("ops"); c != 200 || !strings.Contains(body, `"enabled":true`) {
		t.Fatalf("the operator tenant's admin: %d %s", c, body)
	}
	if c, _ := ts.do(t, "GET", cellPath, ""); c != 401 {
		t.Fatalf("no credential: %d, want 401", c)
	}
}
