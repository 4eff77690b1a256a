// Package store defines what the broker keeps durably: queue declarations,
// tenant grants and a few broker settings (D9, D14, D15, D16 in docs/decisions.md).
//
// Contents never come here; a declaration is the tenant, the queue name and
// the options exactly as the client sent them. Two implementations satisfy
// Store: store/postgres (pgx, used when a database URL is set) and
// store/embedded (a bbolt file under a data directory, the default);
// store/storeenv picks one from the environment and store/storetest holds
// the contract suite both pass.
//
// Every method may block on I/O, so the server calls them off its event
// loops (P1) — except Ready and Healthy, which never block.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Declaration is a declared queue: what configure stored, verbatim.
type Declaration struct {
	Tenant string
	Queue  string
	// Options is the JSON object the client sent, byte for byte. The
	// store never decodes, reorders or compacts it; the server echoes it
	// in the 201 answer and resolves the values in force from it at boot.
	Options json.RawMessage
}

// Grant is a tenant's allowance for the ephemeral class (D14). Zero means
// unlimited; negative values are refused with ErrInvalid.
type Grant struct {
	Tenant            string
	MaxBytes          int64
	MaxQueues         int64
	MessagesPerSecond int64
}

// Store keeps declarations, grants and settings. Writes are upserts and
// are durable when they return nil; a write that returns an error may or
// may not have happened, and the caller leaves its memory untouched.
//
// Errors: errors.Is(err, ErrUnavailable) means no working connection was
// had in time (the server answers 503 ephemeral_unavailable);
// errors.Is(err, ErrInvalid) means the arguments can never be stored; any
// other error is a failed write (500 ephemeral_configure_failed or
// ephemeral_delete_failed).
type Store interface {
	// Ready is closed once the store can serve: at once for the embedded
	// store; for PostgreSQL when the schema has been created, which may be
	// after Open returned if the database was down then. The broker loads
	// the declarations when it is closed. It is never reopened.
	Ready() <-chan struct{}
	// Healthy reports the last known state for /health ("ok" when true,
	// "down" when false). It does no I/O and never blocks.
	Healthy() bool

	// LoadDeclarations returns every declaration, ordered by tenant then
	// queue (byte order).
	LoadDeclarations(ctx context.Context) ([]Declaration, error)
	// PutDeclaration creates or replaces the declaration of (Tenant, Queue).
	PutDeclaration(ctx context.Context, d Declaration) error
	// DeleteDeclaration removes it, reporting whether it existed.
	DeleteDeclaration(ctx context.Context, tenant, queue string) (existed bool, err error)

	// LoadGrants returns every grant, ordered by tenant.
	LoadGrants(ctx context.Context) ([]Grant, error)
	GetGrant(ctx context.Context, tenant string) (g Grant, found bool, err error)
	PutGrant(ctx context.Context, g Grant) error
	DeleteGrant(ctx context.Context, tenant string) (existed bool, err error)

	// GetSetting and PutSetting keep small opaque values by key, such as
	// the kill switch (KeyKillSwitch).
	GetSetting(ctx context.Context, key string) (value []byte, found bool, err error)
	PutSetting(ctx context.Context, key string, value []byte) error

	// Revision is the store's change counter: every committed write of a
	// declaration, grant or setting changes it, whoever made it (another
	// broker on the same database, an operator's SQL). A broker compares
	// it with the revision it last applied to know when to reload (D17:
	// changes reach every member of a cell within a heartbeat). Values of
	// one store compare with each other only; read it before loading, so
	// that a write committed meanwhile changes it again.
	Revision(ctx context.Context) (int64, error)
	// Changes returns a channel that receives (coalesced: one pending
	// value at most) soon after a write by anyone changed the revision,
	// including this process's own writes; nil when no other process can
	// write the storage (the embedded store), so there is nothing to
	// watch. It is a hint for promptness: a watcher still polls Revision,
	// since a notification can be lost with a connection.
	Changes() <-chan struct{}

	// Close stops background work and releases the storage. It is safe to
	// call more than once; every method but Ready and Healthy then fails
	// with ErrUnavailable, and Healthy reports false.
	Close() error
}

var (
	// ErrUnavailable: no working storage connection in time (the database
	// is down or unreachable, the pool was exhausted past the acquire
	// timeout, the schema is not created yet, or the store is closed).
	ErrUnavailable = errors.New("store unavailable")
	// ErrClosed is returned after Close; it wraps ErrUnavailable.
	ErrClosed = fmt.Errorf("%w: store closed", ErrUnavailable)
	// ErrInvalid: the arguments can never be stored (see the Validate
	// functions). The server validates first, so this is a bug there.
	ErrInvalid = errors.New("invalid store argument")
)

// Unavailable wraps cause so that errors.Is(err, ErrUnavailable) holds and
// the cause stays readable.
func Unavailable(cause error) error {
	if cause == nil || errors.Is(cause, ErrUnavailable) {
		return cause
	}
	return &wrapped{sentinel: ErrUnavailable, cause: cause}
}

type wrapped struct {
	sentinel error
	cause    error
}

func (w *wrapped) Error() string   { return w.sentinel.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.sentinel, w.cause} }
