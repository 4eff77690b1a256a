package cell

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// listenLoop holds a dedicated connection LISTENing on the cell's channel
// and asks the loop to reload the live set on each notification from
// another member. The connection is outside the pool because LISTEN
// belongs to a session. When it drops, the loop reconnects each heartbeat;
// meanwhile heartbeats still reload the live set, so views change within a
// heartbeat instead of at once.
func (m *Membership) listenLoop(ctx context.Context) {
	defer m.done.Done()
	for ctx.Err() == nil {
		if err := m.listenOnce(ctx); err != nil && ctx.Err() == nil {
			m.log.Debug("cell: listen connection lost", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.opts.Heartbeat):
		}
	}
}

func (m *Membership) listenOnce(ctx context.Context) error {
	// Bounded by the pool's connect timeout (pg.MinConnectTimeout at
	// least): a slow server's answer is waited for, not abandoned.
	conn, err := pgx.ConnectConfig(ctx, m.listen.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	m.count(1)
	if _, err := conn.Exec(ctx, m.sql.listen); err != nil {
		return err
	}
	m.stats.listening.Store(true)
	defer m.stats.listening.Store(false)
	// Whatever was announced while the member was not listening is missed:
	// reload once now.
	m.poke()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if fromSelf(n.Payload, m.self, m.opts.Incarnation) {
			continue
		}
		m.stats.notifications.Add(1)
		m.poke()
	}
}

// poke asks for a reload; reloads asked for while one is pending coalesce.
func (m *Membership) poke() {
	select {
	case m.refresh <- struct{}{}:
	default:
	}
}

func fromSelf(p, self, inc string) bool {
	_, rest, ok := strings.Cut(p, " ")
	return ok && rest == self+" "+inc
}
