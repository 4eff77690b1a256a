package postgres

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/store/storetest"
)

// createLayout1 builds a schema exactly as the previous build did: the
// tables of schemaVersion "1" (whose DDL this build keeps unchanged in
// createTables) and no layout row.
func createLayout1(t *testing.T, ctx context.Context, schema string) {
	t.Helper()
	sql := newStatements(schema)
	for _, ddl := range append([]string{sql.createSchema}, sql.createTables...) {
		if err := pgServer.Exec(ctx, ddl); err != nil {
			t.Fatalf("%s: %v", ddl, err)
		}
	}
}

func metaValue(t *testing.T, ctx context.Context, schema, key string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{schema}.Sanitize()+`.meta WHERE key = $1`, key).Scan(&v); err != nil {
		t.Fatalf("meta %s: %v", key, err)
	}
	return v
}

// A database of the previous layout (tables and rows written by the
// previous build) is migrated on open, by several brokers at once: the
// rows stay, the schema version stays "1" (so a broker of the previous
// build still opens it), the layout becomes 2, and from then on every write
// moves the revision, including a write by SQL that knows nothing of it.
// Running the migration again over a migrated schema is harmless.
func TestMigrateFromLayout1(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	createLayout1(t, ctx, schema)
	q := pgx.Identifier{schema}.Sanitize()
	for _, sql := range []string{
		`INSERT INTO ` + q + `.declarations (tenant, queue, options) VALUES ('t', 'old', '{"maxLength": 5}')`,
		`INSERT INTO ` + q + `.grants (tenant, max_bytes, max_queues, messages_per_second) VALUES ('t', 1, 2, 3)`,
		`INSERT INTO ` + q + `.settings (key, value) VALUES ('kill_switch', '{"enabled":false,"retryAfterSeconds":4}')`,
	} {
		if err := pgServer.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	for i := range stores { // a cell's members upgraded together
		wg.Go(func() { stores[i] = openT(t, Config{Schema: schema}) })
	}
	wg.Wait()
	for i, s := range stores {
		waitReady(t, s, 5*time.Second)
		if !s.Healthy() {
			t.Fatalf("store %d not healthy after the migration", i)
		}
	}
	s := stores[0]
	if v := metaValue(t, ctx, schema, "schema_version"); v != "1" {
		t.Fatalf("schema_version %q after the migration, want 1 (additive)", v)
	}
	if v := metaValue(t, ctx, schema, "layout"); v != "2" {
		t.Fatalf("layout %q after the migration, want 2", v)
	}
	ds, err := s.LoadDeclarations(ctx)
	if err != nil || len(ds) != 1 || ds[0].Queue != "old" || string(ds[0].Options) != `{"maxLength": 5}` {
		t.Fatalf("declarations after the migration: %v %v", ds, err)
	}
	if g, found, err := s.GetGrant(ctx, "t"); err != nil || !found || g.MessagesPerSecond != 3 {
		t.Fatalf("grant after the migration: %+v %v %v", g, found, err)
	}
	if k, found, err := store.LoadKillSwitch(ctx, s); err != nil || !found || k.Enabled || k.RetryAfterSeconds != 4 {
		t.Fatalf("kill switch after the migration: %+v %v %v", k, found, err)
	}

	ch := stores[1].Changes()
	r0, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A write by plain SQL (an older broker, an operator) counts too.
	time.Sleep(200 * time.Millisecond) // let stores[1] LISTEN
	drainFor(ch, 100*time.Millisecond)
	if err := pgServer.Exec(ctx, `UPDATE `+q+`.declarations SET options = '{}'`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("a write by SQL was not notified")
	}
	r1, err := s.Revision(ctx)
	if err != nil || r1 == r0 {
		t.Fatalf("revision %d then %d (%v): a write by SQL did not move it", r0, r1, err)
	}

	// The migration again, over what it made: forget the layout and reopen.
	if err := pgServer.Exec(ctx, `DELETE FROM `+q+`.meta WHERE key = 'layout'`); err != nil {
		t.Fatal(err)
	}
	again := openT(t, Config{Schema: schema})
	waitReady(t, again, 5*time.Second)
	if err := again.PutDeclaration(ctx, decl("new", `{}`)); err != nil {
		t.Fatal(err)
	}
	r2, err := again.Revision(ctx)
	if err != nil || r2 == r1 {
		t.Fatalf("revision %d then %d (%v) after a second migration and a write", r1, r2, err)
	}
	// One trigger per table, not two.
	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.triggers
		WHERE trigger_schema = $1 AND trigger_name = 'bump_revision'`, schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// information_schema lists a trigger once per event: 3 tables × 3 row
	// events (TRUNCATE is not listed).
	if n != 9 {
		t.Fatalf("%d trigger events named bump_revision, want 9 (three tables, INSERT/UPDATE/DELETE)", n)
	}
}

func drainFor(ch <-chan struct{}, d time.Duration) {
	for {
		select {
		case <-ch:
		case <-time.After(d):
			return
		}
	}
}

// The LISTEN connection comes back after the database restarts, and says
// so by a poke (a notification may have been missed meanwhile); a write
// after it is heard.
func TestChangesAfterDatabaseRestart(t *testing.T) {
	storetest.NeedManaged(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	s := openT(t, Config{Schema: schema, RetryInterval: 50 * time.Millisecond})
	waitReady(t, s, 5*time.Second)
	ch := s.Changes()
	deadline := time.Now().Add(5 * time.Second)
	for !s.listening.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	drainFor(ch, 100*time.Millisecond)
	if err := pgServer.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := pgServer.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no poke on reconnecting")
	}
	deadline = time.Now().Add(5 * time.Second)
	for !s.listening.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	drainFor(ch, 100*time.Millisecond)
	var err error
	for range 50 { // the pool's connections died with the server
		if err = s.PutDeclaration(ctx, decl("q", `{}`)); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(2 * time.Second):
		t.Fatal("a write after the restart was not heard")
	}
}

// A role without CREATE rights, on a schema the operator prepared with the
// previous build (layout 1), cannot add layout 2: the store stays down
// (and retrying) with the reason logged, rather than serving a cell whose
// members would not see each other's changes; once a role with the right
// has opened it, the restricted role works (TestSchemaPreparedByOperator).
func TestLayout1NeedsCreateRightsOnce(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	ctx := testCtx(t)
	schema := pgServer.FreshSchema(t)
	createLayout1(t, ctx, schema)
	role := schema + "_broker"
	q := pgx.Identifier{schema}.Sanitize()
	r := pgx.Identifier{role}.Sanitize()
	var pe *pgconn.PgError
	if err := pgServer.Exec(ctx, "CREATE ROLE "+r+" LOGIN"); errors.As(err, &pe) && pe.Code == "42501" && !pgServer.Managed() {
		t.Skipf("%s may not create roles: %v", storetest.EnvTestDatabaseURL, err)
	} else if err != nil {
		t.Fatal(err)
	}
	grant := func() {
		for _, sql := range []string{
			"GRANT USAGE ON SCHEMA " + q + " TO " + r,
			"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + q + " TO " + r,
		} {
			if err := pgServer.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	grant()
	t.Cleanup(func() {
		pgServer.Exec(context.Background(), "DROP OWNED BY "+r)
		pgServer.Exec(context.Background(), "DROP ROLE "+r)
	})
	u, err := url.Parse(pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	restricted := openT(t, Config{URL: u.String(), Schema: schema, RetryInterval: time.Hour})
	if restricted.Healthy() {
		t.Fatal("a store that could not add layout 2 reports healthy")
	}
	if _, err := restricted.Revision(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Revision before the migration = %v, want ErrUnavailable", err)
	}
	// The operator's (privileged) open migrates. The restricted role's
	// writes work with its old grants (the trigger's function runs with
	// its owner's rights); reading the revision needs SELECT on the new
	// table, which the operator's grant on all tables, run again, gives.
	waitReady(t, openT(t, Config{Schema: schema}), 5*time.Second)
	s := openT(t, Config{URL: u.String(), Schema: schema})
	waitReady(t, s, 5*time.Second)
	if err := s.PutDeclaration(ctx, decl("q", `{}`)); err != nil {
		t.Fatalf("a write by the restricted role after the migration, with its old grants: %v", err)
	}
	if _, err := s.Revision(ctx); err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Revision without SELECT on the revision table = %v, want a permission error", err)
	}
	grant()
	if _, err := s.Revision(ctx); err != nil {
		t.Fatal(err)
	}
}
