package postgres

import (
	"context"
	"encoding/hex"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
)

// The change counter (store.Store's Revision and Changes), so that brokers
// sharing the database see each other's declarations, grants and kill
// switch without a restart (D17; docs/cell.md, "Declarations, grants and
// the kill switch across members").
//
// It is kept by the database, not by the brokers: a statement-level
// trigger on each of the three tables raises the one row of <schema>.revision
// and NOTIFYs the new value, in the writing transaction. So every write
// counts whoever made it (a broker of an older build, an operator's SQL,
// a TRUNCATE); the counter is transactional (a reader that sees n sees
// every write up to n committed; a sequence would not be); and the
// notification is delivered exactly when the write commits.

// layoutVersion is the additions this build makes to the tables of
// schemaVersion "1". They are additive: a build that knows only "1" reads
// and writes a schema at this layout unchanged (its writes raise the
// counter too), so a cell upgraded one member at a time keeps running and
// a member can be rolled back.
//
//	1 (no meta row): the tables of schemaVersion "1".
//	2: the revision row, its function and the triggers.
const layoutVersion = 2

// layoutDDL is every addition, idempotent: it runs under the schema's
// advisory lock from any earlier layout (or none), and ends by recording
// the layout. s is the quoted schema, t qualifies a table, ch is the
// channel.
func layoutDDL(s string, t func(string) string, ch string) []string {
	lit := "'" + strings.ReplaceAll(ch, "'", "''") + "'"
	ddl := []string{
		`CREATE TABLE IF NOT EXISTS ` + t("revision") + ` (
			one boolean PRIMARY KEY DEFAULT true CHECK (one),
			n   bigint NOT NULL)`,
		`INSERT INTO ` + t("revision") + ` (one, n) VALUES (true, 1) ON CONFLICT (one) DO NOTHING`,
		// The body names no schema (TG_TABLE_SCHEMA) and takes the channel
		// as the trigger's argument, so its text is the same for every
		// schema and needs no quoting of names. SECURITY DEFINER (with a
		// fixed search_path, as such a function must have): it raises the
		// counter with the rights of the role that made it, so a role
		// granted only the original tables' rights keeps writing after an
		// upgrade migrated the schema.
		`CREATE OR REPLACE FUNCTION ` + s + `.bump_revision() RETURNS trigger LANGUAGE plpgsql
		SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
		DECLARE r bigint;
		BEGIN
			EXECUTE format('UPDATE %I.revision SET n = n + 1 RETURNING n', TG_TABLE_SCHEMA) INTO r;
			PERFORM pg_notify(TG_ARGV[0], r::text);
			RETURN NULL;
		END
		$body$`,
	}
	for _, table := range []string{"declarations", "grants", "settings"} {
		ddl = append(ddl,
			`DROP TRIGGER IF EXISTS bump_revision ON `+t(table),
			// EXECUTE PROCEDURE, not FUNCTION: the spelling PostgreSQL
			// before 11 also takes.
			`CREATE TRIGGER bump_revision AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON `+t(table)+
				` FOR EACH STATEMENT EXECUTE PROCEDURE `+s+`.bump_revision(`+lit+`)`)
	}
	return append(ddl, `INSERT INTO `+t("meta")+` (key, value) VALUES ('layout', '`+strconv.Itoa(layoutVersion)+`')
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`)
}

// channelName is the NOTIFY channel of a schema's changes: one per schema,
// so stores in different schemas of one database do not hear each other.
// A channel is an identifier (at most 63 bytes); a long schema name is
// hashed. (The cell's membership uses <schema>_cell.)
func channelName(schema string) string {
	if c := schema + "_changes"; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return "queen_changes_" + hex.EncodeToString(h.Sum(nil))
}

// Revision reads the change counter.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	var n int64
	err := s.withConn(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		return c.QueryRow(ctx, s.sql.revision).Scan(&n)
	})
	return n, err
}

// Changes starts, on its first call, a connection LISTENing on the
// schema's channel, and returns the channel it pokes on each notification
// and on each (re)connection (a notification may have been missed while
// it was down). The connection is outside the pool (LISTEN belongs to a
// session) and is reconnected every RetryInterval while the database is
// away; it closes with the store.
func (s *Store) Changes() <-chan struct{} {
	s.listenOnce.Do(func() {
		s.changes = make(chan struct{}, 1)
		s.loopDone.Add(1)
		go s.listenLoop()
	})
	return s.changes
}

func (s *Store) poke() {
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

func (s *Store) listenLoop() {
	defer s.loopDone.Done()
	for !s.closed.Load() {
		err := s.listenConn()
		if err != nil && !s.closed.Load() {
			s.log.Debug("listen connection lost", "err", err)
		}
		select {
		case <-s.loopCtx.Done():
			return
		case <-time.After(s.cfg.RetryInterval):
		}
	}
}

func (s *Store) listenConn() error {
	ctx := s.loopCtx
	// Bounded by the pool's connect timeout (pg.MinConnectTimeout at
	// least): a slow server's answer is waited for, not abandoned.
	conn, err := pgx.ConnectConfig(ctx, s.pool.ConnConfig())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, s.sql.listen); err != nil {
		return err
	}
	s.listening.Store(true)
	defer s.listening.Store(false)
	s.poke() // whatever changed while not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		s.poke()
	}
}
