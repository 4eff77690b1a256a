package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
)

// The PostgreSQL catalog, shared by every gateway given the same database.
//
// Its tables are named queen_gateway_* and live in the connection's
// current schema (the first of search_path: public unless the URL or the
// role says otherwise, e.g. ?search_path=gateway), beside the broker's own
// schema if the database is shared. They are created on Open when missing,
// under an advisory lock so that gateways booting together do not race; a
// role without CREATE rights works against tables an operator made.
//
// The revision is the one row of queen_gateway_revision, raised by each
// catalog write in its own transaction, first: it is transactional (a
// reader that sees n sees every write up to n; a sequence would not be),
// and since every writer locks that row before anything else, catalog
// writes are serialised and cannot deadlock. An operator who edits plans
// or tenants by hand raises it in the same transaction:
//
//	UPDATE queen_gateway_revision SET n = n + 1;

const (
	// pgConnectTimeout bounds setting up a connection (a URL's
	// connect_timeout may shorten it, not lengthen it): pg.MinConnectTimeout,
	// the least internal/pg gives one.
	pgConnectTimeout = pg.MinConnectTimeout
	// pgStatementTimeout is the server's statement_timeout (a URL's may
	// shorten it); pgCallTimeout bounds a whole call (acquire, statements,
	// commit, the retry after a lost connection) on the client, so a dead
	// database answers instead of hanging.
	pgStatementTimeout = 5 * time.Second
	pgCallTimeout      = 10 * time.Second
	// pgMaxConns: the catalog is off the hot path (the proxy reads its
	// snapshot from memory and flushes usage in batches).
	pgMaxConns = 4
)

var pgDDL = []string{
	// Names are COLLATE "C" so that ORDER BY is byte order, the embedded
	// store's and the contract's.
	`CREATE TABLE IF NOT EXISTS queen_gateway_plans (
		name                text COLLATE "C" PRIMARY KEY,
		ephemeral           boolean NOT NULL DEFAULT false,
		messages_per_period bigint NOT NULL DEFAULT 0 CHECK (messages_per_period >= 0),
		period_seconds      bigint NOT NULL DEFAULT 0 CHECK (period_seconds >= 0),
		messages_per_second bigint NOT NULL DEFAULT 0 CHECK (messages_per_second >= 0),
		parked_slots        bigint NOT NULL DEFAULT 0 CHECK (parked_slots >= 0),
		updated_at          timestamptz NOT NULL DEFAULT now())`,
	`CREATE TABLE IF NOT EXISTS queen_gateway_tenants (
		name       text COLLATE "C" PRIMARY KEY,
		plan       text COLLATE "C" NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now())`,
	`CREATE TABLE IF NOT EXISTS queen_gateway_usage (
		tenant text COLLATE "C" NOT NULL,
		class  text COLLATE "C" NOT NULL,
		minute bigint NOT NULL CHECK (minute >= 0 AND minute % 60 = 0),
		count  bigint NOT NULL CHECK (count >= 0),
		PRIMARY KEY (tenant, class, minute))`,
	// UsageSince reads a window of recent minutes across every tenant.
	`CREATE INDEX IF NOT EXISTS queen_gateway_usage_minute ON queen_gateway_usage (minute)`,
	`CREATE TABLE IF NOT EXISTS queen_gateway_revision (
		one boolean PRIMARY KEY DEFAULT true CHECK (one),
		n   bigint NOT NULL)`,
	pgRevisionRow,
}

const (
	pgTablesExist = `SELECT to_regclass('queen_gateway_plans') IS NOT NULL AND to_regclass('queen_gateway_tenants') IS NOT NULL
		AND to_regclass('queen_gateway_usage') IS NOT NULL AND to_regclass('queen_gateway_revision') IS NOT NULL`
	pgRevisionRow = `INSERT INTO queen_gateway_revision (one, n) VALUES (true, 1) ON CONFLICT (one) DO NOTHING`
	pgBump        = `UPDATE queen_gateway_revision SET n = n + 1`
	pgRevision    = `SELECT n FROM queen_gateway_revision`

	pgPlanColumns = `name, ephemeral, messages_per_period, period_seconds, messages_per_second, parked_slots`
	pgPutPlan     = `INSERT INTO queen_gateway_plans (` + pgPlanColumns + `) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO UPDATE SET ephemeral = EXCLUDED.ephemeral,
			messages_per_period = EXCLUDED.messages_per_period, period_seconds = EXCLUDED.period_seconds,
			messages_per_second = EXCLUDED.messages_per_second, parked_slots = EXCLUDED.parked_slots, updated_at = now()`
	pgGetPlan    = `SELECT ` + pgPlanColumns + ` FROM queen_gateway_plans WHERE name = $1`
	pgLoadPlans  = `SELECT ` + pgPlanColumns + ` FROM queen_gateway_plans ORDER BY name`
	pgDeletePlan = `DELETE FROM queen_gateway_plans WHERE name = $1`

	pgPutTenant = `INSERT INTO queen_gateway_tenants (name, plan) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET plan = EXCLUDED.plan, updated_at = now()`
	pgGetTenant   = `SELECT name, plan FROM queen_gateway_tenants WHERE name = $1`
	pgLoadTenants = `SELECT name, plan FROM queen_gateway_tenants ORDER BY name`

	// One statement, so one transaction. mergeUsage gives each key once
	// (ON CONFLICT cannot update a row twice in one statement) and sorted
	// (concurrent batches lock rows in the same order).
	pgAddUsage = `INSERT INTO queen_gateway_usage AS u (tenant, class, minute, count)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
		ON CONFLICT (tenant, class, minute) DO UPDATE SET count = u.count + EXCLUDED.count`
	pgUsageSince = `SELECT tenant, class, sum(count)::bigint FROM queen_gateway_usage WHERE minute >= $1 GROUP BY tenant, class`
)

var _ Store = (*pgStore)(nil)

type pgStore struct {
	pool      *pg.Pool
	closed    atomic.Bool
	closeOnce sync.Once
}

func openPostgres(ctx context.Context, url string) (*pgStore, error) {
	pool, err := pg.Open(pg.Config{
		URL:              url,
		Name:             "queen-gateway/catalog",
		ConnectTimeout:   pgConnectTimeout,
		StatementTimeout: pgStatementTimeout,
		CallTimeout:      pgCallTimeout,
		MaxConns:         pgMaxConns,
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	s := &pgStore{pool: pool}
	if err := s.ensureTables(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("catalog: preparing the tables: %w", err)
	}
	return s, nil
}

// ensureTables creates what is missing, under the advisory lock
// "queen-gateway catalog tables". When every table exists it runs no DDL,
// so a role without CREATE rights works.
func (s *pgStore) ensureTables(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.result(s.pool.Locked(ctx, "queen-gateway catalog tables", func(ctx context.Context, tx pgx.Tx) error {
		var exist bool
		if err := tx.QueryRow(ctx, pgTablesExist).Scan(&exist); err != nil {
			return err
		}
		if exist {
			// The row may be gone (a TRUNCATE by hand); without it no
			// write would move the revision. Checked first, so that a
			// role without INSERT on it opens when it is there.
			var row bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen_gateway_revision)`).Scan(&row); err != nil || row {
				return err
			}
			_, err := tx.Exec(ctx, pgRevisionRow)
			return err
		}
		return pg.ExecAll(ctx, tx, pgDDL...)
	}), false)
}

// Which calls may run twice after a lost connection (pg.Idempotent): the
// reads; PutPlan and PutTenant, an upsert of one value (the revision
// moves twice, which readers take as one change). Not DeletePlan, whose
// answer says whether the plan existed, nor AddUsage, whose counts add.

// read runs fn, which writes nothing, on a pooled connection within
// pgCallTimeout, by internal/pg's rule on a lost connection (Idempotent).
func (s *pgStore) read(ctx context.Context, fn func(context.Context, *pgxpool.Conn) error) error {
	return s.call(ctx, pg.Idempotent, false, fn)
}

// write runs fn in a transaction that first raises the revision; retry
// says whether it may run twice.
func (s *pgStore) write(ctx context.Context, retry pg.Retry, fn func(context.Context, pgx.Tx) error) error {
	return s.call(ctx, retry, true, func(ctx context.Context, c *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, pgBump); err != nil {
				return err
			}
			return fn(ctx, tx)
		})
	})
}

func (s *pgStore) call(ctx context.Context, retry pg.Retry, writes bool, fn func(context.Context, *pgxpool.Conn) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.result(s.pool.Do(ctx, retry, fn), writes)
}

// result maps a call's outcome onto the catalog's errors, as the Store
// interface documents them: ErrUnavailable only when nothing was written
// (no connection, a statement that never ran, a connection lost under a
// read). A write lost after it may have applied is an error of its own,
// not ErrUnavailable: retrying it might apply it twice (a usage batch
// counted twice).
func (s *pgStore) result(err error, mayHaveWritten bool) error {
	switch {
	case err == nil:
		return nil
	case s.closed.Load() || errors.Is(err, pg.ErrClosed):
		return ErrClosed
	case errors.Is(err, pg.ErrNoConnection):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, pg.ErrConnectionLost) && !mayHaveWritten:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, pg.ErrConnectionLost):
		return fmt.Errorf("catalog: the connection was lost; the write may or may not have been applied: %w", err)
	}
	return err
}

func (s *pgStore) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.pool.Close()
	})
	return nil
}

func (s *pgStore) PutPlan(ctx context.Context, p Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return s.write(ctx, pg.Idempotent, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pgPutPlan, p.Name, p.Features.Ephemeral, p.MessagesPerPeriod, p.PeriodSeconds, p.MessagesPerSecond, p.ParkedSlots)
		return err
	})
}

func scanPlan(r pgx.CollectableRow) (Plan, error) {
	var p Plan
	err := r.Scan(&p.Name, &p.Features.Ephemeral, &p.MessagesPerPeriod, &p.PeriodSeconds, &p.MessagesPerSecond, &p.ParkedSlots)
	return p, err
}

func scanTenant(r pgx.CollectableRow) (Tenant, error) {
	var t Tenant
	err := r.Scan(&t.Name, &t.Plan)
	return t, err
}

// getOne reads at most one row of sql.
func getOne[T any](ctx context.Context, s *pgStore, scan pgx.RowToFunc[T], sql string, args ...any) (T, bool, error) {
	var rows []T
	err := s.read(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		r, _ := c.Query(ctx, sql, args...)
		var err error
		rows, err = pgx.CollectRows(r, scan)
		return err
	})
	var zero T
	if err != nil || len(rows) == 0 {
		return zero, false, err
	}
	return rows[0], true, nil
}

func (s *pgStore) GetPlan(ctx context.Context, name string) (Plan, bool, error) {
	if err := checkName("plan name", name); err != nil {
		return Plan{}, false, err
	}
	return getOne(ctx, s, scanPlan, pgGetPlan, name)
}

func (s *pgStore) DeletePlan(ctx context.Context, name string) (bool, error) {
	if err := checkName("plan name", name); err != nil {
		return false, err
	}
	var existed bool
	err := s.write(ctx, pg.Unsent, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, pgDeletePlan, name)
		existed = tag.RowsAffected() > 0
		return err
	})
	return existed && err == nil, err
}

func (s *pgStore) PutTenant(ctx context.Context, t Tenant) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return s.write(ctx, pg.Idempotent, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pgPutTenant, t.Name, t.Plan)
		return err
	})
}

func (s *pgStore) GetTenant(ctx context.Context, name string) (Tenant, bool, error) {
	if err := checkName("tenant name", name); err != nil {
		return Tenant{}, false, err
	}
	return getOne(ctx, s, scanTenant, pgGetTenant, name)
}

// Snapshot reads both tables in one repeatable-read transaction, so the
// plans and tenants are of one moment.
func (s *pgStore) Snapshot(ctx context.Context) ([]Plan, []Tenant, error) {
	var (
		plans   []Plan
		tenants []Tenant
	)
	err := s.read(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
		return pgx.BeginTxFunc(ctx, c, opts, func(tx pgx.Tx) error {
			r, _ := tx.Query(ctx, pgLoadPlans)
			var err error
			if plans, err = pgx.CollectRows(r, scanPlan); err != nil {
				return err
			}
			r, _ = tx.Query(ctx, pgLoadTenants)
			tenants, err = pgx.CollectRows(r, scanTenant)
			return err
		})
	})
	if err != nil {
		return nil, nil, err
	}
	return plans, tenants, nil
}

func (s *pgStore) Revision(ctx context.Context) (int64, error) {
	var n int64
	err := s.read(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, pgRevision).Scan(&n)
	})
	return n, err
}

func (s *pgStore) AddUsage(ctx context.Context, rows []Usage) error {
	rows, err := mergeUsage(rows)
	if err != nil || len(rows) == 0 {
		return err
	}
	tenants := make([]string, len(rows))
	classes := make([]string, len(rows))
	minutes := make([]int64, len(rows))
	counts := make([]int64, len(rows))
	for i, u := range rows {
		tenants[i], classes[i], minutes[i], counts[i] = u.Tenant, string(u.Class), u.Minute, u.Count
	}
	return s.call(ctx, pg.Unsent, true, func(ctx context.Context, c *pgxpool.Conn) error {
		_, err := c.Exec(ctx, pgAddUsage, tenants, classes, minutes, counts)
		return err
	})
}

func (s *pgStore) UsageSince(ctx context.Context, since int64) (map[string]map[Class]int64, error) {
	out := make(map[string]map[Class]int64)
	err := s.read(ctx, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, _ := c.Query(ctx, pgUsageSince, since)
		var (
			tenant, class string
			n             int64
		)
		_, err := pgx.ForEachRow(rows, []any{&tenant, &class, &n}, func() error {
			m := out[tenant]
			if m == nil {
				m = make(map[Class]int64)
				out[tenant] = m
			}
			m[Class(class)] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
