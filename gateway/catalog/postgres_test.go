package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/internal/pg"
	"github.com/queenmq/ephemeral/store/storetest"
)

// schemaURL makes a schema of its own for t (dropped when t ends) and
// returns the run's URL with that schema as search_path, where the catalog
// creates its tables.
func schemaURL(t *testing.T) string {
	t.Helper()
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	if err := pgServer.Exec(ctxT(t), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pgServer.URL())
	if err != nil || u.Scheme == "" {
		return pgServer.URL() + " search_path=" + schema // a key=value DSN
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestPostgresContract(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	runContract(t, func(t *testing.T) backend {
		dbURL := schemaURL(t)
		return backend{shared: true, open: func() Store {
			s, err := Open(ctxT(t), dbURL, "")
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
	})
}

// TestPostgresTables: the tables are where search_path says, under the
// names the docs give, and gateways opening at once on a fresh database
// all succeed (the advisory lock).
func TestPostgresTables(t *testing.T) {
	dbURL := schemaURL(t)
	var wg sync.WaitGroup
	stores := make([]Store, 4)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(ctxT(t), dbURL, "")
		}()
	}
	wg.Wait()
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("open %d: %v", i, errs[i])
		}
		defer s.Close()
	}
	c := ctxT(t)
	conn, err := pgx.Connect(c, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, table := range []string{"queen_gateway_plans", "queen_gateway_tenants", "queen_gateway_usage", "queen_gateway_revision"} {
		var schema string
		err := conn.QueryRow(c, "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)", table).Scan(&schema)
		if err != nil || schema != conn.Config().RuntimeParams["search_path"] {
			t.Fatalf("table %s in schema %q (%v), want %q", table, schema, err, conn.Config().RuntimeParams["search_path"])
		}
	}
	// An operator's SQL that raises the revision by hand is seen.
	before := revision(t, stores[0])
	if _, err := conn.Exec(c, "UPDATE queen_gateway_revision SET n = n + 1"); err != nil {
		t.Fatal(err)
	}
	if now := revision(t, stores[1]); now == before {
		t.Fatal("a raise of the revision row by hand was not seen")
	}
	// A revision row lost by hand is put back by the next Open, and
	// writes move it again.
	if _, err := conn.Exec(c, "TRUNCATE queen_gateway_revision"); err != nil {
		t.Fatal(err)
	}
	s, err := Open(c, dbURL, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before = revision(t, s)
	must(t, s.PutTenant(c, Tenant{"acme", "free"}))
	if now := revision(t, stores[0]); now == before {
		t.Fatal("after the revision row was truncated and reopened, a write left it alone")
	}
	// The stored plan is readable as columns.
	must(t, stores[0].PutPlan(c, free))
	var n int64
	if err := conn.QueryRow(c, "SELECT messages_per_period FROM queen_gateway_plans WHERE name = 'free'").Scan(&n); err != nil || n != free.MessagesPerPeriod {
		t.Fatalf("messages_per_period = %d, %v", n, err)
	}
}

// TestPostgresUnreachable: with no database to reach, Open fails at once
// with ErrUnavailable, and a bad URL's message does not echo it (it may
// hold a password).
func TestPostgresUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // nothing listens there now: connection refused
	start := time.Now()
	s, err := Open(ctxT(t), fmt.Sprintf("postgres://u:secret@127.0.0.1:%d/x?sslmode=disable", port), "")
	if err == nil || s != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v, %v; want ErrUnavailable", s, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
	s, err = Open(ctxT(t), "postgres://u:secret@host:notaport/x", "")
	if err == nil || s != nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open on a bad URL = %v, %v", s, err)
	}
}

func TestPostgresOpenEnv(t *testing.T) {
	env := map[string]string{"QUEEN_DATABASE_URL": schemaURL(t), "QUEEN_DATA_DIR": t.TempDir()}
	s, err := OpenEnv(ctxT(t), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*pgStore); !ok {
		t.Fatalf("OpenEnv with QUEEN_DATABASE_URL = %T", s)
	}
}

// TestPostgresConnectionSettings: a URL that sets no connect_timeout,
// statement_timeout or application_name gets the catalog's (2 s, 5 s,
// queen-gateway/catalog), on the server's side too; one that sets shorter
// timeouts keeps them, longer ones are cut to the catalog's, and its
// application_name is kept with the role after it (internal/pg's rule).
func TestPostgresConnectionSettings(t *testing.T) {
	dbURL := schemaURL(t)
	sep := "&"
	if !strings.Contains(dbURL, "?") {
		sep = " " // a key=value DSN
	}
	params := func(kv ...string) string { return dbURL + sep + strings.Join(kv, sep) }
	for _, c := range []struct {
		url                string
		connect            time.Duration
		statement, appName string
	}{
		{dbURL, pgConnectTimeout, "5s", "queen-gateway/catalog"},
		{params("connect_timeout=1", "statement_timeout=1234", "application_name=mine"), time.Second, "1234ms", "mine/catalog"},
		{params("connect_timeout=7", "statement_timeout=7000"), pgConnectTimeout, "5s", "queen-gateway/catalog"},
	} {
		s, err := openPostgres(ctxT(t), c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.pool.ConnConfig().ConnectTimeout; got != c.connect {
			t.Errorf("%s: connect timeout %v, want %v", c.url, got, c.connect)
		}
		var statement, appName string
		err = s.read(ctxT(t), func(ctx context.Context, conn *pgxpool.Conn) error {
			return conn.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('application_name')").Scan(&statement, &appName)
		})
		if err != nil {
			t.Fatal(err)
		}
		if statement != c.statement || appName != c.appName {
			t.Errorf("%s: statement_timeout %q, application_name %q; want %q, %q", c.url, statement, appName, c.statement, c.appName)
		}
		_ = s.Close()
	}
}

// TestPostgresLostConnection: how internal/pg's outcomes reach the
// catalog's callers. ErrUnavailable (keep the usage batch, retry) only
// where nothing was written: no connection, a statement that never ran, a
// connection lost under a read. A write lost after it may have applied is
// not ErrUnavailable, so a usage batch is not counted twice.
func TestPostgresLostConnection(t *testing.T) {
	s := &pgStore{}
	lost := fmt.Errorf("%w: %w", pg.ErrConnectionLost, io.ErrUnexpectedEOF)
	for _, c := range []struct {
		name        string
		err         error
		writes      bool
		unavailable bool
	}{
		{"no connection, read", fmt.Errorf("%w: refused", pg.ErrNoConnection), false, true},
		{"no connection, write", fmt.Errorf("%w: refused", pg.ErrNoConnection), true, true},
		{"lost under a read", lost, false, true},
		{"lost under a write", lost, true, false},
		{"an SQL error", &pgconn.PgError{Code: "23505"}, true, false},
	} {
		err := s.result(c.err, c.writes)
		if err == nil || errors.Is(err, ErrUnavailable) != c.unavailable || !errors.Is(err, c.err) {
			t.Errorf("%s: %v; want ErrUnavailable %v, wrapping %v", c.name, err, c.unavailable, c.err)
		}
	}
	s.closed.Store(true)
	if err := s.result(lost, true); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestPostgresConnectionCutUnderAWrite, for real (a proxy cut while the
// statement waits on a row lock on the server): PutPlan, an upsert, is sent
// again and succeeds; AddUsage is not (its counts add): it fails with an
// error that is not ErrUnavailable (it may have been applied), and the
// batch is counted once or not at all, never twice.
func TestPostgresConnectionCutUnderAWrite(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	dbURL := schemaURL(t)
	px := pgServer.StartProxy(t)
	s, err := openPostgres(ctxT(t), strings.Replace(dbURL, fmt.Sprintf("127.0.0.1:%d", pgServer.Port()), px.Addr(), 1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctxT(t)
	must(t, s.PutPlan(c, free))
	must(t, s.AddUsage(c, []Usage{{"acme", Messages, 60, 1}}))
	cutWhileLocked := func(lock string, call func() error) error {
		conn, err := pgx.Connect(c, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		tx, err := conn.Begin(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(c, lock); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- call() }()
		waitLockWait(t)
		px.Cut()
		tx.Rollback(context.Background())
		return <-done
	}
	err = cutWhileLocked("SELECT 1 FROM queen_gateway_plans WHERE name = 'free' FOR UPDATE", func() error {
		p := free
		p.ParkedSlots = 9
		return s.PutPlan(c, p)
	})
	if err != nil {
		t.Fatalf("PutPlan whose connection was cut under it: %v, want success (sent again)", err)
	}
	if p, _, err := s.GetPlan(c, "free"); err != nil || p.ParkedSlots != 9 {
		t.Fatalf("after PutPlan sent again: %+v, %v", p, err)
	}
	err = cutWhileLocked("SELECT 1 FROM queen_gateway_usage FOR UPDATE", func() error {
		return s.AddUsage(c, []Usage{{"acme", Messages, 60, 10}})
	})
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("AddUsage whose connection was cut under it: %v, want an error that is not ErrUnavailable (it may have been applied)", err)
	}
	// Whether the cut batch was applied depends on whether its session
	// found the client gone before it committed: 1 or 11, never 21.
	brokertest.Eventually(t, 10*time.Second, "the cut batch's session done", func() bool { return running(t, "INSERT INTO queen_gateway_usage") == 0 })
	u, err := s.UsageSince(c, 0)
	if n := u["acme"][Messages]; err != nil || (n != 1 && n != 11) {
		t.Fatalf("usage after the cut batch: %d, %v; want 1 or 11 (never counted twice)", n, err)
	}
}

// running counts the statements starting with prefix that the server runs.
func running(t *testing.T, prefix string) int {
	conn, err := pgx.Connect(context.Background(), pgServer.URL())
	if err != nil {
		return -1
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND starts_with(query, $1)", prefix).Scan(&n); err != nil {
		return -1
	}
	return n
}

// waitLockWait waits until a catalog's statement waits on a lock (the
// tests that take row locks do not run in parallel).
func waitLockWait(t *testing.T) {
	t.Helper()
	brokertest.Eventually(t, 10*time.Second, "a statement waiting on the row lock", func() bool {
		conn, err := pgx.Connect(context.Background(), pgServer.URL())
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		var n int
		err = conn.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = 'queen-gateway/catalog'").Scan(&n)
		return err == nil && n > 0
	})
}
