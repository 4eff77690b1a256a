package cell

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/ephemeral/store/storetest"
)

// Membership traffic at the default timings (1 s heartbeat, 5 s timeout):
// three members in steady state, counted by the members (round trips and
// statements) and by PostgreSQL (transactions committed in the database,
// which includes whatever else the server ran meanwhile: autovacuum, the
// test's own two reads). docs/cell.md quotes the logged figures.
func TestMembershipTraffic(t *testing.T) {
	storetest.NeedPostgres(t, pg)
	if testing.Short() {
		t.Skip("measures for 10 s")
	}
	schema := pg.FreshSchema(t)
	ms := []*Membership{
		start(t, schema, "a:1", DefaultHeartbeat, DefaultMemberTimeout),
		start(t, schema, "b:1", DefaultHeartbeat, DefaultMemberTimeout),
		start(t, schema, "c:1", DefaultHeartbeat, DefaultMemberTimeout),
	}
	waitFor(t, 5*time.Second, "three members", viewIs("a:1,b:1,c:1", ms...))
	time.Sleep(3 * time.Second) // listeners up, joins' reloads done, their statistics reported

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	commits := func() int64 {
		// Statistics reach the view when a backend reports them (at most
		// once a second); force this backend's, then read.
		var n int64
		if err := conn.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := make([]Stats, len(ms))
	for i, m := range ms {
		before[i] = m.Stats()
	}
	c0, t0 := commits(), time.Now()
	const window = 10 * time.Second
	time.Sleep(window)
	c1, el := commits(), time.Since(t0)
	secs := el.Seconds()
	var rt, st int64
	for i, m := range ms {
		s := m.Stats()
		rt += s.RoundTrips - before[i].RoundTrips
		st += s.Statements - before[i].Statements
	}
	n := float64(len(ms))
	perRT, perSt := float64(rt)/n/secs, float64(st)/n/secs
	t.Logf("3 members, heartbeat %v, over %.1f s: %.2f round trips and %.2f statements per member per second (client counts); PostgreSQL committed %.2f transactions per member per second",
		DefaultHeartbeat, secs, perRT, perSt, float64(c1-c0)/n/secs)
	// One round trip per heartbeat (the upsert and the select in one
	// pipeline), two statements, plus a removal of dead rows every 60.
	if perRT > 1.1 || perRT < 0.9 {
		t.Fatalf("%.2f round trips per member per second, want one per heartbeat", perRT)
	}
	if perSt > 2.1 {
		t.Fatalf("%.2f statements per member per second, want about two", perSt)
	}
}
