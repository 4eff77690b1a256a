package cell

import (
	"context"
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
// queries the database (an admin read, never on an event loop).
func (m *Membership) Rows(ctx context.Context) ([]Row, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.MemberTimeout)
	defer cancel()
	var out []Row
	err := m.pool.Do(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
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
