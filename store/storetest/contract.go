// Package storetest holds what the store implementations' tests share: the
// contract suite every store.Store passes (Run), and a throwaway
// PostgreSQL server for the run (StartPostgres, MainWithPostgres).
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queenmq/ephemeral/store"
)

// Factory prepares fresh, empty storage for one test and returns a function
// that opens a store on it. Each call opens a new store on the same
// storage, so a test can close one and reopen; the suite closes what it
// opens.
type Factory func(t *testing.T) (open func() store.Store)

// Run runs the contract suite.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, func() store.Store)
	}{
		{"ReadyAndHealthy", testReadyAndHealthy},
		{"RoundTrip", testRoundTrip},
		{"RePutReplaces", testRePutReplaces},
		{"OptionsVerbatim", testOptionsVerbatim},
		{"Invalid", testInvalid},
		{"ManyTenants", testManyTenants},
		{"Names", testNames},
		{"ConcurrentPuts", testConcurrentPuts},
		{"SurvivesReopen", testSurvivesReopen},
		{"Grants", testGrants},
		{"Settings", testSettings},
		{"KillSwitch", testKillSwitch},
		{"Revision", testRevision},
		{"ChangesFromAnotherWriter", testChangesFromAnotherWriter},
		{"Closed", testClosed},
		{"CanceledContext", testCanceledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open := f(t)
			tc.fn(t, func() store.Store {
				t.Helper()
				s := open()
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

func ctx(t *testing.T) context.Context {
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

func decl(tenant, queue, opts string) store.Declaration {
	return store.Declaration{Tenant: tenant, Queue: queue, Options: []byte(opts)}
}

func load(t *testing.T, s store.Store) []store.Declaration {
	t.Helper()
	ds, err := s.LoadDeclarations(ctx(t))
	must(t, err)
	return ds
}

// sameDecls compares exactly, options byte for byte.
func sameDecls(t *testing.T, got, want []store.Declaration) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("loaded %d declarations, want %d:\n got %s\nwant %s", len(got), len(want), show(got), show(want))
	}
	for i := range got {
		if got[i].Tenant != want[i].Tenant || got[i].Queue != want[i].Queue || !bytes.Equal(got[i].Options, want[i].Options) {
			t.Fatalf("declaration %d:\n got %s\nwant %s", i, show(got[i:i+1]), show(want[i:i+1]))
		}
	}
}

func show(ds []store.Declaration) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "[%q %q %q] ", d.Tenant, d.Queue, d.Options)
	}
	return b.String()
}

func testReadyAndHealthy(t *testing.T, open func() store.Store) {
	s := open()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Ready not closed within 10 s of Open")
	}
	if !s.Healthy() {
		t.Fatal("a ready store on working storage reports down")
	}
}

func testRoundTrip(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	if ds := load(t, s); len(ds) != 0 {
		t.Fatalf("fresh store holds %s", show(ds))
	}
	a := decl("default", "presence", `{"maxLength":1000,"policy":"dropOldest"}`)
	b := decl("default", "inbox", `{}`)
	must(t, s.PutDeclaration(c, a))
	must(t, s.PutDeclaration(c, b))
	sameDecls(t, load(t, s), []store.Declaration{b, a}) // ordered by queue

	existed, err := s.DeleteDeclaration(c, "default", "presence")
	must(t, err)
	if !existed {
		t.Fatal("delete of a stored declaration reported existed=false")
	}
	sameDecls(t, load(t, s), []store.Declaration{b})
	existed, err = s.DeleteDeclaration(c, "default", "presence")
	must(t, err)
	if existed {
		t.Fatal("second delete reported existed=true")
	}
	existed, err = s.DeleteDeclaration(c, "nobody", "never")
	must(t, err)
	if existed {
		t.Fatal("delete of a never-declared queue reported existed=true")
	}
	existed, err = s.DeleteDeclaration(c, "default", "inbox")
	must(t, err)
	if !existed {
		t.Fatal("delete of the last declaration reported existed=false")
	}
	sameDecls(t, load(t, s), nil)

	// Put after delete declares again.
	must(t, s.PutDeclaration(c, a))
	sameDecls(t, load(t, s), []store.Declaration{a})
}

func testRePutReplaces(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	must(t, s.PutDeclaration(c, decl("t", "q", `{"maxLength":10,"ttlSeconds":30}`)))
	must(t, s.PutDeclaration(c, decl("t", "other", `{"retryLimit":2}`)))
	// Replace, not merge (D9): the second put sends only maxBytes.
	want := decl("t", "q", `{"maxBytes":4096}`)
	must(t, s.PutDeclaration(c, want))
	sameDecls(t, load(t, s), []store.Declaration{decl("t", "other", `{"retryLimit":2}`), want})
	// Replacing with the empty object leaves an empty declaration, not none.
	must(t, s.PutDeclaration(c, decl("t", "q", `{}`)))
	sameDecls(t, load(t, s), []store.Declaration{decl("t", "other", `{"retryLimit":2}`), decl("t", "q", `{}`)})
}

// verbatimOptions are objects whose exact spelling a normalising store
// would change: spacing, key order, duplicate keys, number spelling beyond
// float64, escapes, nesting.
var verbatimOptions = []string{
	`{}`,
	`{ }`,
	"{\n  \"maxBytes\" : 1048576,\n\t\"policy\":\"reject\"\n}",
	`{"windowBuffer":{"ms":20,"count":50},"maxLength":1000,"leaseSeconds":15}`,
	`{"retryLimit":3,"maxBytes":1048576,"policy":"dropOldest","ttlSeconds":30}`,
	`{"maxBytes":9007199254740993,"maxLength":18446744073709551615}`,
	`{"ttlSeconds":1.50,"leaseSeconds":1e3,"retryLimit":0}`,
	`{"policy":"drop\u004fldest","x":"\u00e9\ud83d\ude00","y":"é😀","z":"a\"b\\c\/d\u0000e"}`,
	`{"maxLength":1,"maxLength":2}`,
	`{"windowBuffer":{"ms":0,"count":0,"nested":[1,[2,{"deep":null}],true,false]}}`,
	`  {"leading":"and trailing space"}  `,
	`{"long":"` + strings.Repeat("x", 64<<10) + `"}`,
}

func testOptionsVerbatim(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	var want []store.Declaration
	for i, o := range verbatimOptions {
		d := decl("verbatim", fmt.Sprintf("q%02d", i), o)
		must(t, s.PutDeclaration(c, d))
		want = append(want, d)
	}
	sameDecls(t, load(t, s), want)

	// The store keeps its own copy: changing the caller's slice after the
	// put, or the loaded slice after the load, changes nothing stored.
	buf := []byte(`{"maxLength":7}`)
	must(t, s.PutDeclaration(c, store.Declaration{Tenant: "verbatim", Queue: "q00", Options: buf}))
	copy(buf, `{"maxLength":8}`)
	got := load(t, s)
	if string(got[0].Options) != `{"maxLength":7}` {
		t.Fatalf("stored options follow the caller's buffer: %s", got[0].Options)
	}
	copy(got[0].Options, `{"maxLength":9}`)
	if got := load(t, s); string(got[0].Options) != `{"maxLength":7}` {
		t.Fatalf("stored options follow a loaded buffer: %s", got[0].Options)
	}
}

func testInvalid(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	long := strings.Repeat("n", store.MaxNameBytes+1)
	bad := []store.Declaration{
		decl("", "q", `{}`),
		decl("t", "", `{}`),
		decl(long, "q", `{}`),
		decl("t", long, `{}`),
		decl("t", "bad\xffutf8", `{}`),
		decl("t", "nul\x00", `{}`),
		decl("t", "q", ``),
		decl("t", "q", `{`),
		decl("t", "q", `[1,2]`),
		decl("t", "q", `"string"`),
		decl("t", "q", `null`),
		decl("t", "q", `{"a":1} {"b":2}`),
		decl("t", "q", "{\"a\":\"\xff\"}"),
	}
	for _, d := range bad {
		if err := s.PutDeclaration(c, d); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutDeclaration(%s) = %v, want ErrInvalid", show([]store.Declaration{d}), err)
		}
	}
	if _, err := s.DeleteDeclaration(c, "t", long); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("DeleteDeclaration with a %d-byte name = %v, want ErrInvalid", len(long), err)
	}
	for _, g := range []store.Grant{{Tenant: ""}, {Tenant: "t", MaxBytes: -1}, {Tenant: "t", MaxQueues: -1}, {Tenant: "t", MessagesPerSecond: -1}} {
		if err := s.PutGrant(c, g); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutGrant(%+v) = %v, want ErrInvalid", g, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", store.MaxKeyBytes+1), "nul\x00"} {
		if err := s.PutSetting(c, k, []byte("v")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutSetting(%q) = %v, want ErrInvalid", k, err)
		}
	}
	if errors.Is(store.ErrInvalid, store.ErrUnavailable) {
		t.Error("ErrInvalid must not read as ErrUnavailable")
	}
	sameDecls(t, load(t, s), nil)
	if gs, err := s.LoadGrants(c); err != nil || len(gs) != 0 {
		t.Fatalf("after refused grants: %v %v", gs, err)
	}
}

func testManyTenants(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	const tenants, queues = 40, 5
	var want []store.Declaration
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, tenants)
	for i := range tenants {
		wg.Go(func() {
			for j := range queues {
				// Every tenant uses the same queue names: they are unrelated.
				d := decl(fmt.Sprintf("tenant-%02d", i), fmt.Sprintf("queue-%d", j), fmt.Sprintf(`{"maxLength":%d}`, i*100+j+1))
				if err := s.PutDeclaration(c, d); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want = append(want, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sortDecls(want)
	sameDecls(t, load(t, s), want)

	// Deleting one tenant's queue leaves the same name of every other.
	existed, err := s.DeleteDeclaration(c, "tenant-07", "queue-3")
	must(t, err)
	if !existed {
		t.Fatal("delete reported existed=false")
	}
	var rest []store.Declaration
	for _, d := range want {
		if d.Tenant != "tenant-07" || d.Queue != "queue-3" {
			rest = append(rest, d)
		}
	}
	sameDecls(t, load(t, s), rest)
}

func sortDecls(ds []store.Declaration) {
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && less(ds[j], ds[j-1]); j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}

func less(a, b store.Declaration) bool {
	if a.Tenant != b.Tenant {
		return a.Tenant < b.Tenant
	}
	return a.Queue < b.Queue
}

// nameOf builds a name of exactly n bytes out of r, padding with ASCII.
func nameOf(r string, n int) string {
	var b strings.Builder
	for b.Len()+len(r) <= n {
		b.WriteString(r)
	}
	for b.Len() < n {
		b.WriteByte('z')
	}
	return b.String()
}

func testNames(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	names := []string{
		"a",
		"Ünïcödé-キュー-队列-очередь",
		"😀🎉 emoji 👩‍👩‍👧",
		"عربى-עברית", // right to left
		"e\u0301 combining vs é",
		"it's \"quoted\" \\ back/slash % _ ; DROP TABLE x; --",
		"  spaces  and punctuation !@#$^&*()[]{}<>?,. ",
		nameOf("x", store.MaxNameBytes),
		nameOf("é", store.MaxNameBytes),   // 2-byte runes, 512 bytes
		nameOf("キ", store.MaxNameBytes),   // 3-byte runes, 510 bytes + 2
		nameOf("😀", store.MaxNameBytes),   // 4-byte runes, exactly 512
		nameOf("😀", store.MaxNameBytes-1), // a different name, one byte shorter
	}
	var want []store.Declaration
	for i, n := range names {
		if len(n) > store.MaxNameBytes || !utf8.ValidString(n) {
			t.Fatalf("bad test name %q", n)
		}
		// The same name as tenant and as queue.
		d := decl(n, n, fmt.Sprintf(`{"maxLength":%d}`, i+1))
		must(t, s.PutDeclaration(c, d))
		want = append(want, d)
	}
	sortDecls(want)
	sameDecls(t, load(t, s), want)
	for _, n := range names {
		existed, err := s.DeleteDeclaration(c, n, n)
		must(t, err)
		if !existed {
			t.Fatalf("delete of %q reported existed=false", n)
		}
	}
	sameDecls(t, load(t, s), nil)
}

func testConcurrentPuts(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	const workers, each = 8, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// One queue of its own per put, and one contended queue.
				if err := s.PutDeclaration(c, decl("c", fmt.Sprintf("w%d-%02d", w, i), fmt.Sprintf(`{"maxLength":%d}`, i+1))); err != nil {
					errs <- err
				}
				if err := s.PutDeclaration(c, decl("c", "shared", fmt.Sprintf(`{"maxLength":%d}`, w*1000+i+1))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ds := load(t, s)
	if len(ds) != workers*each+1 {
		t.Fatalf("loaded %d declarations, want %d", len(ds), workers*each+1)
	}
	for _, d := range ds {
		if d.Queue == "shared" {
			// One whole value that some worker wrote, never a mix.
			var w, i int
			if _, err := fmt.Sscanf(string(d.Options), `{"maxLength":%d}`, &i); err != nil || i < 1 {
				t.Fatalf("contended declaration holds %s", d.Options)
			}
			w, i = (i-1)/1000, (i-1)%1000
			if w >= workers || i >= each {
				t.Fatalf("contended declaration holds %s, which nobody wrote", d.Options)
			}
		}
	}
}

func testSurvivesReopen(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	want := []store.Declaration{
		decl("a", "declared", `{"maxBytes":1048576, "policy":"dropOldest"}`),
		decl("b", "declared", `{}`),
	}
	for _, d := range want {
		must(t, s.PutDeclaration(c, d))
	}
	must(t, s.PutGrant(c, store.Grant{Tenant: "a", MaxBytes: 1, MaxQueues: 2, MessagesPerSecond: 3}))
	must(t, s.PutSetting(c, "k", []byte("v")))
	must(t, s.Close())

	s2 := open()
	waitReady(t, s2)
	sameDecls(t, load(t, s2), want)
	if g, ok, err := s2.GetGrant(c, "a"); err != nil || !ok || g != (store.Grant{Tenant: "a", MaxBytes: 1, MaxQueues: 2, MessagesPerSecond: 3}) {
		t.Fatalf("grant after reopen: %+v %v %v", g, ok, err)
	}
	if v, ok, err := s2.GetSetting(c, "k"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("setting after reopen: %q %v %v", v, ok, err)
	}
}

func waitReady(t *testing.T, s store.Store) {
	t.Helper()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("store not ready within 10 s")
	}
}

func testGrants(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	if _, ok, err := s.GetGrant(c, "acme"); err != nil || ok {
		t.Fatalf("missing grant: found=%v err=%v", ok, err)
	}
	a := store.Grant{Tenant: "acme", MaxBytes: 1 << 40, MaxQueues: 100, MessagesPerSecond: 5000}
	z := store.Grant{Tenant: "zeta-ü", MaxBytes: 0, MaxQueues: 0, MessagesPerSecond: 0} // all unlimited
	must(t, s.PutGrant(c, a))
	must(t, s.PutGrant(c, z))
	if g, ok, err := s.GetGrant(c, "acme"); err != nil || !ok || g != a {
		t.Fatalf("GetGrant = %+v %v %v, want %+v", g, ok, err, a)
	}
	a2 := store.Grant{Tenant: "acme", MaxBytes: 1, MaxQueues: 1<<63 - 1, MessagesPerSecond: 0}
	must(t, s.PutGrant(c, a2)) // replaces
	gs, err := s.LoadGrants(c)
	must(t, err)
	if len(gs) != 2 || gs[0] != a2 || gs[1] != z {
		t.Fatalf("LoadGrants = %+v, want [%+v %+v]", gs, a2, z)
	}
	existed, err := s.DeleteGrant(c, "acme")
	must(t, err)
	if !existed {
		t.Fatal("DeleteGrant of a stored grant reported existed=false")
	}
	if existed, err := s.DeleteGrant(c, "acme"); err != nil || existed {
		t.Fatalf("second DeleteGrant: existed=%v err=%v", existed, err)
	}
	if _, ok, err := s.GetGrant(c, "acme"); err != nil || ok {
		t.Fatalf("deleted grant: found=%v err=%v", ok, err)
	}
	gs, err = s.LoadGrants(c)
	must(t, err)
	if len(gs) != 1 || gs[0] != z {
		t.Fatalf("LoadGrants after delete = %+v", gs)
	}
	// Grants and declarations are separate: a tenant's grant is not a queue.
	sameDecls(t, load(t, s), nil)
}

func testSettings(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	if v, ok, err := s.GetSetting(c, "missing"); err != nil || ok || v != nil {
		t.Fatalf("missing setting: %q %v %v", v, ok, err)
	}
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	must(t, s.PutSetting(c, "binary", bin))
	must(t, s.PutSetting(c, "empty", nil))
	must(t, s.PutSetting(c, "text", []byte("one")))
	must(t, s.PutSetting(c, "text", []byte("two"))) // replaces
	for k, want := range map[string][]byte{"binary": bin, "empty": {}, "text": []byte("two")} {
		v, ok, err := s.GetSetting(c, k)
		if err != nil || !ok || !bytes.Equal(v, want) || v == nil {
			t.Fatalf("GetSetting(%q) = %q %v %v, want %q", k, v, ok, err, want)
		}
	}
}

func testKillSwitch(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	k, found, err := store.LoadKillSwitch(c, s)
	must(t, err)
	if found || !k.Enabled {
		t.Fatalf("no kill switch ever written: %+v found=%v, want enabled", k, found)
	}
	paused := store.KillSwitch{Enabled: false, RetryAfterSeconds: 30}
	must(t, store.SaveKillSwitch(c, s, paused))
	must(t, s.Close())
	s = open() // a paused broker restarts paused
	waitReady(t, s)
	k, found, err = store.LoadKillSwitch(c, s)
	if err != nil || !found || k != paused {
		t.Fatalf("LoadKillSwitch = %+v %v %v, want %+v", k, found, err, paused)
	}
	if err := store.SaveKillSwitch(c, s, store.KillSwitch{RetryAfterSeconds: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("negative retryAfterSeconds: %v", err)
	}
	must(t, store.SaveKillSwitch(c, s, store.KillSwitch{Enabled: true}))
	if k, _, _ := store.LoadKillSwitch(c, s); k != (store.KillSwitch{Enabled: true}) {
		t.Fatalf("re-enabled kill switch reads %+v", k)
	}
}

func testClosed(t *testing.T, open func() store.Store) {
	s := open()
	c := ctx(t)
	must(t, s.PutDeclaration(c, decl("t", "q", `{}`)))
	must(t, s.Close())
	must(t, s.Close()) // twice is fine
	if s.Healthy() {
		t.Error("a closed store reports healthy")
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed (an ErrUnavailable)", what, err)
		}
	}
	_, err := s.LoadDeclarations(c)
	check("LoadDeclarations", err)
	check("PutDeclaration", s.PutDeclaration(c, decl("t", "q", `{}`)))
	_, err = s.DeleteDeclaration(c, "t", "q")
	check("DeleteDeclaration", err)
	_, err = s.LoadGrants(c)
	check("LoadGrants", err)
	_, _, err = s.GetGrant(c, "t")
	check("GetGrant", err)
	check("PutGrant", s.PutGrant(c, store.Grant{Tenant: "t"}))
	_, err = s.DeleteGrant(c, "t")
	check("DeleteGrant", err)
	_, _, err = s.GetSetting(c, "k")
	check("GetSetting", err)
	check("PutSetting", s.PutSetting(c, "k", nil))
	_, err = s.Revision(c)
	check("Revision", err)
}

func testCanceledContext(t *testing.T, open func() store.Store) {
	s := open()
	c, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := s.PutDeclaration(c, decl("t", "q", `{}`)); err == nil {
		t.Fatal("a put under a canceled context succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a put under a canceled context took %v", d)
	}
	sameDecls(t, load(t, s), nil)
}
