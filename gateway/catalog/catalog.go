// Package catalog is the gateway's durable catalog: the plans (what a tenant
// may do), the tenants (which plan each is on) and the metered usage (how
// many messages and deliveries each tenant made, per minute).
//
// It has the two backends of the broker's own store (package store): a
// PostgreSQL database through pgx when a database URL is given, so that
// several gateways share one catalog, and a bbolt file under the data
// directory otherwise. Open picks one. The proxy keeps the plans and
// tenants in memory (Snapshot) and reloads them when Revision changes; it
// counts usage in memory and flushes it in batches (AddUsage).
//
// The catalog keeps no reference between tenants and plans: a tenant may
// name a plan that does not exist (yet, or any more), and deleting a plan
// leaves its tenants alone. What that means is the proxy's decision.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/queenmq/ephemeral/store/storeenv"
)

// Plan is what a tenant may do. Zero means unlimited for the numbers.
type Plan struct {
	Name     string   `json:"name"`
	Features Features `json:"features"`
	// MessagesPerPeriod bounds the messages of a tenant over any
	// PeriodSeconds (which must then be positive).
	MessagesPerPeriod int64 `json:"messagesPerPeriod"`
	PeriodSeconds     int64 `json:"periodSeconds"`
	MessagesPerSecond int64 `json:"messagesPerSecond"`
	ParkedSlots       int64 `json:"parkedSlots"`
}

// Features are the plan's switches; each is off unless set.
type Features struct {
	Ephemeral bool `json:"ephemeral"`
}

// Tenant is a tenant and the name of its plan.
type Tenant struct {
	Name string `json:"tenant"`
	Plan string `json:"plan"`
}

// Class is a metered route class.
type Class string

const (
	Messages   Class = "messages"
	Deliveries Class = "deliveries"
)

// Usage is one row: a tenant's count of a class in one minute. Minute is
// the unix time of the minute's start, in seconds (a multiple of 60).
type Usage struct {
	Tenant string
	Class  Class
	Minute int64
	Count  int64
}

// Store keeps plans, tenants and usage. Writes are upserts, durable when
// they return nil; a write that returned an error may or may not have
// happened.
//
// Errors: errors.Is(err, ErrInvalid) means the arguments can never be
// stored (the message says why, fit for a 400 answer); errors.Is(err,
// ErrUnavailable) means no working storage in time, or the store is
// closed, and that nothing was written, so a write can be retried (a usage
// batch kept for the next flush) without counting twice; anything else is
// a failed operation that may or may not have been applied.
type Store interface {
	PutPlan(ctx context.Context, p Plan) error
	GetPlan(ctx context.Context, name string) (p Plan, found bool, err error)
	DeletePlan(ctx context.Context, name string) (existed bool, err error)
	PutTenant(ctx context.Context, t Tenant) error
	GetTenant(ctx context.Context, name string) (t Tenant, found bool, err error)

	// Snapshot returns every plan and every tenant, each ordered by name
	// (byte order), as of one moment. Read Revision first: a write
	// committed meanwhile then changes it again, so it is not missed.
	Snapshot(ctx context.Context) ([]Plan, []Tenant, error)
	// Revision changes with every successful PutPlan, DeletePlan
	// (including of a plan that did not exist) and PutTenant, whichever
	// gateway made it; reads and usage leave it alone. Values of one
	// storage compare with each other only. It is one indexed read,
	// cheap to call every second.
	Revision(ctx context.Context) (int64, error)

	// AddUsage adds each row's Count to the stored count of (Tenant,
	// Class, Minute), all rows in one transaction: either every row is
	// counted or none is. Rows may repeat a key; their counts add up. A
	// batch with an invalid row is refused whole with ErrInvalid.
	AddUsage(ctx context.Context, rows []Usage) error
	// UsageSince sums each tenant's counts per class over the minutes >=
	// since (unix seconds). Tenants and classes with nothing counted are
	// absent.
	UsageSince(ctx context.Context, since int64) (map[string]map[Class]int64, error)

	// Close releases the storage; it is safe to call more than once, and
	// every method fails with ErrClosed after it.
	Close() error
}

var (
	// ErrInvalid: the arguments can never be stored. Errors that match it
	// are *InvalidError, whose message says what is wrong.
	ErrInvalid = errors.New("invalid catalog argument")
	// ErrUnavailable: no working storage in time, or the store is closed.
	ErrUnavailable = errors.New("catalog unavailable")
	// ErrClosed is returned after Close; it wraps ErrUnavailable.
	ErrClosed = fmt.Errorf("%w: closed", ErrUnavailable)
)

// FileName is the embedded catalog's file inside the data directory, next
// to the broker's own (store/embedded.FileName), which it does not touch.
const FileName = "gateway.db"

// Open opens the catalog: in PostgreSQL when databaseURL is set (creating
// the tables if missing), else in the bbolt file FileName under dataDir
// (created if missing). Unlike the broker's store it does not start down
// and retry: a database it cannot reach within ctx and the connect
// timeout is an error, and the caller decides whether to retry or exit.
func Open(ctx context.Context, databaseURL, dataDir string) (Store, error) {
	// Each branch returns a nil interface on error, never a typed nil.
	if databaseURL != "" {
		s, err := openPostgres(ctx, databaseURL)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	if dataDir == "" {
		return nil, errors.New("catalog: neither a database URL nor a data directory")
	}
	s, err := openEmbedded(filepath.Join(dataDir, FileName))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OpenEnv opens the catalog the environment names, as the broker chooses
// its store: QUEEN_DATABASE_URL when set, else QUEEN_DATA_DIR (empty here:
// ./queen-data, the broker's; cmd/queen-gateway's own default is
// ./queen-gateway-data). getenv is os.Getenv outside tests.
func OpenEnv(ctx context.Context, getenv func(string) string) (Store, error) {
	dir := getenv("QUEEN_DATA_DIR")
	if dir == "" {
		dir = storeenv.DefaultDataDir
	}
	return Open(ctx, getenv("QUEEN_DATABASE_URL"), dir)
}
