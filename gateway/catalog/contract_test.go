package catalog

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// The contract both backends pass, in the way of store/storetest: each
// backend's test gives a factory, and every case runs on fresh storage.

// backend is fresh, empty storage for one test.
type backend struct {
	// open opens a store on the storage; each call opens another store on
	// the same storage, so a test can close one and reopen.
	open func() Store
	// shared: several stores may be open on the storage at once
	// (PostgreSQL). The embedded file admits one.
	shared bool
}

type factory func(t *testing.T) backend

func runContract(t *testing.T, f factory) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open func() Store, shared bool)
	}{
		{"RoundTrip", testRoundTrip},
		{"Delete", testDelete},
		{"Invalid", testInvalid},
		{"Revision", testRevision},
		{"TwoStores", testTwoStores},
		{"Usage", testUsage},
		{"ConcurrentUsage", testConcurrentUsage},
		{"SurvivesReopen", testSurvivesReopen},
		{"Closed", testClosed},
		{"CanceledContext", testCanceledContext},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := f(t)
			tc.fn(t, func() Store {
				t.Helper()
				s := b.open()
				t.Cleanup(func() { s.Close() })
				return s
			}, b.shared)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, s Store) ([]Plan, []Tenant) {
	t.Helper()
	ps, ts, err := s.Snapshot(ctxT(t))
	must(t, err)
	return ps, ts
}

func sameSnapshot(t *testing.T, s Store, plans []Plan, tenants []Tenant) {
	t.Helper()
	ps, ts := snapshot(t, s)
	if len(ps) != 0 || len(plans) != 0 {
		if !reflect.DeepEqual(ps, plans) {
			t.Fatalf("plans:\n got %+v\nwant %+v", ps, plans)
		}
	}
	if len(ts) != 0 || len(tenants) != 0 {
		if !reflect.DeepEqual(ts, tenants) {
			t.Fatalf("tenants:\n got %+v\nwant %+v", ts, tenants)
		}
	}
}

func revision(t *testing.T, s Store) int64 {
	t.Helper()
	r, err := s.Revision(ctxT(t))
	must(t, err)
	return r
}

var (
	free  = Plan{Name: "free", MessagesPerPeriod: 10000, PeriodSeconds: 86400, MessagesPerSecond: 5, ParkedSlots: 2}
	pro   = Plan{Name: "pro", Features: Features{Ephemeral: true}, MessagesPerSecond: 500}
	empty = Plan{Name: "unlimited"}
)

func testRoundTrip(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	sameSnapshot(t, s, nil, nil)
	if _, found, err := s.GetPlan(c, "free"); err != nil || found {
		t.Fatalf("GetPlan on a fresh store: found=%v err=%v", found, err)
	}
	if _, found, err := s.GetTenant(c, "acme"); err != nil || found {
		t.Fatalf("GetTenant on a fresh store: found=%v err=%v", found, err)
	}
	for _, p := range []Plan{pro, free, empty} {
		must(t, s.PutPlan(c, p))
	}
	for _, p := range []Plan{free, pro, empty} {
		got, found, err := s.GetPlan(c, p.Name)
		if err != nil || !found || got != p {
			t.Fatalf("GetPlan(%q) = %+v, %v, %v; want %+v", p.Name, got, found, err, p)
		}
	}
	// Replace, not merge.
	pro2 := Plan{Name: "pro", MessagesPerPeriod: 1 << 40, PeriodSeconds: 60}
	must(t, s.PutPlan(c, pro2))
	if got, _, _ := s.GetPlan(c, "pro"); got != pro2 {
		t.Fatalf("replaced plan = %+v, want %+v", got, pro2)
	}

	// Names in byte order: upper case, then lower, then beyond ASCII.
	tenants := []Tenant{{"Zeta", "free"}, {"acme", "pro"}, {"été", "free"}, {"ünï code/with spaces", "no-such-plan"}}
	for _, i := range []int{2, 0, 3, 1} {
		must(t, s.PutTenant(c, tenants[i]))
	}
	for _, want := range tenants {
		got, found, err := s.GetTenant(c, want.Name)
		if err != nil || !found || got != want {
			t.Fatalf("GetTenant(%q) = %+v, %v, %v", want.Name, got, found, err)
		}
	}
	tenants[1].Plan = "free"
	must(t, s.PutTenant(c, tenants[1]))
	sameSnapshot(t, s, []Plan{free, pro2, empty}, tenants)
}

func testDelete(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	must(t, s.PutPlan(c, free))
	must(t, s.PutPlan(c, pro))
	must(t, s.PutTenant(c, Tenant{"acme", "free"}))
	existed, err := s.DeletePlan(c, "free")
	if err != nil || !existed {
		t.Fatalf("DeletePlan of a stored plan = %v, %v", existed, err)
	}
	if _, found, err := s.GetPlan(c, "free"); err != nil || found {
		t.Fatalf("GetPlan after delete: found=%v err=%v", found, err)
	}
	if existed, err = s.DeletePlan(c, "free"); err != nil || existed {
		t.Fatalf("second DeletePlan = %v, %v", existed, err)
	}
	if existed, err = s.DeletePlan(c, "never"); err != nil || existed {
		t.Fatalf("DeletePlan of a plan never put = %v, %v", existed, err)
	}
	// The tenant stays, naming a plan that is gone: no reference is kept.
	sameSnapshot(t, s, []Plan{pro}, []Tenant{{"acme", "free"}})
	must(t, s.PutPlan(c, free))
	sameSnapshot(t, s, []Plan{free, pro}, []Tenant{{"acme", "free"}})
}

// wantInvalid checks that err is an *InvalidError saying msg.
func wantInvalid(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var ie *InvalidError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) || err.Error() != msg {
		t.Errorf("%s: err = %v, want invalid %q", what, err, msg)
	}
}

func testInvalid(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	rev := revision(t, s)
	wantInvalid(t, "PutPlan without name", s.PutPlan(c, Plan{}), "plan name is required")
	wantInvalid(t, "PutPlan negative", s.PutPlan(c, Plan{Name: "p", ParkedSlots: -1}), "parkedSlots must not be negative, got -1")
	wantInvalid(t, "PutPlan no period", s.PutPlan(c, Plan{Name: "p", MessagesPerPeriod: 5}),
		"periodSeconds must be positive when messagesPerPeriod is set")
	wantInvalid(t, "PutPlan control", s.PutPlan(c, Plan{Name: "a\x00b"}), "plan name carries a control character at byte 1")
	wantInvalid(t, "PutTenant without plan", s.PutTenant(c, Tenant{Name: "acme"}), "plan is required")
	wantInvalid(t, "PutTenant bad UTF-8", s.PutTenant(c, Tenant{Name: "a\xffb", Plan: "p"}), "tenant name is not valid UTF-8 (byte 1)")
	_, _, err := s.GetPlan(c, "")
	wantInvalid(t, "GetPlan", err, "plan name is required")
	_, _, err = s.GetTenant(c, "\n")
	wantInvalid(t, "GetTenant", err, "tenant name carries a control character at byte 0")
	_, err = s.DeletePlan(c, "")
	wantInvalid(t, "DeletePlan", err, "plan name is required")

	good := Usage{Tenant: "acme", Class: Messages, Minute: 600, Count: 1}
	for _, tc := range []struct {
		u   Usage
		msg string
	}{
		{Usage{Class: Messages, Minute: 60, Count: 1}, "usage tenant is required"},
		{Usage{Tenant: "acme", Minute: 60, Count: 1}, "usage class is required"},
		{Usage{Tenant: "acme", Class: Messages, Minute: 61, Count: 1}, "usage minute must be a non-negative multiple of 60, got 61"},
		{Usage{Tenant: "acme", Class: Messages, Minute: -60, Count: 1}, "usage minute must be a non-negative multiple of 60, got -60"},
		{Usage{Tenant: "acme", Class: Messages, Minute: 60, Count: -1}, "usage count must not be negative, got -1"},
	} {
		// The good row first: a refused batch counts none of its rows.
		wantInvalid(t, fmt.Sprintf("AddUsage %+v", tc.u), s.AddUsage(c, []Usage{good, tc.u}), tc.msg)
	}
	sameSnapshot(t, s, nil, nil)
	if u, err := s.UsageSince(c, 0); err != nil || len(u) != 0 {
		t.Fatalf("after refused batches, usage = %v, %v", u, err)
	}
	if now := revision(t, s); now != rev {
		t.Fatalf("refused writes moved the revision: %d then %d", rev, now)
	}
}

// testRevision: every successful catalog write raises the revision, a
// delete of nothing included (a statement that ran may as well count: a
// spurious reload costs one reload); reads and usage do not.
func testRevision(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	last := revision(t, s)
	if again := revision(t, s); again != last {
		t.Fatalf("revision moved with no write: %d then %d", last, again)
	}
	for _, w := range []struct {
		what string
		fn   func() error
	}{
		{"PutPlan", func() error { return s.PutPlan(c, free) }},
		{"PutPlan unchanged", func() error { return s.PutPlan(c, free) }},
		{"PutPlan changed", func() error { return s.PutPlan(c, pro) }},
		{"PutTenant", func() error { return s.PutTenant(c, Tenant{"acme", "free"}) }},
		{"PutTenant other plan", func() error { return s.PutTenant(c, Tenant{"acme", "pro"}) }},
		{"DeletePlan", func() error { _, err := s.DeletePlan(c, "free"); return err }},
		{"DeletePlan of nothing", func() error { _, err := s.DeletePlan(c, "free"); return err }},
	} {
		must(t, w.fn())
		now := revision(t, s)
		if now <= last {
			t.Fatalf("%s: the revision went from %d to %d, not up", w.what, last, now)
		}
		last = now
	}
	_, _, _ = s.GetPlan(c, "pro")
	_, _, _ = s.GetTenant(c, "acme")
	snapshot(t, s)
	must(t, s.AddUsage(c, []Usage{{"acme", Messages, 60, 3}}))
	_, err := s.UsageSince(c, 0)
	must(t, err)
	if now := revision(t, s); now != last {
		t.Fatalf("reads and usage moved the revision: %d then %d", last, now)
	}
}

// testTwoStores: stores open on one storage (several gateways on one
// database) see each other's writes and revisions at once.
func testTwoStores(t *testing.T, open func() Store, shared bool) {
	if !shared {
		t.Skip("the embedded file admits one store at a time (see TestEmbeddedLocked)")
	}
	a, b := open(), open()
	c := ctxT(t)
	if ra, rb := revision(t, a), revision(t, b); ra != rb {
		t.Fatalf("two stores on one storage disagree on the revision: %d and %d", ra, rb)
	}
	before := revision(t, a)
	must(t, b.PutPlan(c, free))
	must(t, b.PutTenant(c, Tenant{"acme", "free"}))
	if now := revision(t, a); now == before {
		t.Fatal("a write through b left a's revision alone")
	}
	if got, found, err := a.GetPlan(c, "free"); err != nil || !found || got != free {
		t.Fatalf("a.GetPlan after b.PutPlan = %+v, %v, %v", got, found, err)
	}
	sameSnapshot(t, a, []Plan{free}, []Tenant{{"acme", "free"}})

	before = revision(t, b)
	if existed, err := a.DeletePlan(c, "free"); err != nil || !existed {
		t.Fatalf("a.DeletePlan = %v, %v", existed, err)
	}
	if now := revision(t, b); now == before {
		t.Fatal("a delete through a left b's revision alone")
	}
	sameSnapshot(t, b, nil, []Tenant{{"acme", "free"}})

	must(t, a.AddUsage(c, []Usage{{"acme", Messages, 120, 2}}))
	must(t, b.AddUsage(c, []Usage{{"acme", Messages, 120, 3}}))
	u, err := b.UsageSince(c, 0)
	must(t, err)
	if want := map[string]map[Class]int64{"acme": {Messages: 5}}; !reflect.DeepEqual(u, want) {
		t.Fatalf("usage added through both = %v, want %v", u, want)
	}
}

func testUsage(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	since := func(at int64) map[string]map[Class]int64 {
		t.Helper()
		u, err := s.UsageSince(c, at)
		must(t, err)
		return u
	}
	if u := since(0); len(u) != 0 {
		t.Fatalf("fresh usage = %v", u)
	}
	must(t, s.AddUsage(c, nil))
	// One batch repeating a key; another adding to it.
	must(t, s.AddUsage(c, []Usage{
		{"acme", Messages, 600, 5},
		{"acme", Messages, 600, 2},
		{"acme", Deliveries, 600, 1},
		{"acme", Messages, 660, 10},
		{"beta", Messages, 720, 100},
		{"beta", Deliveries, 0, 7}, // minute 0 is a minute
		{"idle", Messages, 720, 0}, // counts nothing
	}))
	must(t, s.AddUsage(c, []Usage{{"acme", Messages, 600, 1}, {"beta", Messages, 780, 1}}))
	for _, tc := range []struct {
		since int64
		want  map[string]map[Class]int64
	}{
		{-1 << 62, map[string]map[Class]int64{"acme": {Messages: 18, Deliveries: 1}, "beta": {Messages: 101, Deliveries: 7}}},
		{0, map[string]map[Class]int64{"acme": {Messages: 18, Deliveries: 1}, "beta": {Messages: 101, Deliveries: 7}}},
		{541, map[string]map[Class]int64{"acme": {Messages: 18, Deliveries: 1}, "beta": {Messages: 101}}},
		{600, map[string]map[Class]int64{"acme": {Messages: 18, Deliveries: 1}, "beta": {Messages: 101}}},
		{601, map[string]map[Class]int64{"acme": {Messages: 10}, "beta": {Messages: 101}}},
		{720, map[string]map[Class]int64{"beta": {Messages: 101}}},
		{780, map[string]map[Class]int64{"beta": {Messages: 1}}},
		{781, map[string]map[Class]int64{}},
		{1 << 62, map[string]map[Class]int64{}},
	} {
		if got := since(tc.since); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("UsageSince(%d) = %v, want %v", tc.since, got, tc.want)
		}
	}
	// Large minutes and counts survive exactly (no float on the way).
	big := int64(1) << 53
	must(t, s.AddUsage(c, []Usage{{"big", Messages, 60 * (1 << 40), big + 1}}))
	must(t, s.AddUsage(c, []Usage{{"big", Messages, 60 * (1 << 40), big}}))
	if got := since(60 * (1 << 40))["big"][Messages]; got != 2*big+1 {
		t.Fatalf("big count = %d, want %d", got, 2*big+1)
	}
}

// testConcurrentUsage: batches added at once, some overlapping in keys and
// in opposite orders, all count.
func testConcurrentUsage(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	const workers, batches = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*batches)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range batches {
				rows := []Usage{{"a", Messages, 60, 1}, {"b", Messages, 60, 1}, {"a", Deliveries, 120, 2}}
				if w%2 == 1 {
					rows[0], rows[2] = rows[2], rows[0]
				}
				errs <- s.AddUsage(c, rows)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	u, err := s.UsageSince(c, 0)
	must(t, err)
	n := int64(workers * batches)
	if want := map[string]map[Class]int64{"a": {Messages: n, Deliveries: 2 * n}, "b": {Messages: n}}; !reflect.DeepEqual(u, want) {
		t.Fatalf("usage = %v, want %v", u, want)
	}
}

func testSurvivesReopen(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	must(t, s.PutPlan(c, free))
	must(t, s.PutPlan(c, pro))
	must(t, s.PutPlan(c, empty))
	_, err := s.DeletePlan(c, "unlimited")
	must(t, err)
	must(t, s.PutTenant(c, Tenant{"acme", "pro"}))
	must(t, s.AddUsage(c, []Usage{{"acme", Messages, 60, 4}, {"acme", Deliveries, 120, 1}}))
	rev := revision(t, s)
	must(t, s.Close())

	s = open()
	sameSnapshot(t, s, []Plan{free, pro}, []Tenant{{"acme", "pro"}})
	if now := revision(t, s); now != rev {
		t.Fatalf("revision after reopen = %d, want %d", now, rev)
	}
	u, err := s.UsageSince(c, 0)
	must(t, err)
	if want := map[string]map[Class]int64{"acme": {Messages: 4, Deliveries: 1}}; !reflect.DeepEqual(u, want) {
		t.Fatalf("usage after reopen = %v, want %v", u, want)
	}
	// And it keeps counting from there.
	must(t, s.AddUsage(c, []Usage{{"acme", Messages, 60, 1}}))
	must(t, s.PutTenant(c, Tenant{"acme", "free"}))
	if now := revision(t, s); now == rev {
		t.Fatal("a write after reopen left the revision alone")
	}
}

func testClosed(t *testing.T, open func() Store, _ bool) {
	s := open()
	c := ctxT(t)
	must(t, s.Close())
	must(t, s.Close())
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
	check("PutPlan", s.PutPlan(c, free))
	_, _, err := s.GetPlan(c, "free")
	check("GetPlan", err)
	_, err = s.DeletePlan(c, "free")
	check("DeletePlan", err)
	check("PutTenant", s.PutTenant(c, Tenant{"acme", "free"}))
	_, _, err = s.GetTenant(c, "acme")
	check("GetTenant", err)
	_, _, err = s.Snapshot(c)
	check("Snapshot", err)
	_, err = s.Revision(c)
	check("Revision", err)
	check("AddUsage", s.AddUsage(c, []Usage{{"acme", Messages, 60, 1}}))
	_, err = s.UsageSince(c, 0)
	check("UsageSince", err)
}

func testCanceledContext(t *testing.T, open func() Store, _ bool) {
	s := open()
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.PutPlan(c, free); err == nil {
		t.Error("PutPlan with a canceled context succeeded")
	}
	if _, err := s.Revision(c); err == nil {
		t.Error("Revision with a canceled context succeeded")
	}
	if err := s.AddUsage(c, []Usage{{"acme", Messages, 60, 1}}); err == nil {
		t.Error("AddUsage with a canceled context succeeded")
	}
	sameSnapshot(t, s, nil, nil)
	if u, err := s.UsageSince(ctxT(t), 0); err != nil || len(u) != 0 {
		t.Fatalf("usage after canceled AddUsage = %v, %v", u, err)
	}
}
