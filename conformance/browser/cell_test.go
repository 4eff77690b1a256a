package browser

import (
	"errors"
	"os"
	"path/filepath"
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

// On a member of a cell, the page says the queue table is this member's
// listing (docs/cell.md, "What a member's listing shows": the status reads
// are not relayed), names the member, and lists the cell's members; and it
// still fits 800 px. One member on a throwaway PostgreSQL: its listing is
// a member's like any other's, and it starts in a few seconds.
func TestDashboardOnACellMember(t *testing.T) {
	chrome := findChromium(t)
	pg := startPostgres(t)
	self := brokertest.Advertise(t)
	c := brokertest.NewCell(pg.URL(), pg.FreshSchema(t), map[string]string{"QUEEN_CELL_SECRET": "a-cell-secret-for-the-dashboard-test"})
	b := brokertest.New(t, brokertest.Binary(t, brokertest.Queen), c.Env(self, nil))
	b.WaitStoreOK = true
	b.Start(t)
	api := &apiClient{t: t, base: b.URL()}

	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	// The Cell panel reads /health's cell: once it counts the member, the
	// member has joined and has a view, and serves pushes.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('cell').textContent === '1 member'`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the cell panel never counted the member: %v (shown: %s)", err, evalString(t, ctx, `document.getElementById('cell').textContent`))
	}
	api.push("member-orders", 2)
	waitDepth(t, ctx, "member-orders", 2, 5*time.Second)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues-scope').dataset.scope === 'member'`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("on a cell member the queue table does not say whose listing it is: %v", err)
	}
	scope := evalString(t, ctx, `document.getElementById('queues-scope').textContent`)
	for _, want := range []string{"This member's listing (" + self + ")", "the implicit queues it owns", "sum of every member's listing"} {
		if !strings.Contains(scope, want) {
			t.Errorf("the queue table's scope says %q; want it to contain %q", scope, want)
		}
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
	errs, _ := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
}
