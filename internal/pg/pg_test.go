package pg

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/store/storetest"
)

// pg is the run's PostgreSQL (T4: the real server, not a fake), started
// once for the package; see storetest.StartPostgres.
var pg *storetest.Postgres

func TestMain(m *testing.M) {
	os.Exit(storetest.MainWithPostgres(m, &pg))
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func openT(t *testing.T, cfg Config) *Pool {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = pg.URL()
	}
	p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// withParams appends key=value settings to the run's URL.
func withParams(kv string) string { return pg.URL() + "&" + kv }

func show(t *testing.T, p *Pool, setting string) string {
	t.Helper()
	var v string
	err := p.Do(ctxT(t), Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, "SHOW "+setting).Scan(&v)
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOpenSettings: the pool's connections carry the caller's bounds and
// name on the server's side; a URL may shorten a bound, never lengthen
// it, and its application_name is kept with the role after it.
func TestOpenSettings(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	for _, c := range []struct {
		url, statement, appName string
		connect                 time.Duration
	}{
		// The caller's connect timeout, 2 s, is raised to MinConnectTimeout.
		{pg.URL(), "2s", "queen/store", MinConnectTimeout},
		{withParams("connect_timeout=1&statement_timeout=1234&application_name=mine"), "1234ms", "mine/store", time.Second},
		{withParams("connect_timeout=7&statement_timeout=1min"), "2s", "queen/store", MinConnectTimeout},
		{withParams("statement_timeout=1900"), "1900ms", "queen/store", MinConnectTimeout}, // every digit read
		{withParams("statement_timeout=0"), "2s", "queen/store", MinConnectTimeout},        // 0 is no bound: longer
		{withParams("statement_timeout=soon"), "2s", "queen/store", MinConnectTimeout},     // unknown: ours
	} {
		p := openT(t, Config{URL: c.url, Name: "queen/store", ConnectTimeout: 2 * time.Second, StatementTimeout: 2 * time.Second})
		if got := p.ConnConfig().ConnectTimeout; got != c.connect {
			t.Errorf("%s: connect timeout %v, want %v", c.url, got, c.connect)
		}
		if got := show(t, p, "statement_timeout"); got != c.statement {
			t.Errorf("%s: statement_timeout %q, want %q", c.url, got, c.statement)
		}
		if got := show(t, p, "application_name"); got != c.appName {
			t.Errorf("%s: application_name %q, want %q", c.url, got, c.appName)
		}
	}
	// A caller's connect timeout longer than the least stands.
	p := openT(t, Config{URL: pg.URL(), Name: "queen/store", ConnectTimeout: 8 * time.Second})
	if got := p.ConnConfig().ConnectTimeout; got != 8*time.Second {
		t.Errorf("ConnectTimeout 8s: %v, want 8s", got)
	}
	// Without bounds of the caller's, the URL's stand.
	p = openT(t, Config{URL: withParams("connect_timeout=7&statement_timeout=1234"), Name: "queen/store"})
	if got := p.ConnConfig().ConnectTimeout; got != 7*time.Second {
		t.Errorf("no ConnectTimeout and the URL's connect_timeout=7: %v, want 7s", got)
	}
	if got := show(t, p, "statement_timeout"); got != "1234ms" {
		t.Errorf("no StatementTimeout and the URL's statement_timeout=1234: %q, want 1234ms", got)
	}
}

// TestOpenBadURL: a URL pgx cannot parse is ErrBadURL, whose message does
// not quote it (it may hold a password).
func TestOpenBadURL(t *testing.T) {
	p, err := Open(Config{URL: "postgres://u:secret@host:notaport/x"})
	if p != nil || !errors.Is(err, ErrBadURL) || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Open on a bad URL = %v, %v; want ErrBadURL without the URL", p, err)
	}
}

// TestNoConnection: nothing listening is ErrNoConnection (and so
// ErrUnavailable) within the acquire timeout, and fn never runs.
func TestNoConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	p := openT(t, Config{URL: fmt.Sprintf("postgres://u@127.0.0.1:%d/x?sslmode=disable", port), AcquireTimeout: time.Second})
	ran := false
	start := time.Now()
	err = p.Do(ctxT(t), Idempotent, func(context.Context, *pgxpool.Conn) error { ran = true; return nil })
	if !errors.Is(err, ErrNoConnection) || !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConnectionLost) || ran {
		t.Fatalf("Do with nothing listening = %v (fn ran: %v), want ErrNoConnection", err, ran)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Do took %v to fail", d)
	}
}

// TestAcquireTimeout: with the only connection held, Do fails with
// ErrNoConnection at AcquireTimeout; a caller that cancels gets its own
// error, not ErrUnavailable.
func TestAcquireTimeout(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	p := openT(t, Config{MaxConns: 1, AcquireTimeout: 300 * time.Millisecond})
	held, release := make(chan struct{}), make(chan struct{})
	go p.Do(ctxT(t), Unsent, func(context.Context, *pgxpool.Conn) error {
		close(held)
		<-release
		return nil
	})
	defer close(release)
	<-held
	start := time.Now()
	err := p.Do(ctxT(t), Unsent, func(context.Context, *pgxpool.Conn) error { return nil })
	if d := time.Since(start); !errors.Is(err, ErrNoConnection) || d < 250*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Do with the pool exhausted = %v after %v, want ErrNoConnection after about 300ms", err, d)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if err := p.Do(ctx, Unsent, func(context.Context, *pgxpool.Conn) error { return nil }); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Do by a caller that gave up = %v, want context.Canceled", err)
	}
}

// TestCallTimeout: CallTimeout bounds fn's context. The pool's connection
// is opened first, by a call of its own: dialling counts against a call's
// timeout too, and on a loaded machine it once took the whole of it.
func TestCallTimeout(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	p := openT(t, Config{CallTimeout: time.Second, MaxConns: 1})
	if err := p.Do(ctxT(t), Idempotent, func(ctx context.Context, c *pgxpool.Conn) error { return c.Ping(ctx) }); err != nil {
		t.Fatalf("the first call, which opens the connection: %v", err)
	}
	start := time.Now()
	err := p.Do(ctxT(t), Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, "SELECT pg_sleep(10)")
		return err
	})
	if d := time.Since(start); err == nil || errors.Is(err, ErrUnavailable) || d > 8*time.Second {
		t.Fatalf("a statement past CallTimeout = %v after %v, want the statement's own failure at about 1s", err, d)
	}
}

// notSent is an error pgconn.SafeToRetry accepts: the statement was not
// sent.
type notSent struct{}

func (notSent) Error() string     { return "test: closed before the statement was sent" }
func (notSent) SafeToRetry() bool { return true }

// TestRetryRule is the rule on a lost connection, call by call: how many
// tries and which error, for each kind of failure and each Retry.
func TestRetryRule(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	p := openT(t, Config{})
	sqlErr := &pgconn.PgError{Code: "23505"}
	for _, c := range []struct {
		name   string
		retry  Retry
		fails  []error // the error of each try, in order; nil succeeds
		tries  int
		want   error // nil: success
		asItIs bool  // the error is fn's own, unwrapped into ours
	}{
		{"never sent, then fine", Unsent, []error{notSent{}, nil}, 2, nil, false},
		{"never sent twice", Unsent, []error{notSent{}, notSent{}}, 2, ErrNoConnection, false},
		{"server shutting down, then fine", Unsent, []error{&pgconn.PgError{Code: "57P01"}, nil}, 2, nil, false},
		{"lost after sending, not repeatable", Unsent, []error{io.ErrUnexpectedEOF, nil}, 1, ErrConnectionLost, false},
		{"lost after sending, idempotent", Idempotent, []error{io.ErrUnexpectedEOF, nil}, 2, nil, false},
		{"lost twice, idempotent", Idempotent, []error{io.ErrUnexpectedEOF, io.ErrUnexpectedEOF}, 2, ErrConnectionLost, false},
		{"never sent, then lost", Unsent, []error{notSent{}, io.ErrUnexpectedEOF}, 2, ErrConnectionLost, false},
		{"connection exception class 08", Unsent, []error{&pgconn.PgError{Code: "08006"}}, 1, ErrConnectionLost, false},
		{"an SQL error is not retried", Idempotent, []error{sqlErr, nil}, 1, sqlErr, true},
		{"a deadline is the caller's", Idempotent, []error{context.DeadlineExceeded, nil}, 1, context.DeadlineExceeded, true},
	} {
		tries := 0
		err := p.Do(ctxT(t), c.retry, func(context.Context, *pgxpool.Conn) error {
			tries++
			return c.fails[tries-1]
		})
		switch {
		case tries != c.tries:
			t.Errorf("%s: %d tries, want %d", c.name, tries, c.tries)
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want success", c.name, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		case c.asItIs && errors.Is(err, ErrUnavailable):
			t.Errorf("%s: %v wraps ErrUnavailable; the connection was fine", c.name, err)
		}
	}
}

// TestLostWithTheStatementRunning, for real: a connection cut while the
// server runs the statement is ErrConnectionLost for a call that is not
// idempotent (it may have been applied), and is tried once more, on a new
// connection, for one that is.
func TestLostWithTheStatementRunning(t *testing.T) {
	storetest.NeedManaged(t, pg)
	px := pg.StartProxy(t)
	p := openT(t, Config{URL: px.URL(pg), MaxConns: 2})
	run := func(retry Retry) (int, error) {
		var tries atomic.Int64
		err := p.Do(ctxT(t), retry, func(ctx context.Context, c *pgxpool.Conn) error {
			if tries.Add(1) == 1 {
				go func() {
					waitRunning(t, "SELECT pg_sleep(3)")
					px.Cut()
				}()
				_, err := c.Exec(ctx, "SELECT pg_sleep(3)")
				return err
			}
			_, err := c.Exec(ctx, "SELECT 1")
			return err
		})
		return int(tries.Load()), err
	}
	if tries, err := run(Unsent); tries != 1 || !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("cut under a call not idempotent: %d tries, %v; want 1, ErrConnectionLost", tries, err)
	}
	if tries, err := run(Idempotent); tries != 2 || err != nil {
		t.Fatalf("cut under an idempotent call: %d tries, %v; want 2, success", tries, err)
	}
}

// waitRunning waits until the server runs query on some session.
func waitRunning(t *testing.T, query string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		conn, err := pgx.Connect(context.Background(), pg.URL())
		if err == nil {
			err = conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = $1", query).Scan(&n)
			conn.Close(context.Background())
		}
		if err == nil && n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("%q never ran on the server", query)
}

// TestDatabaseRestart: after a restart every pooled connection is dead;
// the next call, even one not idempotent, finds that before its statement
// runs (the server said it was shutting down) and succeeds on a new
// connection without the caller seeing anything.
func TestDatabaseRestart(t *testing.T) {
	storetest.NeedManaged(t, pg)
	p := openT(t, Config{NoPingOnAcquire: true, MaxConns: 1})
	one := func(ctx context.Context, c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, "SELECT 1")
		return err
	}
	if err := p.Do(ctxT(t), Unsent, one); err != nil {
		t.Fatal(err)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	tries := 0
	err := p.Do(ctxT(t), Unsent, func(ctx context.Context, c *pgxpool.Conn) error {
		tries++
		return one(ctx, c)
	})
	if err != nil || tries != 2 {
		t.Fatalf("first call after a restart: %d tries, %v; want 2 (the dead connection, then a new one), success", tries, err)
	}
}

// TestLocked: processes creating the same tables at once all succeed
// (without the lock, CREATE TABLE IF NOT EXISTS may fail on the type's
// unique index), and the lock keys are the ones the earlier releases
// took, so that processes of both releases booting together still
// exclude each other.
func TestLocked(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	schema := pgx.Identifier{pg.FreshSchema(t)}.Sanitize()
	p := openT(t, Config{MaxConns: 8})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- p.Locked(ctxT(t), "test "+schema, func(ctx context.Context, tx pgx.Tx) error {
				return ExecAll(ctx, tx, "CREATE SCHEMA IF NOT EXISTS "+schema,
					"CREATE TABLE IF NOT EXISTS "+schema+".t (k text PRIMARY KEY)",
					"CREATE TABLE IF NOT EXISTS "+schema+".u (k text PRIMARY KEY)")
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every statement ran, in order (u after t).
	var both bool
	if err := p.Do(ctxT(t), Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL", schema+".t", schema+".u").Scan(&both)
	}); err != nil || !both {
		t.Fatalf("the tables Locked's statements create: both exist %v, %v", both, err)
	}
	for _, name := range []string{"queen-ephemeral schema queen_ephemeral", "queen-ephemeral cell queen_ephemeral", "queen-gateway catalog tables"} {
		h := fnv.New64a()
		h.Write([]byte(name))
		if LockKey(name) != int64(h.Sum64()) {
			t.Errorf("LockKey(%q) = %d, want FNV-1a %d", name, LockKey(name), int64(h.Sum64()))
		}
	}
	// The lock is held inside fn: another session cannot take it.
	ran := false
	err := p.Locked(ctxT(t), "held", func(ctx context.Context, tx pgx.Tx) error {
		ran = true
		conn, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", LockKey("held")).Scan(&got); err != nil || got {
			return fmt.Errorf("another session took the lock inside Locked: %v, %v", got, err)
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Locked: %v (fn ran: %v)", err, ran)
	}
}

// TestClosed: Do after Close is ErrClosed, and Close twice is fine.
func TestClosed(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	p := openT(t, Config{})
	p.Close()
	p.Close()
	if err := p.Do(ctxT(t), Idempotent, func(context.Context, *pgxpool.Conn) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
}
