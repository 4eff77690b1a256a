package cell

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queenmq/ephemeral/internal/pg"
	"github.com/queenmq/ephemeral/store/postgres"
	"github.com/queenmq/ephemeral/store/storetest"
	"go.uber.org/goleak"
)

// pgServer is the run's PostgreSQL: started once for the package by TestMain.
var pgServer *storetest.Postgres

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		runChild() // a member in its own process, for SIGSTOP
		return
	}
	os.Exit(storetest.MainWithPostgres(m, &pgServer))
}

// Short timings: 50 ms heartbeats, 250 ms member timeout.
const (
	hb = 50 * time.Millisecond
	to = 250 * time.Millisecond
)

var incs atomic.Int64

// start starts a member of the cell in schema and stops it when the test
// ends. Each call is a new incarnation.
func start(t *testing.T, schema, addr string, heartbeat, timeout time.Duration, tweak ...func(*Options)) *Membership {
	t.Helper()
	o := Options{
		Config:      Config{Advertise: addr, Secret: []byte(secret), Heartbeat: heartbeat, MemberTimeout: timeout},
		DatabaseURL: pgServer.URL(),
		Schema:      schema,
		Incarnation: fmt.Sprintf("inc%d", incs.Add(1)),
	}
	for _, f := range tweak {
		f(&o)
	}
	m, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > within {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(t0)
}

func ids(v *View) string {
	var s []string
	for _, m := range v.Members {
		s = append(s, m.ID)
	}
	return strings.Join(s, ",")
}

func viewIs(want string, ms ...*Membership) func() bool {
	return func() bool {
		for _, m := range ms {
			if v := m.View(); ids(v) != want || v.Fenced() {
				return false
			}
		}
		return true
	}
}

// Three members converge on one view, and every one computes the same
// owner for every queue.
func TestThreeMembersConverge(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	// A member timeout of 5 s, not to: Owns is false on a fenced member,
	// and the 30,000 view reads below once outlasted a 250 ms renewal under
	// a CI run's load and -race (0 members owned a queue). Fencing is not
	// what this test is about (fence_test.go is).
	const steady = 5 * time.Second
	a := start(t, schema, "a:1", hb, steady)
	b := start(t, schema, "b:1", hb, steady)
	c := start(t, schema, "c:1", hb, steady)
	waitFor(t, 5*time.Second, "three members in every view", viewIs("a:1,b:1,c:1", a, b, c))
	owned := map[string]int{}
	for i := range 10_000 {
		tn, q := key(i)
		oa, _ := a.View().Owner(tn, q)
		ob, _ := b.View().Owner(tn, q)
		oc, _ := c.View().Owner(tn, q)
		if oa != ob || ob != oc {
			t.Fatalf("(%s,%s): owners %v %v %v", tn, q, oa, ob, oc)
		}
		n := 0
		for _, m := range []*Membership{a, b, c} {
			if m.View().Owns(tn, q) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("(%s,%s): %d members say they own it, want 1", tn, q, n)
		}
		owned[oa.ID]++
	}
	if len(owned) != 3 {
		t.Fatalf("owners: %v", owned)
	}
	for _, m := range []*Membership{a, b, c} {
		if v := m.View(); v.Members[v.self].Incarnation != m.opts.Incarnation {
			t.Fatalf("%s: incarnation %q in its view, want %q", m.self, v.Members[v.self].Incarnation, m.opts.Incarnation)
		}
	}
}

// Options left zero take the defaults (QUEEN_CELL_HEARTBEAT_MS 1000,
// QUEEN_CELL_MEMBER_TIMEOUT_MS 5000), and the member joins with them; the
// database's connect timeout is the member timeout but never less than
// pg.MinConnectTimeout (a beat still waits only until its renewal expires:
// the pool finishes a slow connection in the background for the next).
func TestStartDefaults(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	m := start(t, schema, "a:1", 0, 0)
	if m.opts.Heartbeat != DefaultHeartbeat || m.opts.MemberTimeout != DefaultMemberTimeout {
		t.Fatalf("heartbeat %v, member timeout %v; want the defaults", m.opts.Heartbeat, m.opts.MemberTimeout)
	}
	waitFor(t, 5*time.Second, "joined with the defaults", viewIs("a:1", m))
	for _, c := range []struct {
		connect string // the URL's connect_timeout, seconds
		timeout time.Duration
		want    time.Duration
	}{
		{"", 5 * time.Second, 5 * time.Second},
		{"0", 5 * time.Second, 5 * time.Second}, // 0: no timeout, in libpq's terms
		{"2", 5 * time.Second, 2 * time.Second},
		{"10", 3 * time.Second, pg.MinConnectTimeout}, // never less
		{"10", 8 * time.Second, 8 * time.Second},
	} {
		url := pgServer.URL()
		if c.connect != "" {
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			url += sep + "connect_timeout=" + c.connect
		}
		m := start(t, schema, "b:1", time.Second, c.timeout, func(o *Options) { o.DatabaseURL = url })
		if got := m.listen.ConnectTimeout; got != c.want {
			t.Errorf("connect_timeout %q, member timeout %v: connect timeout %v, want %v", c.connect, c.timeout, got, c.want)
		}
		m.Stop(context.Background())
	}
}

// Joins and clean leaves travel by NOTIFY: the other member sees them
// with no heartbeat of its own in between (a minute apart here), so no
// heartbeat did it, and after a notification.
func TestJoinAndCleanLeaveArePrompt(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	const slowHB, slowTO = time.Minute, 3 * time.Minute
	a := start(t, schema, "a:1", slowHB, slowTO)
	waitFor(t, 20*time.Second, "a alone", viewIs("a:1", a))
	// a's LISTEN connection is up (it reloads once when it does).
	waitFor(t, 20*time.Second, "a listening", func() bool { return a.Stats().Listening })
	// byNotify: a's view changed while a neither heartbeat nor lost its
	// LISTEN connection (whose return reloads too), and a notification
	// came. The bound is the rule's: within a heartbeat.
	byNotify := func(what string, before Stats, cond func() bool) {
		t.Helper()
		waitFor(t, slowHB, what, cond)
		after := a.Stats()
		if after.Heartbeats != before.Heartbeats || !after.Listening {
			t.Fatalf("%s: a heartbeat (%d, then %d) or a LISTEN reconnection happened meanwhile: cannot tell NOTIFY did it", what, before.Heartbeats, after.Heartbeats)
		}
		if after.Notifications <= before.Notifications {
			t.Fatalf("%s without a notification", what)
		}
	}

	t0 := time.Now()
	before := a.Stats()
	b := start(t, schema, "b:1", slowHB, slowTO)
	waitFor(t, 20*time.Second, "b joined", viewIs("a:1,b:1", b))
	byNotify("a sees b join by NOTIFY", before, viewIs("a:1,b:1", a))
	t.Logf("join seen by the other member %v after the new member started (heartbeat %v)", time.Since(t0), slowHB)

	gen := a.View().Generation
	t0 = time.Now()
	before = a.Stats()
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	byNotify("a sees b leave by NOTIFY", before, viewIs("a:1", a))
	t.Logf("clean leave seen after %v (heartbeat %v, timeout %v)", time.Since(t0), slowHB, slowTO)
	if g := a.View().Generation; g != gen+1 {
		t.Fatalf("generation %d after one leave, want %d", g, gen+1)
	}
	if a.Stats().Notifications < 2 {
		t.Fatalf("a received %d notifications, want the join and the leave", a.Stats().Notifications)
	}
	// The stopped member's last view is fenced and owns nothing.
	if v := b.View(); !v.Fenced() || v.Owns("t", "q") || ids(v) != "a:1" {
		t.Fatalf("stopped member's view: fenced=%v members=%s", v.Fenced(), ids(v))
	}
}

// A member whose heartbeats stop is fenced at once by its own clock, and
// leaves the others' views after the timeout (not before); when its
// heartbeats resume it rejoins with a new generation everywhere.
func TestStoppedHeartbeatsLeaveAfterTimeout(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	var block atomic.Bool
	gate := func(o *Options) {
		o.beforeBeat = func(ctx context.Context) error {
			if block.Load() {
				return fmt.Errorf("test: heartbeats stopped")
			}
			return nil
		}
	}
	var changes []*View
	var beforeErr error
	var mu sync.Mutex
	var cm atomic.Pointer[Membership] // c, once Start has returned it
	var befores atomic.Int64
	record := func(o *Options) {
		o.BeforeChange = func(prev, next *View) {
			// Called before next is published: readers still see prev.
			befores.Add(1)
			if m := cm.Load(); m != nil && m.View() != prev {
				cur := m.View()
				mu.Lock()
				beforeErr = fmt.Errorf("BeforeChange of generation %d: readers saw generation %d, not the previous view", next.Generation, cur.Generation)
				mu.Unlock()
			}
		}
		o.OnChange = func(prev, next *View) {
			mu.Lock()
			changes = append(changes, next)
			mu.Unlock()
		}
	}
	a := start(t, schema, "a:1", hb, to)
	b := start(t, schema, "b:1", hb, to)
	c := start(t, schema, "c:1", hb, to, gate, record)
	cm.Store(c)
	waitFor(t, 5*time.Second, "three members", viewIs("a:1,b:1,c:1", a, b, c))
	genA, genC := a.View().Generation, c.View().Generation

	// Find a queue c owns, to see it stop owning it.
	var tn, q string
	for i := 0; ; i++ {
		if tn, q = key(i); c.View().Owns(tn, q) {
			break
		}
	}
	block.Store(true)
	stopped := time.Now()
	waitFor(t, to+hb, "c fenced", c.Fenced)
	if c.View().Owns(tn, q) {
		t.Fatal("a fenced member still owns its queues")
	}
	waitFor(t, 2*to, "a and b drop c", viewIs("a:1,b:1", a, b))
	gone := time.Since(stopped)
	if gone < to-hb {
		t.Fatalf("c left after %v, before the timeout %v", gone, to)
	}
	t.Logf("heartbeats stopped: fenced by its own clock, dropped by the others after %v (timeout %v)", gone, to)
	if o, _ := a.View().Owner(tn, q); o.ID == "c:1" {
		t.Fatal("c still owns the queue in a's view")
	}
	// c's own published view leaves itself out.
	waitFor(t, to, "c publishes a fenced view", func() bool { v := c.View(); return v.fenced && v.self < 0 })

	block.Store(false)
	waitFor(t, 2*time.Second, "c rejoins", viewIs("a:1,b:1,c:1", a, b, c))
	if g := a.View().Generation; g != genA+2 {
		t.Fatalf("a's generation %d after c left and rejoined, want %d", g, genA+2)
	}
	if g := c.View().Generation; g <= genC+1 {
		t.Fatalf("c's generation %d after being fenced and rejoining, want > %d", g, genC+1)
	}
	if !c.View().Owns(tn, q) {
		t.Fatal("c does not own its queue again after rejoining")
	}
	mu.Lock()
	defer mu.Unlock()
	var sawFenced bool
	for i, v := range changes {
		sawFenced = sawFenced || v.fenced
		if i > 0 && v.Generation != changes[i-1].Generation+1 {
			t.Fatalf("OnChange generations out of order: %d after %d", v.Generation, changes[i-1].Generation)
		}
	}
	if !sawFenced || changes[len(changes)-1].fenced {
		t.Fatal("OnChange did not report the fencing and the rejoin")
	}
	if beforeErr != nil {
		t.Fatal(beforeErr)
	}
	if n := befores.Load(); n != int64(len(changes)) {
		t.Fatalf("BeforeChange called %d times, OnChange %d", n, len(changes))
	}
}

// A member restarted on the same address (another incarnation) is another
// member: the others' generation moves although the addresses do not.
func TestRejoinWithNewIncarnationIsANewGeneration(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	a := start(t, schema, "a:1", hb, to)
	b1 := start(t, schema, "b:1", hb, to)
	waitFor(t, 5*time.Second, "two members", viewIs("a:1,b:1", a, b1))
	gen := a.View().Generation
	b1.Stop(context.Background())
	b2 := start(t, schema, "b:1", hb, to)
	waitFor(t, 5*time.Second, "b back", func() bool {
		v := a.View()
		return ids(v) == "a:1,b:1" && v.Members[1].Incarnation == b2.opts.Incarnation
	})
	if g := a.View().Generation; g <= gen {
		t.Fatalf("generation %d after b restarted, want > %d", g, gen)
	}
	// A stale incarnation leaving does not remove its successor's row.
	// Judged by the statement itself: a row wrongly deleted would be put
	// back by b2's next heartbeat, likely before any view could show it.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tag, err := conn.Exec(ctx, a.sql.leave, "b:1", b1.opts.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if n := tag.RowsAffected(); n != 0 {
		t.Fatalf("the old incarnation's leave deleted %d rows, want none", n)
	}
	if v := a.View(); ids(v) != "a:1,b:1" || v.Members[1].Incarnation != b2.opts.Incarnation {
		t.Fatalf("after the old incarnation's leave: %s", ids(v))
	}
}

// The cell's table lives in the store's schema, beside the store's tables,
// and creating it from members booting together is safe.
func TestTableBesideTheStore(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	var ms []*Membership
	for i := range 5 {
		ms = append(ms, start(t, schema, fmt.Sprintf("m%d:1", i), hb, to))
	}
	waitFor(t, 5*time.Second, "five members", viewIs("m0:1,m1:1,m2:1,m3:1,m4:1", ms...))
	st, err := postgres.Open(context.Background(), postgres.Config{URL: pgServer.URL(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	select {
	case <-st.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("the store does not open in the cell's schema")
	}
	if err := pgServer.Exec(context.Background(), "SELECT member, incarnation, joined_at, heartbeat_at FROM "+schema+".cell_members"); err != nil {
		t.Fatal(err)
	}
}

// A table dropped under a running cell comes back on the next heartbeat.
func TestTableDroppedComesBack(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	a := start(t, schema, "a:1", hb, to)
	waitFor(t, 5*time.Second, "a alone", viewIs("a:1", a))
	if err := pgServer.Exec(context.Background(), "DROP TABLE "+schema+".cell_members"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the table back", func() bool {
		// The cast fails while the row is missing.
		return pgServer.Exec(context.Background(), "SELECT 1/count(*) FROM "+schema+".cell_members WHERE member = 'a:1'") == nil
	})
	if a.Stats().HeartbeatFailures == 0 {
		t.Fatal("no heartbeat failed while the table was missing")
	}
	waitFor(t, to, "a unfenced", func() bool { return !a.Fenced() })
	// So does the schema, dropped with the table in it.
	if err := pgServer.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the schema and the table back", func() bool {
		return pgServer.Exec(context.Background(), "SELECT 1/count(*) FROM "+schema+".cell_members WHERE member = 'a:1'") == nil
	})
	waitFor(t, 5*time.Second, "a unfenced", func() bool { return !a.Fenced() })
}

// Only a missing table (or schema) sends the next beat to check the table
// again: a beat that failed for another reason (here a constraint the
// upsert violates) is followed by beats of one round trip each, as in the
// steady state (TestMembershipTraffic).
func TestFailedBeatDoesNotRecheckTheTable(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	a := start(t, schema, "a:1", hb, time.Minute)
	waitFor(t, 5*time.Second, "a joined", viewIs("a:1", a))
	// The LISTEN connection's statement and the reload it asks for are
	// round trips too: let them pass first.
	waitFor(t, 5*time.Second, "listening", func() bool { return a.Stats().Listening })
	if err := pgServer.Exec(context.Background(), "ALTER TABLE "+schema+".cell_members ADD CONSTRAINT no_beats CHECK (heartbeat_at < '2000-01-01') NOT VALID"); err != nil {
		t.Fatal(err)
	}
	f := a.Stats().HeartbeatFailures
	waitFor(t, 5*time.Second, "two failed beats", func() bool { return a.Stats().HeartbeatFailures >= f+2 })
	before := a.Stats()
	waitFor(t, 5*time.Second, "eight more failed beats", func() bool { return a.Stats().HeartbeatFailures >= before.HeartbeatFailures+8 })
	after := a.Stats()
	beats, rt := after.Heartbeats-before.Heartbeats, after.RoundTrips-before.RoundTrips
	// +2: the counts are read while a beat may be starting, and a reload
	// may still come in; a table check after every failed beat would be
	// one more round trip each.
	if rt > beats+2 {
		t.Fatalf("%d round trips for %d failed beats, want one each", rt, beats)
	}
	if err := pgServer.Exec(context.Background(), "ALTER TABLE "+schema+".cell_members DROP CONSTRAINT no_beats"); err != nil {
		t.Fatal(err)
	}
	f = a.Stats().HeartbeatFailures
	b := a.Stats().Heartbeats
	waitFor(t, 5*time.Second, "beats again", func() bool { return a.Stats().Heartbeats > b+2 })
	if a.Stats().HeartbeatFailures > f+1 {
		t.Fatal("beats still fail once the constraint is gone")
	}
}

// Rows of members that left without a clean stop are removed once they
// have been dead ten member timeouts, and at least a minute (a joining
// member's first beat does it): a row dead for an hour goes, one dead for
// 30 s stays.
func TestLongDeadRowsAreRemoved(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	a := start(t, schema, "a:1", time.Minute, 3*time.Minute)
	waitFor(t, 5*time.Second, "a joined", viewIs("a:1", a))
	if err := pgServer.Exec(context.Background(), "INSERT INTO "+schema+".cell_members (member, incarnation, expires_at) VALUES "+
		"('old:1', 'x', now() - interval '1 hour'), ('recent:1', 'x', now() - interval '30 seconds')"); err != nil {
		t.Fatal(err)
	}
	b := start(t, schema, "b:1", time.Minute, 3*time.Minute)
	waitFor(t, 5*time.Second, "b joined", viewIs("a:1,b:1", b))
	rows, err := b.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.ID)
	}
	if strings.Join(got, ",") != "a:1,b:1,recent:1" {
		t.Fatalf("rows %q after b's first beat, want a:1,b:1,recent:1", got)
	}
}

// Rows lists live and dead rows with the database's timestamps.
func TestRows(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	var block atomic.Bool
	a := start(t, schema, "a:1", hb, to)
	b := start(t, schema, "b:1", hb, to, func(o *Options) {
		o.beforeBeat = func(context.Context) error {
			if block.Load() {
				return fmt.Errorf("test: stopped")
			}
			return nil
		}
	})
	waitFor(t, 5*time.Second, "two members", viewIs("a:1,b:1", a, b))
	block.Store(true)
	waitFor(t, 2*to, "b dropped", viewIs("a:1", a))
	rows, err := a.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].ID != "a:1" || !rows[0].Live || rows[1].ID != "b:1" || rows[1].Live ||
		rows[0].Incarnation != a.opts.Incarnation || rows[1].Incarnation != b.opts.Incarnation {
		t.Fatalf("rows %+v", rows)
	}
	if !rows[0].HeartbeatAt.After(rows[1].HeartbeatAt) || rows[0].JoinedAt.After(rows[0].HeartbeatAt) {
		t.Fatalf("timestamps %+v", rows)
	}
}

// Stop ends every goroutine and connection the member started.
func TestStopLeavesNothingRunning(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	opts := goleak.IgnoreCurrent()
	m := start(t, schema, "a:1", hb, to)
	waitFor(t, 5*time.Second, "joined", viewIs("a:1", m))
	time.Sleep(2 * hb)
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, opts)
}

// Two live processes advertising one address do not take turns on its
// row: the one that joined last holds it, the first is fenced at once and
// stays fenced (owning nothing) while the other lives, and takes the row
// back when the other leaves.
func TestDuplicateAddress(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	b := start(t, schema, "b:1", hb, to)
	a1 := start(t, schema, "a:1", hb, to)
	waitFor(t, 5*time.Second, "two members", viewIs("a:1,b:1", a1, b))
	a2 := start(t, schema, "a:1", hb, to)
	waitFor(t, 5*time.Second, "the second process joins", viewIs("a:1,b:1", a2))
	waitFor(t, 5*time.Second, "the first is fenced", a1.Fenced)
	incOf := func(v *View) string {
		for _, m := range v.Members {
			if m.ID == "a:1" {
				return m.Incarnation
			}
		}
		return ""
	}
	// b learns of the second process (a new incarnation at the address: a
	// new generation) at its own pace; from then on nothing may move.
	waitFor(t, 5*time.Second, "b sees the second process", func() bool { return incOf(b.View()) == a2.opts.Incarnation })
	gen := b.View().Generation
	time.Sleep(3 * to) // many heartbeats of both: no flapping
	if g := b.View().Generation; g != gen {
		t.Fatalf("b's generation moved from %d to %d while both processes ran: the row flaps", gen, g)
	}
	if v := b.View(); incOf(v) != a2.opts.Incarnation {
		t.Fatalf("b sees a:1 as %q, want the second process %q", incOf(v), a2.opts.Incarnation)
	}
	if !a1.Fenced() || a2.Fenced() || a1.View().Owns("t", "q") && a2.View().Owns("t", "q") {
		t.Fatalf("fenced: first %v, second %v", a1.Fenced(), a2.Fenced())
	}
	if err := a2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the first takes the address back", viewIs("a:1,b:1", a1, b))
	// b's view held a:1 all along (the second process's incarnation): it
	// learns of the first one's at its own pace too.
	waitFor(t, 5*time.Second, "b sees the first process again", func() bool { return incOf(b.View()) == a1.opts.Incarnation })
}

// A process that takes this member's address over announces its join by
// NOTIFY, and the displaced member reloads on it: it fences itself then,
// not at its next heartbeat (the other process answers for the address
// from its join). With a 10 s heartbeat, only the notification can do it.
func TestDuplicateAddressFencedByTheJoinNotification(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	const slowHB, slowTO = 10 * time.Second, 30 * time.Second
	a1 := start(t, schema, "a:1", slowHB, slowTO)
	waitFor(t, 5*time.Second, "the first process joined", viewIs("a:1", a1))
	waitFor(t, 5*time.Second, "the first process listening", func() bool { return a1.Stats().Listening })
	n := a1.Stats().Notifications
	a2 := start(t, schema, "a:1", hb, to)
	waitFor(t, 5*time.Second, "the second process joins", viewIs("a:1", a2))
	waitFor(t, 5*time.Second, "the join notified", func() bool { return a1.Stats().Notifications > n })
	took := waitFor(t, time.Second, "the first process fenced, within a second of its 10 s heartbeat", a1.Fenced)
	t.Logf("displaced member fenced %v after it was told of the other's join", took)
	if a1.View().Owns("t", "q") {
		t.Fatal("the displaced member still owns")
	}
}

// A member that has renewed is in the view it publishes, whatever the
// live set a reload read a moment earlier (with): in its sorted place, at
// either end too, replacing a row of its address with another incarnation;
// and a fenced member leaves itself out (without).
func TestWithAndWithout(t *testing.T) {
	self := Member{ID: "m:1", Incarnation: "new"}
	a, z := Member{ID: "a:1", Incarnation: "x"}, Member{ID: "z:1", Incarnation: "x"}
	for _, c := range []struct {
		name    string
		members []Member
		want    []Member
	}{
		{"an empty set", nil, []Member{self}},
		{"self sorts last", []Member{a}, []Member{a, self}},
		{"self sorts first", []Member{z}, []Member{self, z}},
		{"between", []Member{a, z}, []Member{a, self, z}},
		{"already there", []Member{a, self, z}, []Member{a, self, z}},
		{"another incarnation of self", []Member{a, {ID: "m:1", Incarnation: "old"}, z}, []Member{a, self, z}},
		{"another incarnation, last", []Member{a, {ID: "m:1", Incarnation: "old"}}, []Member{a, self}},
	} {
		if got := with(c.members, self); !slices.Equal(got, c.want) {
			t.Errorf("with, %s: %v, want %v", c.name, got, c.want)
		}
	}
	in := []Member{a, self, z}
	if got := without(in, "m:1"); !slices.Equal(got, []Member{a, z}) || !slices.Equal(in, []Member{a, self, z}) {
		t.Errorf("without: %v (the input now %v)", got, in)
	}
	if got := without([]Member{a, z}, "m:1"); !slices.Equal(got, []Member{a, z}) {
		t.Errorf("without, absent: %v", got)
	}
}

// The NOTIFY channel is the schema's name with "_cell" while that fits in
// an identifier (63 bytes); a longer schema name is hashed, so that every
// schema's cell has a channel of its own that PostgreSQL does not cut.
func TestChannelName(t *testing.T) {
	fits := strings.Repeat("s", 58) // 58 + len("_cell") = 63
	long := strings.Repeat("s", 59)
	longer := strings.Repeat("s", 60)
	if got := channelName("queen_ephemeral"); got != "queen_ephemeral_cell" {
		t.Errorf("channelName(queen_ephemeral) = %q", got)
	}
	if got := channelName(fits); got != fits+"_cell" {
		t.Errorf("a 58-byte schema's channel is %q, want the name with _cell", got)
	}
	seen := map[string]bool{}
	for _, s := range []string{long, longer, strings.Repeat("t", 59)} {
		c := channelName(s)
		if len(c) > 63 || !strings.HasPrefix(c, "queen_cell_") || seen[c] {
			t.Errorf("a %d-byte schema's channel is %q: want a hashed name of at most 63 bytes, its own", len(s), c)
		}
		seen[c] = true
	}
}

// syncLog collects a member's log lines (its goroutines write them).
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// A LISTEN connection lost while the member runs is logged (at debug) and
// comes back a heartbeat later; one closed by Stop is not a loss.
func TestListenConnectionLostAndBack(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	logs := new(syncLog)
	m := start(t, schema, "a:1", hb, time.Minute, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	waitFor(t, 5*time.Second, "listening", func() bool { return m.Stats().Listening })
	if err := pgServer.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND query LIKE '%"+schema+"%'"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the loss logged", func() bool { return logs.count("cell: listen connection lost") == 1 })
	waitFor(t, 5*time.Second, "listening again", func() bool { return m.Stats().Listening })
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := logs.count("cell: listen connection lost"); n != 1 {
		t.Fatalf("%d losses logged, want the one (Stop's close is not a loss)", n)
	}
}

// Admin reads never take the connection a heartbeat needs: however many
// are in flight, and however slow, the member keeps renewing and is never
// fenced. (With the two connections of the pool open to every read, two
// slow reads held both and the heartbeat, waiting for one, failed.)
func TestSlowAdminReadsLeaveTheHeartbeatItsConnection(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	release := make(chan struct{})
	var reading atomic.Int32
	// A member timeout of 1 s, not to: a beat denied its connection fails
	// when its renewal expires, and 250 ms is short enough for a loaded
	// machine's stall to fail one with no read in the way.
	const timeout = time.Second
	a := start(t, schema, "a:1", hb, timeout, func(o *Options) {
		o.beforeRows = func(ctx context.Context) {
			reading.Add(1)
			defer reading.Add(-1)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	})
	waitFor(t, 5*time.Second, "a live", viewIs("a:1", a))
	const reads = 4
	done := make(chan error, reads)
	for range reads {
		go func() {
			_, err := a.Rows(context.Background())
			done <- err
		}()
	}
	waitFor(t, 5*time.Second, "a read holding a connection", func() bool { return reading.Load() > 0 })
	before := a.Stats()
	// Three member timeouts with the reads held: a heartbeat denied its
	// connection fails within one.
	waitFor(t, 30*time.Second, "heartbeats while the reads are held", func() bool {
		return a.Stats().Heartbeats >= before.Heartbeats+int64(3*timeout/hb)
	})
	after := a.Stats()
	if failed := after.HeartbeatFailures - before.HeartbeatFailures; failed != 0 || a.View().Fenced() {
		t.Fatalf("with %d slow admin reads in flight: %d heartbeats failed, fenced %v", reads, failed, a.View().Fenced())
	}
	close(release)
	for range reads {
		if err := <-done; err != nil {
			t.Fatalf("a read: %v", err)
		}
	}
}
