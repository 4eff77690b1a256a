package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	// ErrUnavailable: no working connection (either of the two below).
	ErrUnavailable = errors.New("database unavailable")
	// ErrNoConnection: no connection was had in time, or the statement
	// could not be sent on two: nothing was applied.
	ErrNoConnection = fmt.Errorf("%w: no connection", ErrUnavailable)
	// ErrConnectionLost: the connection failed after the statement may
	// have run: it may or may not have been applied.
	ErrConnectionLost = fmt.Errorf("%w: connection lost", ErrUnavailable)
	// ErrClosed: Do after Close.
	ErrClosed = errors.New("pool closed")
)

// Retry says which calls may be sent again after a lost connection.
type Retry int

const (
	// Unsent calls are sent again only when they provably never ran.
	Unsent Retry = iota
	// Idempotent calls are sent again also when they may have run: the
	// caller has decided that running them twice is running them once.
	Idempotent
)

// Do runs fn on a pooled connection, bounded by CallTimeout and
// AcquireTimeout, and applies the package's rule on a lost connection
// (see the package comment): at most one more try, on another connection,
// within the same deadline.
func (p *Pool) Do(ctx context.Context, retry Retry, fn func(context.Context, *pgxpool.Conn) error) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.cfg.CallTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.CallTimeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		conn, err := p.acquire(ctx)
		if err != nil {
			return err
		}
		err = fn(ctx, conn)
		lost := err != nil && connectionLost(err, conn.Conn())
		conn.Release()
		if !lost {
			return err
		}
		unsent := neverRan(err)
		if attempt == 0 && ctx.Err() == nil && (unsent || retry == Idempotent) {
			continue
		}
		if unsent {
			return fmt.Errorf("%w: %w", ErrNoConnection, err)
		}
		return fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
}

// acquire takes a connection within AcquireTimeout. A caller that gave up
// (its context cancelled, not timed out) gets its own error back: it asked
// for nothing more.
func (p *Pool) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	actx := ctx
	if p.cfg.AcquireTimeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, p.cfg.AcquireTimeout)
		defer cancel()
	}
	conn, err := p.pool.Acquire(actx)
	switch {
	case err == nil:
		return conn, nil
	case p.closed.Load():
		return nil, ErrClosed
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return nil, err
	default:
		return nil, fmt.Errorf("%w: %w", ErrNoConnection, err)
	}
}

// Locked runs fn in a transaction that first takes the advisory lock of
// LockKey(lock), held until it ends: DDL that processes booting together
// must not race on. It is Idempotent (fn must create only what is missing).
func (p *Pool) Locked(ctx context.Context, lock string, fn func(context.Context, pgx.Tx) error) error {
	return p.Do(ctx, Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", LockKey(lock)); err != nil {
				return err
			}
			return fn(ctx, tx)
		})
	})
}

// ExecAll runs statements in order, stopping at the first failure.
func ExecAll(ctx context.Context, tx pgx.Tx, statements ...string) error {
	for _, s := range statements {
		if _, err := tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// LockKey is the advisory lock key of a name: its 64-bit FNV-1a hash. The
// names are fixed by their users, because processes of different releases
// booting together must take the same lock.
func LockKey(name string) int64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= prime
	}
	return int64(h)
}

// connectionLost tells a failure of the connection (the database went away
// or refused to serve) from a failure of the statement. A timeout or a
// cancelled context is the statement's: the caller's bound, not a loss.
func connectionLost(err error, c *pgx.Conn) bool {
	if pgconn.Timeout(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || serverShuttingDown(pe.Code)
	}
	return pgconn.SafeToRetry(err) || c.IsClosed() ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// neverRan: the statement was not sent, or the server ended the session
// (admin_shutdown, crash_shutdown, cannot_connect_now) before it could
// commit, so running it again cannot apply it twice.
func neverRan(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return serverShuttingDown(pe.Code)
	}
	return pgconn.SafeToRetry(err)
}

func serverShuttingDown(code string) bool {
	return code == "57P01" || code == "57P02" || code == "57P03"
}
