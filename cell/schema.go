package cell

import (
	"context"
	"encoding/hex"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/ephemeral/internal/pg"
)

// DefaultSchema is the store's default schema (store/postgres): the cell's
// table lives beside the store's tables.
const DefaultSchema = "queen_ephemeral"

// statements are the cell's SQL texts, with the schema name quoted in.
type statements struct {
	channel string // the NOTIFY channel, as pg_notify takes it
	listen  string // LISTEN of that channel

	createSchema, createTable, addURL, hasURL string
	heartbeat, live, leave                    string
	notify, gc, all                           string
}

func newStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	t := s + ".cell_members"
	ch := channelName(schema)
	return statements{
		channel:      ch,
		listen:       "LISTEN " + pgx.Identifier{ch}.Sanitize(),
		createSchema: "CREATE SCHEMA IF NOT EXISTS " + s,
		// One row per member, keyed by its advertised address. Every
		// timestamp is the database's now(), never a member's clock:
		// liveness is judged by one clock. expires_at is the last
		// heartbeat plus the member's own timeout, so a row's lifetime is
		// its writer's setting and members configured differently still
		// agree on the live set. joined_at is when the current
		// incarnation (re)joined, for the admin listing. public_url is
		// where clients reach the member ('' = none).
		createTable: `CREATE TABLE IF NOT EXISTS ` + t + ` (
			member       text COLLATE "C" PRIMARY KEY,
			incarnation  text NOT NULL,
			joined_at    timestamptz NOT NULL DEFAULT now(),
			heartbeat_at timestamptz NOT NULL DEFAULT now(),
			expires_at   timestamptz NOT NULL,
			public_url   text NOT NULL DEFAULT '')`,
		// The table as the release before public URLs made it lacks the
		// column: added in place, with a default, so that members of that
		// release, whose statements name their columns, keep working
		// beside it (their rows read as publishing no URL).
		addURL: `ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS public_url text NOT NULL DEFAULT ''`,
		hasURL: `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'public_url' AND NOT attisdropped)`,
		// $3 is the member timeout in milliseconds. A row that had expired
		// (or carried another incarnation) counts as a new join. $4, true
		// when joining, takes over a live row of another incarnation (this
		// address's previous process, dead or not yet expired); otherwise
		// such a row is left alone and no row is touched: another live
		// process advertises this address (Membership.beat).
		// $5 is the member's public URL.
		heartbeat: `INSERT INTO ` + t + ` AS m (member, incarnation, expires_at, public_url)
			VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond', $5)
			ON CONFLICT (member) DO UPDATE SET
				joined_at = CASE WHEN m.incarnation = EXCLUDED.incarnation AND m.expires_at > now()
					THEN m.joined_at ELSE now() END,
				incarnation = EXCLUDED.incarnation,
				heartbeat_at = now(),
				expires_at = EXCLUDED.expires_at,
				public_url = EXCLUDED.public_url
			WHERE $4::boolean OR m.incarnation = EXCLUDED.incarnation OR m.expires_at <= now()`,
		live: `SELECT member, incarnation, public_url FROM ` + t + ` WHERE expires_at > now() ORDER BY member`,
		// A clean leave removes only its own incarnation's row: a
		// successor on the same address may have taken it over.
		leave:  `DELETE FROM ` + t + ` WHERE member = $1 AND incarnation = $2`,
		notify: `SELECT pg_notify($1, $2)`,
		// Rows of members that left without a clean stop are removed once
		// they have been dead for ten of our timeouts (and a minute).
		gc:  `DELETE FROM ` + t + ` WHERE expires_at < now() - greatest($1::bigint * 10, 60000) * interval '1 millisecond'`,
		all: `SELECT member, incarnation, joined_at, heartbeat_at, expires_at > now(), public_url FROM ` + t + ` ORDER BY member`,
	}
}

// channelName is the NOTIFY channel of a schema's cell: one per schema, so
// cells in different schemas of one database do not hear each other. A
// channel is an identifier (at most 63 bytes); a long schema name is
// hashed.
func channelName(schema string) string {
	if c := schema + "_cell"; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return "queen_cell_" + hex.EncodeToString(h.Sum(nil))
}

// ensureTable creates the schema and the table when missing, and adds the
// public_url column to a table of the release before it. It runs under
// the advisory lock "queen-ephemeral cell <schema>" (pg.Locked), so that
// members booting together do not race on CREATE TABLE IF NOT EXISTS
// (which is not safe under concurrency: both may insert the type). It is
// idempotent and runs on every join, so a table dropped under a running
// cell comes back. A table that has the column costs no DDL (a role that
// may not alter it still works on a table the operator prepared).
func (m *Membership) ensureTable(ctx context.Context, tx pgx.Tx) error {
	table := pgx.Identifier{m.schema}.Sanitize() + ".cell_members"
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return err
	}
	if exists {
		var hasURL bool
		if err := tx.QueryRow(ctx, m.sql.hasURL, table).Scan(&hasURL); err != nil || hasURL {
			return err
		}
		_, err := tx.Exec(ctx, m.sql.addURL)
		if err == nil {
			m.log.Info("cell: added the public_url column to the members table (a table of the release before public URLs)")
		}
		return err
	}
	return pg.ExecAll(ctx, tx, m.sql.createSchema, m.sql.createTable)
}

// payload is a notification's text: "join|leave <member> <incarnation>".
func payload(verb, member, incarnation string) string {
	return verb + " " + member + " " + incarnation
}
