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
