package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
	"github.com/queenmq/ephemeral/store"
)

// statements are the SQL texts, with the schema name quoted in.
type statements struct {
	metaTable    string // the quoted qualified name, for to_regclass
	metaExists   string
	version      string
	createSchema string
	createTables []string
	// layout reads the additions' version; addLayout applies every
	// addition (idempotent: it runs again from any earlier layout).
	layout    string
	addLayout []string
	// revision reads the change counter; channel is its NOTIFY channel
	// and listen LISTENs to it.
	revision, channel, listen string

	loadDecls, putDecl, deleteDecl              string
	loadGrants, getGrant, putGrant, deleteGrant string
	getSetting, putSetting                      string
}

func newStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	t := func(name string) string { return s + "." + name }
	ch := channelName(schema)
	// options is json, not jsonb: json keeps the exact text sent (spacing,
	// key order, number spelling), which is what configure echoes. Names
	// are COLLATE "C" so that the primary keys order by bytes.
	return statements{
		metaTable:    t("meta"),
		metaExists:   `SELECT to_regclass($1) IS NOT NULL`,
		version:      `SELECT value FROM ` + t("meta") + ` WHERE key = 'schema_version'`,
		createSchema: "CREATE SCHEMA IF NOT EXISTS " + s,
		createTables: []string{
			`CREATE TABLE IF NOT EXISTS ` + t("meta") + ` (
				key   text PRIMARY KEY,
				value text NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS ` + t("declarations") + ` (
				tenant     text COLLATE "C" NOT NULL,
				queue      text COLLATE "C" NOT NULL,
				options    json NOT NULL,
				updated_at timestamptz NOT NULL DEFAULT now(),
				PRIMARY KEY (tenant, queue))`,
			`CREATE TABLE IF NOT EXISTS ` + t("grants") + ` (
				tenant              text COLLATE "C" PRIMARY KEY,
				max_bytes           bigint NOT NULL CHECK (max_bytes >= 0),
				max_queues          bigint NOT NULL CHECK (max_queues >= 0),
				messages_per_second bigint NOT NULL CHECK (messages_per_second >= 0),
				updated_at          timestamptz NOT NULL DEFAULT now())`,
			`CREATE TABLE IF NOT EXISTS ` + t("settings") + ` (
				key        text COLLATE "C" PRIMARY KEY,
				value      bytea NOT NULL,
				updated_at timestamptz NOT NULL DEFAULT now())`,
			`INSERT INTO ` + t("meta") + ` (key, value) VALUES ('schema_version', '` + schemaVersion + `')
				ON CONFLICT (key) DO NOTHING`,
		},

		layout:    `SELECT value FROM ` + t("meta") + ` WHERE key = 'layout'`,
		addLayout: layoutDDL(s, t, ch),
		revision:  `SELECT n FROM ` + t("revision"),
		channel:   ch,
		listen:    "LISTEN " + pgx.Identifier{ch}.Sanitize(),

		loadDecls: `SELECT tenant, queue, options::text FROM ` + t("declarations") + ` ORDER BY tenant, queue`,
		putDecl: `INSERT INTO ` + t("declarations") + ` (tenant, queue, options) VALUES ($1, $2, $3::text::json)
			ON CONFLICT (tenant, queue) DO UPDATE SET options = EXCLUDED.options, updated_at = now()`,
		deleteDecl: `DELETE FROM ` + t("declarations") + ` WHERE tenant = $1 AND queue = $2`,

		loadGrants: `SELECT tenant, max_bytes, max_queues, messages_per_second FROM ` + t("grants") + ` ORDER BY tenant`,
		getGrant:   `SELECT tenant, max_bytes, max_queues, messages_per_second FROM ` + t("grants") + ` WHERE tenant = $1`,
		putGrant: `INSERT INTO ` + t("grants") + ` (tenant, max_bytes, max_queues, messages_per_second) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant) DO UPDATE SET max_bytes = EXCLUDED.max_bytes, max_queues = EXCLUDED.max_queues,
				messages_per_second = EXCLUDED.messages_per_second, updated_at = now()`,
		deleteGrant: `DELETE FROM ` + t("grants") + ` WHERE tenant = $1`,

		getSetting: `SELECT value FROM ` + t("settings") + ` WHERE key = $1`,
		putSetting: `INSERT INTO ` + t("settings") + ` (key, value) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()`,
	}
}

// exec runs one statement and reports how many rows it touched.
func (s *Store) exec(ctx context.Context, retry pg.Retry, sql string, args ...any) (int64, error) {
	var n int64
	err := s.withConn(ctx, retry, func(ctx context.Context, c *pgxpool.Conn) error {
		tag, err := c.Exec(ctx, sql, args...)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// LoadDeclarations returns every declaration, by tenant then queue.
func (s *Store) LoadDeclarations(ctx context.Context) ([]store.Declaration, error) {
	var out []store.Declaration
	err := s.withConn(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, _ := c.Query(ctx, s.sql.loadDecls)
		var err error
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Declaration, error) {
			var (
				d    store.Declaration
				opts string
			)
			err := r.Scan(&d.Tenant, &d.Queue, &opts)
			d.Options = json.RawMessage(opts)
			return d, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PutDeclaration creates or replaces a declaration.
func (s *Store) PutDeclaration(ctx context.Context, d store.Declaration) error {
	if err := d.Validate(); err != nil {
		return err
	}
	_, err := s.exec(ctx, pg.Idempotent, s.sql.putDecl, d.Tenant, d.Queue, string(d.Options))
	return err
}

// DeleteDeclaration removes a declaration, reporting whether it existed.
func (s *Store) DeleteDeclaration(ctx context.Context, tenant, queue string) (bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return false, err
	}
	if err := store.ValidateName("queue", queue); err != nil {
		return false, err
	}
	n, err := s.exec(ctx, pg.Unsent, s.sql.deleteDecl, tenant, queue)
	return n > 0 && err == nil, err
}

func scanGrant(r pgx.CollectableRow) (store.Grant, error) {
	var g store.Grant
	err := r.Scan(&g.Tenant, &g.MaxBytes, &g.MaxQueues, &g.MessagesPerSecond)
	return g, err
}

// LoadGrants returns every grant, by tenant.
func (s *Store) LoadGrants(ctx context.Context) ([]store.Grant, error) {
	var out []store.Grant
	err := s.withConn(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, _ := c.Query(ctx, s.sql.loadGrants)
		var err error
		out, err = pgx.CollectRows(rows, scanGrant)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetGrant reads one tenant's grant.
func (s *Store) GetGrant(ctx context.Context, tenant string) (store.Grant, bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return store.Grant{}, false, err
	}
	var gs []store.Grant
	err := s.withConn(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, _ := c.Query(ctx, s.sql.getGrant, tenant)
		var err error
		gs, err = pgx.CollectRows(rows, scanGrant)
		return err
	})
	if err != nil || len(gs) == 0 {
		return store.Grant{}, false, err
	}
	return gs[0], true, nil
}

// PutGrant creates or replaces a tenant's grant.
func (s *Store) PutGrant(ctx context.Context, g store.Grant) error {
	if err := g.Validate(); err != nil {
		return err
	}
	_, err := s.exec(ctx, pg.Idempotent, s.sql.putGrant, g.Tenant, g.MaxBytes, g.MaxQueues, g.MessagesPerSecond)
	return err
}

// DeleteGrant removes a tenant's grant, reporting whether it existed.
func (s *Store) DeleteGrant(ctx context.Context, tenant string) (bool, error) {
	if err := store.ValidateName("tenant", tenant); err != nil {
		return false, err
	}
	n, err := s.exec(ctx, pg.Unsent, s.sql.deleteGrant, tenant)
	return n > 0 && err == nil, err
}

// GetSetting reads a setting.
func (s *Store) GetSetting(ctx context.Context, key string) ([]byte, bool, error) {
	if err := store.ValidateKey(key); err != nil {
		return nil, false, err
	}
	var vs [][]byte
	err := s.withConn(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		rows, _ := c.Query(ctx, s.sql.getSetting, key)
		var err error
		vs, err = pgx.CollectRows(rows, pgx.RowTo[[]byte])
		return err
	})
	if err != nil || len(vs) == 0 {
		return nil, false, err
	}
	if vs[0] == nil {
		vs[0] = []byte{}
	}
	return vs[0], true, nil
}

// PutSetting creates or replaces a setting.
func (s *Store) PutSetting(ctx context.Context, key string, value []byte) error {
	if err := store.ValidateKey(key); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	_, err := s.exec(ctx, pg.Idempotent, s.sql.putSetting, key, value)
	return err
}
