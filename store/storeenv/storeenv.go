// Package storeenv chooses and opens the broker's store from its
// environment (D16): PostgreSQL when a database is named, the embedded
// file otherwise.
//
//	QUEEN_DATABASE_URL                   PostgreSQL URL or DSN; the PG* variables fill what it omits
//	PGHOST                               without QUEEN_DATABASE_URL: PostgreSQL from the PG* variables alone
//	QUEEN_DATABASE_SCHEMA                the store's schema (default queen_ephemeral; never public)
//	QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS    wait for a connection (default 2000)
//	QUEEN_DATABASE_STATEMENT_TIMEOUT_MS  statement_timeout (default 2000)
//	QUEEN_DATA_DIR                       the embedded store's directory (default ./queen-data)
package storeenv

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/embedded"
	"github.com/queenmq/ephemeral/store/postgres"
)

// Backend names a store implementation.
type Backend string

const (
	Postgres Backend = "postgres"
	Embedded Backend = "embedded"
)

// DefaultDataDir is QUEEN_DATA_DIR's default.
const DefaultDataDir = "./queen-data"

// Choice is the store the environment asks for, with its configuration.
type Choice struct {
	Backend  Backend
	Postgres postgres.Config // when Backend is Postgres
	Embedded embedded.Config // when Backend is Embedded
}

// FromEnv reads the choice; getenv is os.Getenv outside tests. A value it
// cannot use is an error, so the broker refuses to boot on it.
func FromEnv(getenv func(string) string) (Choice, error) {
	url, host := getenv("QUEEN_DATABASE_URL"), getenv("PGHOST")
	if url == "" && host == "" {
		dir := getenv("QUEEN_DATA_DIR")
		if dir == "" {
			dir = DefaultDataDir
		}
		return Choice{Backend: Embedded, Embedded: embedded.Config{Dir: dir}}, nil
	}
	c := Choice{Backend: Postgres, Postgres: postgres.Config{URL: url, Schema: getenv("QUEEN_DATABASE_SCHEMA")}}
	var err error
	if c.Postgres.AcquireTimeout, err = millis(getenv, "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS"); err != nil {
		return Choice{}, err
	}
	if c.Postgres.StatementTimeout, err = millis(getenv, "QUEEN_DATABASE_STATEMENT_TIMEOUT_MS"); err != nil {
		return Choice{}, err
	}
	return c, nil
}

// millis reads a positive integer of milliseconds; unset is 0 (the
// store's default).
func millis(getenv func(string) string, name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || n > 3_600_000 {
		return 0, fmt.Errorf("%s=%q: want milliseconds, 1 to 3600000", name, v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// Open opens the chosen store. For PostgreSQL it returns even when the
// database is unreachable (the store reports down and retries; see
// Store.Ready), failing only on a configuration it cannot use.
func Open(ctx context.Context, c Choice, logger *slog.Logger) (store.Store, error) {
	// Each branch returns a nil interface on error, never a typed nil.
	switch c.Backend {
	case Postgres:
		cfg := c.Postgres
		cfg.Logger = logger
		s, err := postgres.Open(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	case Embedded:
		s, err := embedded.Open(c.Embedded)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("storeenv: unknown backend %q", c.Backend)
}
