package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// startPostgres starts a throwaway PostgreSQL for one test, closed when it
// ends. Without one it skips, unless CI=true (as storetest.MainWithPostgres
// does): a cell needs its database.
func startPostgres(t *testing.T) *storetest.Postgres {
	t.Helper()
	pg, err := storetest.StartPostgres()
	if errors.Is(err, storetest.ErrNoPostgres) && os.Getenv("CI") != "true" {
		t.Skipf("a cell needs PostgreSQL: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Close(); err != nil {
			t.Log(err)
		}
	})
	return pg
}

// cellMember is one member of a test's cell: its broker and id.
type cellMember struct {
	b  *brokertest.Broker
	id string
}

// startCell starts n members on one throwaway PostgreSQL; env[i], when
// given, is added to member i's environment.
func startCell(t *testing.T, n int, env ...map[string]string) (members []cellMember, add func() cellMember) {
	t.Helper()
	pg := startPostgres(t)
	schema := pg.FreshSchema(t)
	bin := brokertest.Binary(t, brokertest.Queen)
	cell := brokertest.NewCell(pg.URL(), schema, map[string]string{"QUEEN_CELL_SECRET": "a-cell-secret-for-the-dashboard-test"})
	start := func(i int) cellMember {
		port := brokertest.Port(t)
		id := brokertest.Advertise(t)
		var extra map[string]string
		if i < len(env) {
			extra = env[i]
		}
		e := cell.Env(id, extra)
		b := brokertest.New(t, bin, e)
		b.WaitStoreOK = true
		b.StartOn(t, port)
		return cellMember{b: b, id: id}
	}
	for i := 0; i < n; i++ {
		members = append(members, start(i))
	}
	return members, func() cellMember { return start(len(env)) }
}

// ownedBy returns a queue name that member id owns by the live set ids
// for tenant.
func ownedBy(t *testing.T, ids []string, tenant, id string) string {
	t.Helper()
	return brokertest.QueueOwnedBy(t, ids, tenant, "cell-q", id)
}

// waitMembers waits until the page's Cell panel counts n members: the
// member serving it has a view of n.
func waitMembers(t *testing.T, ctx context.Context, cons *consoleLog, n int) {
	t.Helper()
	want := strconv.Itoa(n) + " members"
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('cell').textContent === '`+want+`'`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		errs, browser := cons.snapshot()
		t.Fatalf("the cell panel never counted %d members: %v (shown: %s; status: %s; console: %q; browser: %v)", n, err,
			evalString(t, ctx, `document.getElementById('cell').textContent`), evalString(t, ctx, `document.getElementById('status').textContent`), errs, browser)
	}
}

// viewTenant reads the caller's tenant from the view read.
func viewTenant(t *testing.T, api *apiClient) string {
	t.Helper()
	var v struct {
		Tenant string `json:"tenant"`
	}
	if err := json.Unmarshal(api.do("GET", "/api/v1/ephemeral/cell", "", 200), &v); err != nil {
		t.Fatal(err)
	}
	return v.Tenant
}

// ownerShown is the Owner cell of queue q's row ("no row" without one).
func ownerShown(t *testing.T, ctx context.Context, q string) string {
	t.Helper()
	return evalString(t, ctx, fmt.Sprintf(`(() => { const td = document.querySelector('tr[data-queue=%q] td[data-col="owner"]'); return td === null ? 'no row' : td.textContent; })()`, q))
}

// noCrossOriginErrors fails on a browser log line about CORS or the
// page's policy: a member's listing the browser refused to let the page
// read.
func noCrossOriginErrors(t *testing.T, cons *consoleLog) {
	t.Helper()
	errs, browser := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
	for _, l := range browser {
		if strings.Contains(l.line, "CORS") || strings.Contains(l.line, "Content Security Policy") || strings.Contains(l.line, "Access-Control") {
			t.Errorf("browser: %s", l.line)
		}
	}
}

// On a member of a cell of three, the queue table is the cell's: a queue
// owned by each member is listed with its depth and its owner, read from
// each member's public URL across origins (docs/dashboard.md, "Queues";
// docs/server.md, "Browsers (D20)"); the scope line says all three
// answered; the bytes note stays this member's; and it still fits 800 px.
func TestDashboardOnACellMember(t *testing.T) {
	chrome := findChromium(t)
	members, _ := startCell(t, 3)
	self := members[0]
	api := &apiClient{t: t, base: self.b.URL()}

	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(self.b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	waitMembers(t, ctx, cons, 3)
	ids := []string{members[0].id, members[1].id, members[2].id}
	tenant := viewTenant(t, api)
	queues := map[string]string{} // queue -> owner
	for i, m := range members {
		q := ownedBy(t, ids, tenant, m.id)
		queues[q] = m.id
		api.push(q, i+1) // to the first member, which relays it to the owner
	}
	i := 0
	for _, m := range members {
		for q, owner := range queues {
			if owner == m.id {
				waitDepth(t, ctx, q, int64(i+1), 10*time.Second)
				if got := ownerShown(t, ctx, q); got != owner {
					t.Errorf("%s: owner shown %q, want %q", q, got, owner)
				}
			}
		}
		i++
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues-scope').dataset.scope === 'cell'`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("on a cell member the queue table does not say it is the cell's: %v", err)
	}
	scope := evalString(t, ctx, `document.getElementById('queues-scope').textContent`)
	if want := "The cell's listing: every member's, read from this page, each queue's row from its owner (3 of 3 members answered)."; scope != want {
		t.Errorf("the queue table's scope says %q; want %q", scope, want)
	}
	if n := evalString(t, ctx, `document.getElementById('queue-count').textContent`); n != "(3)" {
		t.Errorf("the heading counts %s, want (3)", n)
	}
	if note := evalString(t, ctx, `document.getElementById('bytes-note').textContent`); !strings.HasPrefix(note, "this member's footprint; ") {
		t.Errorf("the broker bytes note says %q; want it to start with this member's footprint", note)
	}
	// The members' list (GET /api/v1/system/cell) is read on the first poll.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`[...document.querySelectorAll('#cell-members li')].some((li) => li.textContent.includes('(this broker)'))`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Errorf("the cell panel does not list this member: %v (shown: %s)", err, evalString(t, ctx, `document.getElementById('cell-members').textContent`))
	}
	if over := overflowAt(t, ctx, 800); len(over) > 0 {
		t.Errorf("a cell member's page at 800 px: %d boxes overflow:\n  %s", len(over), strings.Join(over, "\n  "))
	}
	shot(t, ctx, filepath.Join(artifactsDir(t), "dashboard-cell-member.png"))
	noCrossOriginErrors(t, cons)
}

// A member whose public URL does not answer the browser is named above
// the table, with why, and the queues it owns are not shown; the rest of
// the cell is.
func TestDashboardNamesAMemberNotRead(t *testing.T) {
	chrome := findChromium(t)
	gone := "http://127.0.0.1:" + strconv.Itoa(brokertest.Port(t)) // nothing listens there
	members, add := startCell(t, 2, nil, map[string]string{"QUEEN_CELL_PUBLIC_URL": gone})
	self, other := members[0], members[1]
	api := &apiClient{t: t, base: self.b.URL()}

	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(self.b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	waitMembers(t, ctx, cons, 2)
	ids := []string{self.id, other.id}
	tenant := viewTenant(t, api)
	mine, theirs := ownedBy(t, ids, tenant, self.id), ownedBy(t, ids, tenant, other.id)
	api.push(mine, 2)
	api.push(theirs, 3)
	waitDepth(t, ctx, mine, 2, 10*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues-scope').dataset.missing === '`+other.id+`'`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the member not read is not named: %v (scope: %s)", err, evalString(t, ctx, `document.getElementById('queues-scope').textContent`))
	}
	scope := evalString(t, ctx, `document.getElementById('queues-scope').textContent`)
	for _, want := range []string{"(1 of 2 members answered)", "Not read: " + other.id + " (no answer from " + gone + " within 3 s)", "the queues it owns are not shown"} {
		if !strings.Contains(scope, want) {
			t.Errorf("the scope says %q; want it to contain %q", scope, want)
		}
	}
	if got := ownerShown(t, ctx, mine); got != self.id {
		t.Errorf("%s: owner shown %q, want %q", mine, got, self.id)
	}
	if got := ownerShown(t, ctx, theirs); got != "no row" {
		t.Errorf("%s, owned by the member not read: shown with owner %q", theirs, got)
	}
	// A member that joins after the page was loaded is outside its policy's
	// connect-src: named, not read (no request the policy would block).
	late := add()
	waitMembers(t, ctx, cons, 3)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues-scope').dataset.missing.split(' ').includes('`+late.id+`')`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the member that joined late is not named: %v (scope: %s)", err, evalString(t, ctx, `document.getElementById('queues-scope').textContent`))
	}
	if scope := evalString(t, ctx, `document.getElementById('queues-scope').textContent`); !strings.Contains(scope, late.id+" (it joined after this page was loaded: reload the page to read it)") {
		t.Errorf("the scope says %q; want the late member named with a reload", scope)
	}
	_, browser := cons.snapshot()
	for _, l := range browser {
		if strings.Contains(l.line, "Content Security Policy") {
			t.Errorf("browser: %s", l.line)
		}
	}
	errs, _ := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
}

// The page's ownership function (server/dashboard/owner.js) answers the
// broker's, in Chromium, for every case of cell/testdata/owners.json: the
// owner and the key hash. A page that disagreed would show a queue's row
// from a member that does not own it.
func TestDashboardOwnerVectors(t *testing.T) {
	chrome := findChromium(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "cell", "testdata", "owners.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vectors struct {
		Cases []struct {
			Members []struct {
				ID string `json:"id"`
			} `json:"members"`
			Tenant string `json:"tenant"`
			Queue  string `json:"queue"`
			Key    string `json:"key"`
			Owner  string `json:"owner"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors.Cases) < 10 {
		t.Fatalf("owners.json holds %d cases", len(vectors.Cases))
	}
	b := brokertest.StartQueen(t, nil)
	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	js := `JSON.stringify((` + string(raw) + `).cases.map((c) => [
		window.queenOwner.ownerOf(c.members.map((m) => m.id), c.tenant, c.queue),
		window.queenOwner.keyHash(c.tenant, c.queue).toString(16).padStart(16, '0')]))`
	var got [][2]string
	if err := json.Unmarshal([]byte(evalString(t, ctx, js)), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(vectors.Cases) {
		t.Fatalf("%d answers for %d cases", len(got), len(vectors.Cases))
	}
	for i, c := range vectors.Cases {
		if got[i][0] != c.Owner || got[i][1] != c.Key {
			t.Errorf("case %d (tenant %q, queue %q): owner %q key %s, want %q %s", i, c.Tenant, c.Queue, got[i][0], got[i][1], c.Owner, c.Key)
		}
	}
	errs, _ := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
}
