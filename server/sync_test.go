package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/postgres"
	"github.com/queenmq/ephemeral/store/storetest"
)

// syncInterval is the brokers' look at the store revision in these tests:
// the default (1 s, a cell's default heartbeat), so "within a heartbeat"
// is checked at the setting users get.
const syncInterval = time.Second

// twoBrokers starts two servers, each with its own engine and its own
// PostgreSQL store on one schema: two brokers sharing a database.
func twoBrokers(t *testing.T, pgcfg postgres.Config) (a, b *testServer) {
	t.Helper()
	pgcfg.URL = pg.URL()
	if pgcfg.Schema == "" {
		pgcfg.Schema = pg.FreshSchema(t)
	}
	start := func() *testServer {
		st, err := postgres.Open(context.Background(), pgcfg)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-st.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("store not ready")
		}
		t.Cleanup(func() { st.Close() }) // after the server (cleanups run last-in first-out)
		ts := serve(t, engine.New(engine.Config{}), st, Config{Loops: 1, SyncInterval: syncInterval})
		waitFor(t, 5*time.Second, "the boot load", func() bool { return ts.s.loaded.Load() })
		return ts
	}
	return start(), start()
}

// waitFor polls cond every 5 ms until it holds or d passes, and returns
// how long it took.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func (ts *testServer) want(t *testing.T, method, path, body string, code int, contains string) string {
	t.Helper()
	c, got := ts.do(t, method, path, body)
	if c != code || !strings.Contains(got, contains) {
		t.Fatalf("%s %s %s = %d %s; want %d with %s", method, path, body, c, got, code, contains)
	}
	return got
}

func (ts *testServer) listing(t *testing.T) string {
	t.Helper()
	_, body := ts.do(t, "GET", "/api/v1/ephemeral/queues", "")
	return body
}

// D17: a configure, a delete, a grant and the kill switch made on one
// broker reach another broker on the same database within a heartbeat,
// with no restart: configure's options are enforced on pushes that land on
// B; a delete on A takes B's declaration back (B keeps what it holds: the
// contents live on the owner, and removing them is delete's own fan-out);
// a grant's rate and the kill switch apply on B.
func TestSyncAcrossBrokers(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	a, b := twoBrokers(t, postgres.Config{})

	// configure on A, enforced on B.
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"q","options":{"maxLength":2,"policy":"reject"}}`, 201, `"queue":"q"`)
	took := waitFor(t, syncInterval, "configure on A seen on B", func() bool {
		return strings.Contains(b.listing(t), `"queue":"q","tier":"declared"`)
	})
	t.Logf("configure on A applied on B after %v", took)
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1},{"payload":2}]}`, 201, "")
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":3}]}`, 429, `"code":"queue_full"`)

	// A re-configure replaces the declaration on B too.
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"q","options":{"maxLength":3,"policy":"reject"}}`, 201, "")
	waitFor(t, syncInterval, "re-configure on A seen on B", func() bool {
		return strings.Contains(b.listing(t), `"maxLength":3`)
	})
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":3}]}`, 201, "")

	// delete on A: B's copy is no longer declared; what B holds stays.
	a.want(t, "DELETE", "/api/v1/ephemeral/queue/q", "", 200, `"declared":true`)
	took = waitFor(t, syncInterval, "delete on A seen on B", func() bool {
		return strings.Contains(b.listing(t), `"queue":"q","tier":"implicit","depth":3`)
	})
	t.Logf("delete on A applied on B after %v", took)
	// A queue declared on A and never used on B goes from B's listing.
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"unused"}`, 201, "")
	waitFor(t, syncInterval, "configure of unused seen on B", func() bool { return strings.Contains(b.listing(t), `"queue":"unused"`) })
	a.want(t, "DELETE", "/api/v1/ephemeral/queue/unused", "", 200, "")
	waitFor(t, syncInterval, "delete of unused seen on B", func() bool { return !strings.Contains(b.listing(t), `"queue":"unused"`) })

	// A grant set on A applies on B: a rate of one message a second.
	a.want(t, "PUT", "/api/v1/system/ephemeral/grants/default", `{"maxBytes":0,"maxQueues":0,"messagesPerSecond":1}`, 200, "")
	waitFor(t, syncInterval, "grant on A applied on B", func() bool { return b.s.tenantState(identity.DefaultTenant).rate.Load() > 0 })
	// The bucket holds one token; a push is admitted while it is not empty
	// and may take it below zero (D14), so two messages empty it for 2 s.
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1},{"payload":2}]}`, 201, "")
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1}]}`, 429, `"code":"rate_limited"`)
	a.want(t, "DELETE", "/api/v1/system/ephemeral/grants/default", "", 200, `"deleted":true`)
	waitFor(t, syncInterval, "grant deleted on A lifted on B", func() bool { return b.s.tenantState(identity.DefaultTenant).rate.Load() == 0 })
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1}]}`, 201, "")

	// The kill switch set on A applies on B, and lifted on A lifts on B.
	a.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":3}`, 200, "")
	took = waitFor(t, syncInterval, "kill switch on A applied on B", func() bool {
		c, _ := b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1}]}`)
		return c == 503
	})
	t.Logf("kill switch on A applied on B after %v", took)
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1}]}`, 503, `"code":"ephemeral_disabled"`)
	b.want(t, "GET", "/api/v1/system/ephemeral", "", 200, `{"enabled":false,"retryAfterSeconds":3}`)
	a.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`, 200, "")
	waitFor(t, syncInterval, "kill switch lifted on A lifted on B", func() bool {
		c, _ := b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"r","messages":[{"payload":1}]}`)
		return c == 201
	})
	if n := a.s.sy.undeclared.Load(); n != 0 {
		t.Fatalf("A took back %d declarations of its own", n)
	}
}

// A broker's own writes never make it undo anything: a local delete
// followed by a push that makes the queue again (implicit), and a local
// configure racing the reconciles its own writes cause, stay as the client
// left them.
func TestSyncNeverUndoesOwnWrites(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	a, b := twoBrokers(t, postgres.Config{})
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"q","options":{"maxLength":5}}`, 201, "")
	a.want(t, "DELETE", "/api/v1/ephemeral/queue/q", "", 200, "")
	a.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`, 201, "")
	// Many configures and deletes back to back on A, each moving the
	// revision: the last one stands, on A and on B.
	for i := range 40 {
		opts := `{"queue":"c","options":{"maxLength":` + string(rune('1'+i%9)) + `}}`
		a.want(t, "POST", "/api/v1/ephemeral/configure", opts, 201, "")
		if i%3 == 0 {
			a.want(t, "DELETE", "/api/v1/ephemeral/queue/c", "", 200, "")
		}
	}
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"c","options":{"maxLength":77}}`, 201, "")
	// Every reconcile those writes caused has run once each broker has
	// applied the store's latest revision (a sleep would let the checks
	// below pass before any reconcile ran).
	for _, ts := range []*testServer{a, b} {
		waitFor(t, 5*syncInterval, "the latest revision applied", func() bool {
			rev, err := ts.s.st.Revision(context.Background())
			return err == nil && rev == ts.s.sy.applied.Load()
		})
	}
	if l := a.listing(t); !strings.Contains(l, `"queue":"q","tier":"implicit","depth":1`) ||
		!strings.Contains(l, `"queue":"c","tier":"declared"`) || !strings.Contains(l, `"maxLength":77`) {
		t.Fatalf("A after its own writes and the reconciles: %s", l)
	}
	if l := b.listing(t); !strings.Contains(l, `"queue":"c","tier":"declared"`) || !strings.Contains(l, `"maxLength":77`) ||
		strings.Contains(l, `"queue":"q"`) {
		t.Fatalf("B after A's writes: %s", l)
	}
	if n := a.s.sy.undeclared.Load(); n != 0 {
		t.Fatalf("A took back %d declarations of its own", n)
	}
}

// The database goes away and comes back: both brokers keep serving, a
// kill switch set on B while it was down (applied at once, written when
// it answers, D15) is not overwritten by the older stored one but reaches
// A, and a configure made after the recovery converges.
func TestSyncThroughDatabaseOutage(t *testing.T) {
	storetest.NeedManaged(t, pg)
	a, b := twoBrokers(t, postgres.Config{RetryInterval: 100 * time.Millisecond, AcquireTimeout: 300 * time.Millisecond, StatementTimeout: 500 * time.Millisecond})
	a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"before"}`, 201, "")
	waitFor(t, syncInterval, "configure before the outage", func() bool { return strings.Contains(b.listing(t), `"queue":"before"`) })

	must(t, pg.Stop())
	restarted := false
	defer func() {
		if !restarted {
			pg.Start()
		}
	}()
	time.Sleep(3 * syncInterval) // a few failed looks at the revision
	b.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":7}`, 200, "")
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"x","messages":[{"payload":1}]}`, 503, `"code":"ephemeral_disabled"`)
	must(t, pg.Start())
	restarted = true

	took := waitFor(t, 15*time.Second, "B's kill switch, set while the database was down, reaching A", func() bool {
		c, _ := a.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"x","messages":[{"payload":1}]}`)
		return c == 503
	})
	t.Logf("kill switch set on B during the outage reached A %v after the database came back", took)
	b.want(t, "POST", "/api/v1/ephemeral/push", `{"queue":"x","messages":[{"payload":1}]}`, 503, `"code":"ephemeral_disabled"`)
	b.want(t, "GET", "/api/v1/system/ephemeral", "", 200, `"retryAfterSeconds":7`)

	// Lifted on A (the family refuses configure while paused), then a
	// configure on A.
	a.want(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`, 200, "")
	waitFor(t, 3*syncInterval, "kill switch lifted on A lifted on B", func() bool {
		c, _ := b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"x","messages":[{"payload":1}]}`)
		return c == 201
	})
	waitFor(t, 15*time.Second, "a configure on A after the recovery", func() bool {
		c, _ := a.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"after","options":{"ttlSeconds":9}}`)
		return c == 201
	})
	took = waitFor(t, 3*syncInterval, "configure after the recovery seen on B", func() bool {
		return strings.Contains(b.listing(t), `"queue":"after","tier":"declared"`)
	})
	t.Logf("configure after the recovery seen on B after %v", took)
}

// quietStore is a store whose notifications never arrive (a LISTEN
// connection that is down): only the look every SyncInterval is left.
type quietStore struct {
	store.Store
	never chan struct{}
}

func (q quietStore) Changes() <-chan struct{} { return q.never }

// With every notification lost, the look at the revision every
// SyncInterval still brings a change within one interval (plus the
// reload).
func TestSyncByPollWhenNotificationsAreLost(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	schema := pg.FreshSchema(t)
	a, _ := twoBrokers(t, postgres.Config{Schema: schema})
	st, err := postgres.Open(context.Background(), postgres.Config{URL: pg.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	<-st.Ready()
	t.Cleanup(func() { st.Close() })
	b := serve(t, engine.New(engine.Config{}), quietStore{st, make(chan struct{})}, Config{Loops: 1, SyncInterval: syncInterval})
	waitFor(t, 5*time.Second, "the boot load", func() bool { return b.s.loaded.Load() })
	for i, q := range []string{"p1", "p2", "p3"} {
		a.want(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"`+q+`"}`, 201, "")
		took := waitFor(t, syncInterval+500*time.Millisecond, "configure seen by polling", func() bool {
			return strings.Contains(b.listing(t), `"queue":"`+q+`","tier":"declared"`)
		})
		t.Logf("change %d seen by polling after %v", i, took)
		time.Sleep(time.Duration(i) * 300 * time.Millisecond) // at other phases of the interval
	}
}

// A stored declaration this member could not apply (its engine refused the
// queue: the tenant's queue allowance, the broker's memory) is tried again
// at the next look, not left out until some other write moves the
// revision: the owner of the queue would otherwise serve it on the default
// options.
func TestSyncRetriesADeclarationItCouldNotApply(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	ctx := context.Background()
	e.SetTenantLimits("t", 0, 1) // one queue
	if _, err := e.Push("t", "other", "", [][]byte{[]byte("1")}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutDeclaration(ctx, store.Declaration{Tenant: "t", Queue: "q", Options: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.reconcile(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Declared("t", "q"); ok {
		t.Fatal("declared past the tenant's queue allowance")
	}
	if _, err := e.Delete("t", "other"); err != nil { // room again
		t.Fatal(err)
	}
	s.syncOnce() // the next look: the store has not changed since
	if _, ok := e.Declared("t", "q"); !ok {
		t.Fatal("the declaration refused once is never applied: the next look did not try again")
	}
}
