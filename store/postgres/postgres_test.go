package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/storetest"
	"go.uber.org/goleak"
)

// pgServer is the run's PostgreSQL: started once for the package by TestMain.
var pgServer *storetest.Postgres

func TestMain(m *testing.M) {
	os.Exit(storetest.MainWithPostgres(m, &pgServer))
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// openT opens a store on cfg (URL defaulting to the run's server) and
// closes it when the test ends.
func openT(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = pgServer.URL()
	}
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitReady(t *testing.T, s *Store, within time.Duration) {
	t.Helper()
	select {
	case <-s.Ready():
	case <-time.After(within):
		t.Fatalf("store not ready within %v", within)
	}
}

func decl(q, opts string) store.Declaration {
	return store.Declaration{Tenant: "t", Queue: q, Options: []byte(opts)}
}

func TestContract(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	storetest.Run(t, func(t *testing.T) func() store.Store {
		schema := pgServer.FreshSchema(t)
		return func() store.Store {
			s, err := Open(testCtx(t), Config{URL: pgServer.URL(), Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}

// The tables live in the store's own schema, options as json (the exact
// text), and creating them again, or from many brokers at once, is safe.
func TestSchema(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	var wg sync.WaitGroup
	stores := make([]*Store, 8)
	for i := range stores { // a cell booting together
		wg.Go(func() { stores[i] = openT(t, Config{Schema: schema}) })
	}
	wg.Wait()
	for i, s := range stores {
		select {
		case <-s.Ready():
		default:
			t.Fatalf("store %d of 8 opened concurrently is not ready", i)
		}
	}
	if err := stores[0].PutDeclaration(ctx, decl("q", `{"maxLength":1}`)); err != nil {
		t.Fatal(err)
	}
	again := openT(t, Config{Schema: schema})
	if ds, err := again.LoadDeclarations(ctx); err != nil || len(ds) != 1 {
		t.Fatalf("after reopening: %v %v", ds, err)
	}

	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tables) != "[declarations grants meta revision settings]" {
		t.Fatalf("tables in %s: %v", schema, tables)
	}
	var typ string
	if err := conn.QueryRow(ctx, `SELECT data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = 'declarations' AND column_name = 'options'`, schema).Scan(&typ); err != nil || typ != "json" {
		t.Fatalf("options column type %q (%v), want json", typ, err)
	}
	if pgServer.Managed() {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d tables in public (%v)", n, err)
		}
	}

	for _, bad := range []string{"public", "PUBLIC", "pg_catalog", string(make([]byte, 64))} {
		if _, err := Open(ctx, Config{URL: pgServer.URL(), Schema: bad}); err == nil {
			t.Errorf("Open with schema %q succeeded", bad)
		}
	}
}

// A role that may use a schema an operator prepared, but not create
// anything, runs the broker: a schema at this version needs no DDL.
func TestSchemaPreparedByOperator(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	openT(t, Config{Schema: schema}).Close() // the operator's migration
	role := schema + "_broker"
	q := pgx.Identifier{schema}.Sanitize()
	r := pgx.Identifier{role}.Sanitize()
	var pe *pgconn.PgError
	if err := pgServer.Exec(ctx, "CREATE ROLE "+r+" LOGIN"); errors.As(err, &pe) && pe.Code == "42501" && !pgServer.Managed() {
		t.Skipf("%s may not create roles: %v", storetest.EnvTestDatabaseURL, err)
	} else if err != nil {
		t.Fatal(err)
	}
	// No CREATE on the database (PostgreSQL's default) and none on the schema.
	for _, sql := range []string{
		"GRANT USAGE ON SCHEMA " + q + " TO " + r,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + q + " TO " + r,
	} {
		if err := pgServer.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		pgServer.Exec(context.Background(), "DROP OWNED BY "+r)
		pgServer.Exec(context.Background(), "DROP ROLE "+r)
	})
	u, err := url.Parse(pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	s := openT(t, Config{URL: u.String(), Schema: schema})
	waitReady(t, s, time.Second)
	if err := s.PutDeclaration(ctx, decl("q", `{}`)); err != nil {
		t.Fatal(err)
	}
	// The same role cannot create a fresh schema: that is an error that
	// keeps the store down (and retrying), not a crash.
	s2 := openT(t, Config{URL: u.String(), Schema: pgServer.FreshSchema(t), RetryInterval: time.Hour})
	if s2.Healthy() {
		t.Fatal("a store whose schema could not be created reports healthy")
	}
	if err := s2.PutDeclaration(ctx, decl("q", `{}`)); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("put before the schema exists = %v, want ErrUnavailable", err)
	}
}

// failFast is the bound on a call while the database is down: far less
// than the acquire timeout (2 s) plus a second.
const failFast = time.Second

// The database server restarts under a running store: calls fail fast
// with ErrUnavailable while it is down, work again after, Healthy follows,
// acknowledged writes are all there, and no goroutine is left behind.
func TestDatabaseRestart(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := testCtx(t)
	s, err := Open(ctx, Config{URL: pgServer.URL(), Schema: pgServer.FreshSchema(t), RetryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitReady(t, s, time.Second)

	// A writer runs throughout: every put returns within the bound, and
	// succeeds or fails with ErrUnavailable.
	var (
		mu      sync.Mutex
		acked   []string
		outages int
		slowest time.Duration
	)
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			q := "w" + strconv.Itoa(i)
			start := time.Now()
			err := s.PutDeclaration(ctx, decl(q, `{"maxLength":1}`))
			d := time.Since(start)
			mu.Lock()
			slowest = max(slowest, d)
			switch {
			case err == nil:
				acked = append(acked, q)
			case errors.Is(err, store.ErrUnavailable):
				outages++
			default:
				mu.Unlock()
				writerDone <- fmt.Errorf("put %s: %v is not ErrUnavailable", q, err)
				return
			}
			mu.Unlock()
			if d > maxCall {
				writerDone <- fmt.Errorf("put %s took %v", q, d)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	must(pgServer.Stop())
	t.Cleanup(func() { pgServer.Start() }) // whatever happens, later tests get their server

	// Down: each call fails fast with the mapped error, and health says so.
	for range 5 {
		start := time.Now()
		err := s.PutDeclaration(ctx, decl("down", `{}`))
		if d := time.Since(start); !errors.Is(err, store.ErrUnavailable) || d > failFast {
			t.Fatalf("put while down: %v after %v, want ErrUnavailable within %v", err, d, failFast)
		}
		start = time.Now()
		_, err = s.DeleteDeclaration(ctx, "t", "w0")
		if d := time.Since(start); !errors.Is(err, store.ErrUnavailable) || d > failFast {
			t.Fatalf("delete while down: %v after %v", err, d)
		}
		start = time.Now()
		_, err = s.LoadDeclarations(ctx)
		if d := time.Since(start); !errors.Is(err, store.ErrUnavailable) || d > failFast {
			t.Fatalf("load while down: %v after %v", err, d)
		}
	}
	if s.Healthy() {
		t.Fatal("Healthy while the database is down")
	}
	time.Sleep(300 * time.Millisecond) // the background loop pings a down server too

	must(pgServer.Start())
	deadline := time.Now().Add(10 * time.Second)
	for s.PutDeclaration(ctx, decl("up", `{}`)) != nil {
		if time.Now().After(deadline) {
			t.Fatal("puts still fail 10 s after the database came back")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for !s.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("Healthy still false 10 s after the database came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	must(<-writerDone)

	ds, err := s.LoadDeclarations(ctx)
	must(err)
	have := map[string]bool{}
	for _, d := range ds {
		have[d.Queue] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, q := range acked {
		if !have[q] {
			t.Fatalf("acknowledged put %s is missing after the restart", q)
		}
	}
	if outages == 0 {
		t.Fatal("the writer never saw the outage")
	}
	t.Logf("writer: %d puts acknowledged, %d refused as unavailable, slowest %v", len(acked), outages, slowest)
	must(s.Close())
}

// maxCall is the most any call may take with the default bounds.
const maxCall = DefaultAcquireTimeout + DefaultStatementTimeout + clientSlack

// Open with the database down: the store opens at once and reports down,
// refuses calls fast, and becomes ready (and loads what is there) when the
// database starts.
func TestOpenWhileDatabaseDown(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	seed, err := Open(ctx, Config{URL: pgServer.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Declaration{decl("a", `{"maxLength":1}`), decl("b", `{ "policy" : "dropOldest" }`)}
	for _, d := range want {
		if err := seed.PutDeclaration(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	seed.Close()

	if err := pgServer.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pgServer.Start() })
	start := time.Now()
	s, err := Open(ctx, Config{URL: pgServer.URL(), Schema: schema, RetryInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open with the database down: %v", err)
	}
	defer s.Close()
	if d := time.Since(start); d > failFast {
		t.Fatalf("Open with the database down took %v", d)
	}
	if s.Healthy() {
		t.Fatal("Healthy with the database down")
	}
	select {
	case <-s.Ready():
		t.Fatal("Ready with the database down")
	default:
	}
	start = time.Now()
	if err := s.PutDeclaration(ctx, decl("c", `{}`)); !errors.Is(err, store.ErrUnavailable) || time.Since(start) > failFast {
		t.Fatalf("put before ready: %v after %v", err, time.Since(start))
	}
	if _, err := s.LoadDeclarations(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("load before ready: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // a few failed retries

	if err := pgServer.Start(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, s, 5*time.Second)
	if !s.Healthy() {
		t.Fatal("ready but not healthy")
	}
	ds, err := s.LoadDeclarations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || string(ds[0].Options) != string(want[0].Options) || string(ds[1].Options) != string(want[1].Options) {
		t.Fatalf("loaded %v, want %v", ds, want)
	}
	s.Close()
}

// An address that never answers: Open returns within the acquire timeout.
func TestOpenUnreachableHost(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	start := time.Now()
	// 192.0.2.0/24 is TEST-NET-1: never routed.
	s, err := Open(context.Background(), Config{URL: "postgres://nobody@192.0.2.1:5432/x?sslmode=disable&connect_timeout=30",
		AcquireTimeout: 300 * time.Millisecond, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 300*time.Millisecond+failFast {
		t.Fatalf("Open took %v against an unreachable host", d)
	}
	start = time.Now()
	if err := s.PutDeclaration(context.Background(), decl("q", `{}`)); !errors.Is(err, store.ErrUnavailable) || time.Since(start) > failFast {
		t.Fatalf("put: %v after %v", err, time.Since(start))
	}
	s.Close()
}

func TestOpenRefusesBadConfig(t *testing.T) {
	if _, err := Open(context.Background(), Config{URL: "postgres://u:secret@host:notaport/db"}); err == nil {
		t.Fatal("Open with an unparsable URL succeeded")
	} else if s := err.Error(); strings.Contains(s, "secret") {
		t.Fatalf("the error quotes the password: %s", s)
	}
}

// holdRow locks the declaration row (t, q) in a transaction of its own
// until release is called.
func holdRow(t *testing.T, schema, q string) (release func()) {
	t.Helper()
	ctx := testCtx(t)
	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{schema, "declarations"}.Sanitize()+" WHERE tenant = 't' AND queue = $1 FOR UPDATE", q); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(context.Background())
			conn.Close(context.Background())
		})
	}
	t.Cleanup(release)
	return release
}

// A statement that cannot finish (a lock held elsewhere) fails at the
// statement timeout, as a failed write and not as unavailable (500, not
// 503), and the connection stays usable.
func TestStatementTimeout(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	s := openT(t, Config{Schema: schema, StatementTimeout: 300 * time.Millisecond, MaxConns: 1})
	if err := s.PutDeclaration(ctx, decl("locked", `{}`)); err != nil {
		t.Fatal(err)
	}
	release := holdRow(t, schema, "locked")
	start := time.Now()
	err := s.PutDeclaration(ctx, decl("locked", `{"maxLength":2}`))
	d := time.Since(start)
	var pe *pgconn.PgError
	if err == nil || errors.Is(err, store.ErrUnavailable) || !errors.As(err, &pe) || pe.Code != "57014" {
		t.Fatalf("put on a locked row = %v, want a statement timeout (57014), not ErrUnavailable", err)
	}
	if d < 250*time.Millisecond || d > 300*time.Millisecond+failFast {
		t.Fatalf("the statement timeout of 300ms fired after %v", d)
	}
	release()
	if err := s.PutDeclaration(ctx, decl("locked", `{"maxLength":3}`)); err != nil {
		t.Fatalf("put after the lock was released: %v", err)
	}
	if !s.Healthy() {
		t.Fatal("a statement timeout marked the store down")
	}
}

// With every connection busy past the acquire timeout, a call fails with
// ErrUnavailable (503) at that timeout.
func TestAcquireTimeout(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	s := openT(t, Config{Schema: schema, MaxConns: 1, AcquireTimeout: 300 * time.Millisecond, StatementTimeout: 5 * time.Second})
	if err := s.PutDeclaration(ctx, decl("locked", `{}`)); err != nil {
		t.Fatal(err)
	}
	release := holdRow(t, schema, "locked")
	blocked := make(chan error, 1)
	go func() { blocked <- s.PutDeclaration(ctx, decl("locked", `{"maxLength":2}`)) }() // holds the only connection
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	err := s.PutDeclaration(ctx, decl("other", `{}`))
	if d := time.Since(start); !errors.Is(err, store.ErrUnavailable) || d < 250*time.Millisecond || d > 300*time.Millisecond+failFast {
		t.Fatalf("put with the pool exhausted: %v after %v, want ErrUnavailable after about 300ms", err, d)
	}
	release()
	if err := <-blocked; err != nil {
		t.Fatalf("the blocked put, once the lock was released: %v", err)
	}
	if err := s.PutDeclaration(ctx, decl("other", `{}`)); err != nil {
		t.Fatal(err)
	}
}

// With no URL the standard PG* environment names the database.
func TestPGEnvironment(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	for k, v := range map[string]string{"PGHOST": "127.0.0.1", "PGPORT": strconv.Itoa(pgServer.Port()), "PGUSER": "postgres", "PGDATABASE": "postgres", "PGSSLMODE": "disable"} {
		t.Setenv(k, v)
	}
	s, err := Open(testCtx(t), Config{URL: "", Schema: pgServer.FreshSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitReady(t, s, time.Second)
	if err := s.PutDeclaration(testCtx(t), decl("q", `{}`)); err != nil {
		t.Fatal(err)
	}
}

// TestConnectionLostUnderACall: the store's choice under internal/pg's
// rule, for real (a proxy cut while the statement waits on a row lock on
// the server). A put, an upsert of one value, is sent again on a new
// connection and succeeds; a delete, whose answer says whether the row
// existed, is not: it fails with ErrUnavailable (503) and marks the store
// down until the next contact.
func TestConnectionLostUnderACall(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	px := pgServer.StartProxy(t)
	s := openT(t, Config{URL: px.URL(pgServer), Schema: schema, StatementTimeout: 10 * time.Second})
	waitReady(t, s, 5*time.Second)
	if err := s.PutDeclaration(ctx, decl("q", `{}`)); err != nil {
		t.Fatal(err)
	}
	cutWhileWaiting := func(call func() error) error {
		release := holdRow(t, schema, "q")
		done := make(chan error, 1)
		go func() { done <- call() }()
		waitLockWait(t, schema)
		px.Cut()
		release()
		return <-done
	}
	if err := cutWhileWaiting(func() error { return s.PutDeclaration(ctx, decl("q", `{"maxLength":7}`)) }); err != nil {
		t.Fatalf("a put whose connection was cut under it: %v, want success (sent again)", err)
	}
	got, err := s.LoadDeclarations(ctx)
	if err != nil || len(got) != 1 || string(got[0].Options) != `{"maxLength":7}` {
		t.Fatalf("after the put sent again: %v, %v", got, err)
	}
	err = cutWhileWaiting(func() error { _, err := s.DeleteDeclaration(ctx, "t", "q"); return err })
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a delete whose connection was cut under it: %v, want ErrUnavailable (not sent again)", err)
	}
}

// waitLockWait waits until a statement naming schema waits on a lock.
func waitLockWait(t *testing.T, schema string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		conn, err := pgx.Connect(context.Background(), pgServer.URL())
		if err == nil {
			err = conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0", schema).Scan(&n)
			conn.Close(context.Background())
		}
		if err == nil && n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no session waited on the row lock within 10 s")
}

// A ping that times out because every connection is busy says nothing
// about the connections: the store reads unhealthy while it lasts, but
// keeps them (a reset would close each as it came back, and the calls
// after it would dial again on a database already slow to answer).
func TestPingTimeoutKeepsGoodConnections(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	s := openT(t, Config{Schema: pgServer.FreshSchema(t), MaxConns: 1, AcquireTimeout: 100 * time.Millisecond,
		StatementTimeout: 200 * time.Millisecond, RetryInterval: 50 * time.Millisecond})
	waitReady(t, s, 5*time.Second)
	backend := func(hold func()) uint32 {
		var pid uint32
		err := s.pool.Do(ctx, pg.Unsent, func(_ context.Context, c *pgxpool.Conn) error {
			pid = c.Conn().PgConn().PID()
			hold()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	first := backend(func() {
		// The only connection is held until a ping has timed out.
		deadline := time.Now().Add(10 * time.Second)
		for s.Healthy() {
			if time.Now().After(deadline) {
				t.Fatal("the store still reads healthy with its only connection held for 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	// Twice: a reset racing the first of them closes the connection as
	// it is released, and the second finds another.
	for range 2 {
		if again := backend(func() {}); again != first {
			t.Fatalf("the connection was closed after a ping that only timed out: backend %d, then %d", first, again)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !s.Healthy() {
		if time.Now().After(deadline) {
			t.Fatal("the store not healthy again within 10 s of its connection's release")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
