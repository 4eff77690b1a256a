package conformance

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// TestPostgresOutage: with the PostgreSQL stopped mid-test, a declaration
// write is 503 ephemeral_unavailable (no database connection was available,
// spec status codes), a delete is 500 ephemeral_delete_failed (D16), both
// change nothing, and the ephemeral surface itself goes on serving; a
// broker that boots with the database down serves, reports store "down",
// and loads the declarations once it is back (docs/contract.md, Survival;
// D16). The test starts a PostgreSQL of its own, since it stops it.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	needBinary(t)
	p, err := storetest.StartPostgres()
	if errors.Is(err, storetest.ErrNoPostgres) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("starting a PostgreSQL for this test: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	storetest.NeedManaged(t, p)

	// The outage's refusals are quick whatever the acquire bound (the
	// stopped server refuses the dial); 500 ms once failed the first delete
	// after the restart under CI's load, a fresh connection slower.
	b := startBroker(t, map[string]string{
		"QUEEN_DATABASE_URL":                  p.URL(),
		"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS":   "2000",
		"QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": "1000",
	})
	b.configure(t, "kept", `{"maxLength":7}`)
	b.push(t, "kept", "", "1")
	wantKept := defaultOptions
	wantKept.MaxLength = 7

	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"new"}`).wantErr(t, 503, "ephemeral_unavailable")
	b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"kept","options":{"maxLength":9}}`).wantErr(t, 503, "ephemeral_unavailable")
	b.do(t, "DELETE", "/api/v1/ephemeral/queue/kept", nil).wantErr(t, 500, "ephemeral_delete_failed")
	b.do(t, "DELETE", "/api/v1/ephemeral/queue/never", nil).wantErr(t, 500, "ephemeral_delete_failed")
	// Nothing changed, and the contents are served without the database.
	if r := b.row(t, "kept"); r.Tier != "declared" || r.Depth != 1 || r.Options != wantKept {
		t.Fatalf("kept after the refused writes: %+v", r)
	}
	if _, ok := b.queues(t).find("new"); ok {
		t.Fatalf("a refused configure declared new")
	}
	b.push(t, "kept", "", "2")
	if p := b.pop(t, popq{"queue": "kept", "batch": "10", "group": "g"}); !equalStrings(p.payloads(), []string{"1", "2"}) {
		t.Fatalf("pop during the outage: %v", p.payloads())
	} else if got := b.ackAll(t, "kept", "g", "completed", p); !equalStrings(got, []string{"acked", "acked"}) {
		t.Fatalf("ack during the outage: %v", got)
	}
	if n := b.reset(t, "kept"); n != 2 {
		t.Fatalf("reset during the outage dropped %d, want 2", n)
	}
	brokertest.Eventually(t, 10*time.Second, "/health reports store down", func() bool {
		h := b.health(t)
		return h.Status == "ok" && h.Store == "down"
	})

	// A boot with the database down.
	b.WaitStoreOK = false
	b.restart(t)
	if h := b.health(t); h.Status != "ok" || h.Store != "down" {
		t.Fatalf("health at a boot without the database: %+v", h)
	}
	b.push(t, "during", "", "1")
	b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"new"}`).wantErr(t, 503, "ephemeral_unavailable")

	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 20*time.Second, "/health reports store ok", func() bool { return b.health(t).Store == "ok" })
	if r := b.row(t, "kept"); r.Tier != "declared" || r.Depth != 0 || r.Options != wantKept {
		t.Fatalf("kept once the database is back: %+v; want declared, empty, maxLength 7", r)
	}
	if r := b.row(t, "during"); r.Tier != "implicit" || r.Depth != 1 {
		t.Fatalf("the queue pushed during the outage: %+v", r)
	}
	b.configure(t, "new", "")
	if got := b.delete(t, "new"); got != (deleted{"new", true, true}) {
		t.Fatalf("delete once the database is back: %+v", got)
	}
	if got := b.delete(t, "kept"); got != (deleted{"kept", true, true}) {
		t.Fatalf("delete kept: %+v", got)
	}
}

// TestStoreWriteFailure: a declaration write or removal that the database
// refuses (here a trigger raising an error; the connection is fine) is 500
// ephemeral_configure_failed or ephemeral_delete_failed, and changes
// nothing in memory (docs/routes.md, configure: "written to PostgreSQL first and
// applied to memory second"; D16).
func TestStoreWriteFailure(t *testing.T) {
	t.Parallel()
	st := postgresStore.env(t)
	schema := st["QUEEN_DATABASE_SCHEMA"]
	b := startBroker(t, st)
	b.configure(t, "a", `{"maxLength":7}`)
	wantA := defaultOptions
	wantA.MaxLength = 7

	ctx := context.Background()
	sch := `"` + schema + `"`
	if err := pg.Exec(ctx, `CREATE FUNCTION `+sch+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the conformance test'; END $$`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, `CREATE TRIGGER refuse BEFORE INSERT OR UPDATE OR DELETE ON `+sch+`.declarations FOR EACH STATEMENT EXECUTE FUNCTION `+sch+`.refuse()`); err != nil {
		t.Fatal(err)
	}
	b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"a","options":{"maxLength":9}}`).wantErr(t, 500, "ephemeral_configure_failed")
	b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"b"}`).wantErr(t, 500, "ephemeral_configure_failed")
	b.do(t, "DELETE", "/api/v1/ephemeral/queue/a", nil).wantErr(t, 500, "ephemeral_delete_failed")
	checkListing(t, b, map[string]queueRow{"a": {Queue: "a", Tier: "declared", Options: wantA}})

	if err := pg.Exec(ctx, `DROP TRIGGER refuse ON `+sch+`.declarations`); err != nil {
		t.Fatal(err)
	}
	b.configure(t, "a", `{"maxLength":9}`)
	if r := b.row(t, "a"); r.Options.MaxLength != 9 {
		t.Fatalf("a after the trigger went: %+v", r)
	}
	if got := b.delete(t, "a"); got != (deleted{"a", true, true}) {
		t.Fatalf("delete: %+v", got)
	}
}
