// Package pg is how the three PostgreSQL users — the broker's store
// (store/postgres), the cell's membership (cell) and the gateway's catalog
// (gateway/catalog) — open a pool, create their tables and run a call, so
// that they bound their waits and fail on a lost connection the same way.
//
// Opening (Open): a pool of at most MaxConns connections, none kept open
// when idle, with application_name naming the binary and the role
// ("queen/store", "queen/cell", "queen-gateway/catalog"; an application_name
// the URL sets is kept, the role appended). The dial and each statement are
// bounded by the caller's ConnectTimeout (never less than
// MinConnectTimeout) and StatementTimeout, the latter set as the server's
// statement_timeout; a URL (or PG* variable) may shorten either, never
// lengthen it.
//
// DDL (Locked): a transaction that first takes a transaction-scoped
// advisory lock, whose key is LockKey of a name the caller fixes, so that
// processes booting together do not race on CREATE ... IF NOT EXISTS.
//
// A call (Do), and the rule on a lost connection:
//
//   - No connection within AcquireTimeout (or the call's deadline): the
//     error wraps ErrNoConnection. Nothing was sent.
//   - The connection failed under the call (a network error, the server
//     ending the session: SQLSTATE class 08, 57P01-57P03) and the statement
//     provably never ran (pgconn could not send it, or the server was
//     shutting down): tried once more on another connection within the
//     same deadline, whatever the call. Failing again, the error wraps
//     ErrNoConnection: nothing was applied.
//   - The connection failed after the statement may have run: a call the
//     caller declared Idempotent (a read, an upsert of one value, a delete
//     whose answer is not read) is tried once more the same way; any other
//     call, and a second failure, is an error wrapping ErrConnectionLost:
//     it may or may not have been applied.
//   - Anything else (an SQL error, statement_timeout, the caller's context
//     ending) is returned as it is: the connection is fine.
//
// ErrNoConnection and ErrConnectionLost both wrap ErrUnavailable. Each
// caller maps them onto the errors it documents to its own users.
package pg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config says which database, for what, and how patient to be.
type Config struct {
	// URL is a libpq connection string or URL; what it leaves out comes
	// from the PG* environment variables, as pgx reads them.
	URL string
	// Name is application_name: the binary and the role, "queen/store".
	Name string
	// ConnectTimeout bounds setting up a connection (raised to
	// MinConnectTimeout when shorter), StatementTimeout each statement
	// (the server's statement_timeout). Zero leaves the URL's (or none);
	// otherwise the URL's applies only when shorter.
	ConnectTimeout, StatementTimeout time.Duration
	// AcquireTimeout bounds the wait for a pooled connection (dialing
	// included) in Do; CallTimeout bounds a whole Do, retry included.
	// Zero: only the caller's context bounds them.
	AcquireTimeout, CallTimeout time.Duration
	// MaxConns bounds the pool (at least 1).
	MaxConns int32
	// NoPingOnAcquire: pgxpool pings a connection idle over a second
	// before handing it out; a caller whose every call is the liveness
	// check turns that off (a connection found dead before sending is
	// tried again on another, as every call is).
	NoPingOnAcquire bool
}

// MinConnectTimeout is the least time a connection being set up is
// given, whatever the caller waits for it. The pool finishes a connection
// in the background after the call that asked for it gave up (the call is
// still bounded by AcquireTimeout or its context), and the next call uses
// it. Abandoning it instead would have the server fork and start a backend
// for nothing while the next call asks for another: a server slow to
// accept (many brokers starting at once on two cores, each connection
// 20 ms of its CPU; docs/development.md) then queues ever more connections
// that are all abandoned, and never catches up.
const MinConnectTimeout = 5 * time.Second

// ErrBadURL: the URL or the PG* environment cannot be parsed. pgx's own
// message may quote the password, so it is not kept.
var ErrBadURL = errors.New("cannot parse the database URL or PG* environment")

// Pool is a bounded pool of connections to one database.
type Pool struct {
	cfg    Config
	pool   *pgxpool.Pool
	closed atomic.Bool
}

// Open builds the pool. It does not connect: the first call does.
func Open(cfg Config) (*Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, ErrBadURL
	}
	pcfg.MaxConns = max(cfg.MaxConns, 1)
	pcfg.MinConns = 0
	if cfg.NoPingOnAcquire {
		pcfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	cc := pcfg.ConnConfig
	if want := max(cfg.ConnectTimeout, MinConnectTimeout); cfg.ConnectTimeout > 0 && (cc.ConnectTimeout <= 0 || cc.ConnectTimeout > want) {
		cc.ConnectTimeout = want
	}
	if cfg.StatementTimeout > 0 {
		if own, ok := parseTimeout(cc.RuntimeParams["statement_timeout"]); !ok || own <= 0 || own > cfg.StatementTimeout {
			cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
		}
	}
	cc.RuntimeParams["application_name"] = appName(cc.RuntimeParams["application_name"], cfg.Name)
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("pool: %w", err)
	}
	return &Pool{cfg: cfg, pool: pool}, nil
}

// appName is the application_name: ours, or the URL's with our role after
// it, so that the broker's store and cell, which share one URL, stay
// apart in pg_stat_activity. PostgreSQL keeps 63 bytes of it.
func appName(own, ours string) string {
	if own == "" {
		return ours
	}
	if _, role, ok := strings.Cut(ours, "/"); ok {
		return own + "/" + role
	}
	return own
}

// parseTimeout reads a statement_timeout as PostgreSQL does: a number of
// milliseconds, or a number and one of its units. ok is false for what it
// does not know (ours is used then).
func parseTimeout(s string) (time.Duration, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9') {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > 1<<31 {
		return 0, false
	}
	unit, ok := map[string]time.Duration{
		"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour,
	}[strings.TrimSpace(s[i:])]
	return time.Duration(n) * unit, ok
}

// ConnConfig is a copy of the pool's connection configuration (timeouts and
// application_name included), for a connection of its own outside the
// pool: LISTEN belongs to a session.
func (p *Pool) ConnConfig() *pgx.ConnConfig { return p.pool.Config().ConnConfig.Copy() }

// Ping checks that a connection can be had and answers.
func (p *Pool) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }

// Reset closes every pooled connection, so that none found dead after a
// failed ping is handed out again.
func (p *Pool) Reset() { p.pool.Reset() }

// Close closes the pool, waiting for connections in use to be released.
// Do fails with ErrClosed after it. It is safe to call more than once.
func (p *Pool) Close() {
	if !p.closed.Swap(true) {
		p.pool.Close()
	}
}
