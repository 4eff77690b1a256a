package cell

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
)

// Row is a member's row as the database holds it, for the admin listing
// (GET /api/v1/system/cell): the view itself carries no timestamps, so
// that a heartbeat changes nothing readers see.
type Row struct {
	ID          string
	Incarnation string
	JoinedAt    time.Time // when this incarnation (re)joined
	HeartbeatAt time.Time // its last renewal, on the database's clock
	Live        bool      // younger than its writer's member timeout
	PublicURL   string    // where clients reach it; "" when it published none
}

// Rows reads every member row, live or not yet removed, sorted by ID. It
// queries the database (an admin read, never on an event loop), bounded by
// ctx alone: the member timeout bounds what liveness waits for, not a read
// for people, which may have to dial a connection on a loaded database.
//
// Reads take turns on one of the pool's two connections, so that the
// other is always the membership loop's: however many reads are in flight,
// and however slow, none delays a heartbeat (a heartbeat that waits for a
// connection past its renewal fences the member).
func (m *Membership) Rows(ctx context.Context) ([]Row, error) {
	select {
	case m.reading <- struct{}{}:
		defer func() { <-m.reading }()
	case <-ctx.Done():
		return nil, fmt.Errorf("cell: waiting for the admin reads before this one: %w", ctx.Err())
	}
	var out []Row
	err := m.pool.Do(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		if m.opts.beforeRows != nil {
			m.opts.beforeRows(ctx)
		}
		m.count(1)
		rows, _ := c.Query(ctx, m.sql.all)
		var err error
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
			var x Row
			err := r.Scan(&x.ID, &x.Incarnation, &x.JoinedAt, &x.HeartbeatAt, &x.Live, &x.PublicURL)
			return x, err
		})
		return err
	})
	return out, err
}
