package cell

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/ephemeral/store/storetest"
)

// Membership traffic at the default timings (1 s heartbeat, 5 s timeout):
// three members in steady state, counted by the members (heartbeats,
// round trips and statements) and by PostgreSQL (transactions committed in
// the database, which includes whatever else the server ran meanwhile:
// autovacuum, the test's own two reads). What is asserted is per
// heartbeat, whatever the machine's timing: one round trip, two statements
// (plus a removal of dead rows every 60 beats). The rates per second are
// logged for docs/cell.md ("The database's share"), not asserted (P6).
func TestMembershipTraffic(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	if testing.Short() {
		t.Skip("measures for 5 s")
	}
	schema := pgServer.FreshSchema(t)
	ms := []*Membership{
		start(t, schema, "a:1", DefaultHeartbeat, DefaultMemberTimeout),
		start(t, schema, "b:1", DefaultHeartbeat, DefaultMemberTimeout),
		start(t, schema, "c:1", DefaultHeartbeat, DefaultMemberTimeout),
	}
	waitFor(t, 5*time.Second, "three members", viewIs("a:1,b:1,c:1", ms...))
	for _, m := range ms {
		waitFor(t, 5*time.Second, "listening", func() bool { return m.Stats().Listening })
	}
	// Steady state: every member has beaten once since the last join (the
	// joins' reloads are behind it).
	for _, m := range ms {
		b := m.Stats().Heartbeats
		waitFor(t, 3*DefaultHeartbeat, "a heartbeat after the joins", func() bool { return m.Stats().Heartbeats > b })
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	commits := func() int64 {
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
	time.Sleep(5 * time.Second) // about five heartbeats each: a sample, not a timer under test
	c1, secs := commits(), time.Since(t0).Seconds()
	var beats, rt, st int64
	for i, m := range ms {
		s := m.Stats()
		beats += s.Heartbeats - before[i].Heartbeats
		rt += s.RoundTrips - before[i].RoundTrips
		st += s.Statements - before[i].Statements
		if s.Notifications != before[i].Notifications || s.HeartbeatFailures != before[i].HeartbeatFailures {
			t.Fatalf("member %d: notifications or failures in steady state: %+v after %+v", i, s, before[i])
		}
	}
	n := float64(len(ms))
	t.Logf("3 members, heartbeat %v, over %.1f s: %d heartbeats; %.2f round trips and %.2f statements per member per second (client counts); PostgreSQL committed %.2f transactions per member per second",
		DefaultHeartbeat, secs, beats, float64(rt)/n/secs, float64(st)/n/secs, float64(c1-c0)/n/secs)
	if beats == 0 {
		t.Fatal("no heartbeat in the window")
	}
	if rt != beats {
		t.Fatalf("%d round trips for %d heartbeats, want one each", rt, beats)
	}
	if st > 2*beats+int64(len(ms)) {
		t.Fatalf("%d statements for %d heartbeats, want two each (and a removal of dead rows every %d)", st, beats, gcEvery)
	}
}
