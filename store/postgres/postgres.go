// Package postgres is the store.Store kept in PostgreSQL through pgx
// (pgxpool), used when the broker is given a database (D16).
//
// Its tables live in their own schema (queen_ephemeral unless configured),
// created on boot under an advisory lock so that brokers of a cell booting
// together do not race. Every call is bounded: a connection must be had
// within AcquireTimeout and a statement finish within StatementTimeout
// (also set as the server's statement_timeout), so a slow or absent
// database answers quickly instead of hanging. The pool, the lock and the
// rule on a lost connection are internal/pg's: a statement that never ran
// is sent again once; one that may have run is sent again once only by the
// reads and the upserts of one value (running them twice is running them
// once), never by a delete, whose answer says whether the row existed. No
// connection, or one still lost, is store.ErrUnavailable (503).
//
// Open does not fail when the database is unreachable: the store starts
// down, retries in the background every RetryInterval, and closes Ready
// once the schema exists. The same loop pings the database afterwards so
// that Healthy (the /health "store" field) follows it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
	"github.com/queenmq/ephemeral/store"
)

// Defaults for Config's zero values.
const (
	DefaultSchema           = "queen_ephemeral"
	DefaultAcquireTimeout   = 2 * time.Second
	DefaultStatementTimeout = 2 * time.Second
	DefaultRetryInterval    = time.Second
	DefaultMaxConns         = 4
)

// schemaVersion is the layout this build creates and reads.
const schemaVersion = "1"

// clientSlack is how much longer than StatementTimeout the client waits for
// an answer, so that the server's own statement_timeout fires first and the
// connection survives.
const clientSlack = 500 * time.Millisecond

// Config says which database and how patient to be with it.
type Config struct {
	// URL is a libpq connection string or URL. Whatever it leaves out is
	// taken from the standard PG* environment variables (PGHOST, PGPORT,
	// PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...), as pgx reads them;
	// an empty URL uses the environment alone.
	URL string
	// Schema holds the tables; never "public". Default queen_ephemeral.
	Schema string
	// AcquireTimeout bounds the wait for a pooled connection, including
	// dialing a new one. Past it a call fails with store.ErrUnavailable.
	AcquireTimeout time.Duration
	// StatementTimeout bounds one statement, on the server
	// (statement_timeout) and on the client.
	StatementTimeout time.Duration
	// RetryInterval paces the background loop: schema creation while the
	// database is unreachable at boot, then a health ping.
	RetryInterval time.Duration
	// MaxConns bounds the pool (default 4: the store is off the hot path).
	MaxConns int32
	// Logger receives state changes (down, up, ready); nil discards them.
	Logger *slog.Logger
}

// fillDefaults sets every field left zero to its default and checks the
// schema name.
func (c *Config) fillDefaults() error {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if err := validSchema(c.Schema); err != nil {
		return err
	}
	if c.AcquireTimeout <= 0 {
		c.AcquireTimeout = DefaultAcquireTimeout
	}
	if c.StatementTimeout <= 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func validSchema(s string) error {
	switch {
	case len(s) > 63:
		return fmt.Errorf("postgres: schema name %q is over 63 bytes", s)
	case strings.EqualFold(s, "public"):
		return errors.New("postgres: the store keeps its own schema, not public")
	case strings.HasPrefix(strings.ToLower(s), "pg_"):
		return fmt.Errorf("postgres: schema name %q is reserved (pg_)", s)
	case strings.IndexByte(s, 0) >= 0:
		return errors.New("postgres: schema name contains NUL")
	}
	return nil
}

// Store is the PostgreSQL store.Store.
type Store struct {
	cfg  Config
	pool *pg.Pool
	sql  statements
	log  *slog.Logger

	ready   chan struct{}
	isReady atomic.Bool
	healthy atomic.Bool
	closed  atomic.Bool

	stop     context.CancelFunc
	loopCtx  context.Context // cancelled by Close
	loopDone sync.WaitGroup

	// Changes: the LISTEN connection, started by the first call.
	listenOnce sync.Once
	changes    chan struct{}
	listening  atomic.Bool
	closeOnce  sync.Once
}

var _ store.Store = (*Store)(nil)

// Open builds the pool and tries once, within ctx and the timeouts, to
// create the schema. It fails only on a configuration it cannot use; an
// unreachable database leaves the store down and retrying.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	pool, err := pg.Open(pg.Config{
		URL:              cfg.URL,
		Name:             "queen/store",
		ConnectTimeout:   cfg.AcquireTimeout,
		StatementTimeout: cfg.StatementTimeout,
		AcquireTimeout:   cfg.AcquireTimeout,
		CallTimeout:      cfg.AcquireTimeout + cfg.StatementTimeout + clientSlack,
		MaxConns:         cfg.MaxConns,
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	loopCtx, stop := context.WithCancel(context.Background())
	s := &Store{
		cfg:     cfg,
		pool:    pool,
		sql:     newStatements(cfg.Schema),
		log:     cfg.Logger.With("store", "postgres", "schema", cfg.Schema),
		ready:   make(chan struct{}),
		stop:    stop,
		loopCtx: loopCtx,
	}
	if err := s.ensureSchema(ctx); err != nil {
		s.log.Warn("database not ready at boot; serving without it and retrying", "err", err, "every", cfg.RetryInterval)
	}
	s.loopDone.Add(1)
	go s.loop(loopCtx)
	return s, nil
}

// Ready is closed once the schema exists.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// Healthy reports whether the store is ready and its last contact with the
// database (a call or the background ping) succeeded.
func (s *Store) Healthy() bool {
	return s.isReady.Load() && s.healthy.Load() && !s.closed.Load()
}

// Close stops the background loop and closes the pool, waiting for calls
// in flight. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.stop()
		s.loopDone.Wait()
		s.pool.Close()
	})
	return nil
}

// loop creates the schema until it exists, then pings to keep Healthy
// current, each RetryInterval.
func (s *Store) loop(ctx context.Context) {
	defer s.loopDone.Done()
	t := time.NewTicker(s.cfg.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.isReady.Load() {
			if err := s.ensureSchema(ctx); err != nil && ctx.Err() == nil {
				s.log.Debug("database still not ready", "err", err)
			}
			continue
		}
		s.ping(ctx)
	}
}

func (s *Store) ping(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AcquireTimeout+s.cfg.StatementTimeout)
	defer cancel()
	err := s.pool.Ping(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // closing
	}
	s.setHealthy(err)
	if err != nil && !timedOut(err) {
		// The server refused or dropped us: drop every pooled connection,
		// which died with it, so that the first call after it comes back
		// does not find them. A ping that only timed out (every connection
		// busy, or the server slow) says nothing about them: closing them
		// would have the calls after it dial again on a database already
		// slow to answer (TestPingTimeoutKeepsGoodConnections). A
		// connection whose own ping timed out is closed by pgx.
		s.pool.Reset()
	}
}

// timedOut reports whether err is a deadline passing rather than an
// answer from the server or the network.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// setHealthy records the outcome of a contact with the database and logs
// the transitions.
func (s *Store) setHealthy(err error) {
	up := err == nil
	if s.healthy.Swap(up) != up {
		if up {
			s.log.Info("database reachable")
		} else {
			s.log.Warn("database unreachable", "err", err)
		}
	}
}

// ensureSchema creates the schema and tables when they are missing (under
// an advisory lock, so concurrent brokers do not race), then marks the
// store ready. A schema already at this version runs no DDL, so a role
// without CREATE rights works against a schema an operator prepared.
func (s *Store) ensureSchema(ctx context.Context) error {
	if s.isReady.Load() {
		return nil
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	err := s.result(s.pool.Locked(ctx, "queen-ephemeral schema "+s.cfg.Schema, func(ctx context.Context, tx pgx.Tx) error {
		var (
			metaExists bool
			version    *string
			layout     int
		)
		if err := tx.QueryRow(ctx, s.sql.metaExists, s.sql.metaTable).Scan(&metaExists); err != nil {
			return err
		}
		if metaExists {
			err := tx.QueryRow(ctx, s.sql.version).Scan(&version)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			var l string
			err = tx.QueryRow(ctx, s.sql.layout).Scan(&l)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			layout, _ = strconv.Atoi(l) // no row: 0, the first layout
		}
		switch {
		case version != nil && *version == schemaVersion && layout >= layoutVersion:
			return nil // nothing to create: a role without CREATE rights works
		case version != nil && *version == schemaVersion:
			return s.migrate(ctx, tx, layout)
		case version != nil:
			return fmt.Errorf("schema %s is at version %q; this build knows %q", s.cfg.Schema, *version, schemaVersion)
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", s.cfg.Schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, s.sql.createSchema); err != nil {
				return err
			}
		}
		return pg.ExecAll(ctx, tx, append(s.sql.createTables, s.sql.addLayout...)...)
	}))
	if err != nil {
		s.setHealthy(err)
		return err
	}
	if !s.isReady.Swap(true) {
		s.log.Info("database ready")
		close(s.ready)
	}
	s.setHealthy(nil)
	return nil
}

// migrate brings a schema of this version from an earlier layout to this
// one, inside ensureSchema's transaction and lock.
func (s *Store) migrate(ctx context.Context, tx pgx.Tx, from int) error {
	for _, ddl := range s.sql.addLayout {
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("schema %s: adding layout %d to layout %d: %w", s.cfg.Schema, layoutVersion, max(from, 1), err)
		}
	}
	s.log.Info("schema migrated", "from_layout", max(from, 1), "to_layout", layoutVersion)
	return nil
}

var errNotReady = errors.New("the database has not been reachable since boot")

// withConn runs fn on a pooled connection within the configured bounds,
// once the schema exists. retry says whether fn may run twice after a
// connection lost under it (internal/pg's rule): reads and upserts of one
// value may; a delete, whose answer says whether the row existed, may not.
func (s *Store) withConn(ctx context.Context, retry pg.Retry, fn func(context.Context, *pgxpool.Conn) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if !s.isReady.Load() {
		return store.Unavailable(errNotReady)
	}
	return s.result(s.pool.Do(ctx, retry, fn))
}

// result maps a call's outcome onto the store's errors and health: no
// connection, or one lost under the call, is store.ErrUnavailable (503)
// and marks the store down; any other failure is the statement's.
func (s *Store) result(err error) error {
	switch {
	case err == nil:
		s.setHealthy(nil)
		return nil
	case s.closed.Load() || errors.Is(err, pg.ErrClosed):
		return store.ErrClosed
	case errors.Is(err, pg.ErrUnavailable):
		s.setHealthy(err)
		return store.Unavailable(err)
	}
	return err
}
