package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// shotWidths are the widths a screenshot is kept at (docs/dashboard.md,
// "Layout"): a small laptop, a common desktop, a full-HD screen. The DOM
// check runs at every layoutStep px from the first to the last as well,
// so that a column count or the narrow-window rules changing in between
// cannot overflow unseen.
var shotWidths = []int64{800, 1400, 1920}

const layoutStep = 40

// overflowJS lists what runs out of its box: the page wider than the
// window, a card (.panel) or the table's box whose content is wider than
// it (scrollWidth > clientWidth: a long word such as a metric name in a
// note), or an element of a card whose box lies outside the card's.
const overflowJS = `(() => {
  const out = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) out.push('the page: scrollWidth ' + root.scrollWidth + ' > ' + root.clientWidth);
  const name = (el) => el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ')[0] : '');
  for (const box of document.querySelectorAll('.panel, .table-wrap')) {
    if (box.scrollWidth > box.clientWidth) out.push(name(box) + ': scrollWidth ' + box.scrollWidth + ' > clientWidth ' + box.clientWidth);
    const r = box.getBoundingClientRect();
    for (const el of box.querySelectorAll('*')) {
      if (el.getClientRects().length === 0) continue; // not rendered
      const b = el.getBoundingClientRect();
      if (b.left < r.left - 0.5 || b.right > r.right + 0.5 || b.top < r.top - 0.5 || b.bottom > r.bottom + 0.5) {
        out.push(name(el) + ' in ' + name(box) + ': [' + Math.round(b.left) + ',' + Math.round(b.right) + '] outside [' + Math.round(r.left) + ',' + Math.round(r.right) + ']');
      }
    }
  }
  return JSON.stringify(out);
})()`

// The page fits from 800 to 1920 px: no card's content runs out of its
// card (the metric names in the Pushed and Delivered notes did, at every
// width), the queue table fits its box, and the page is no wider than the
// window. Checked every 40 px; a screenshot at 800, 1400 and 1920 px is
// left in the artifacts.
func TestDashboardFitsAtThreeWidths(t *testing.T) {
	chrome := findChromium(t)
	artifacts := artifactsDir(t)
	b := brokertest.StartQueen(t, nil)
	api := &apiClient{t: t, base: b.URL()}
	api.do("POST", "/api/v1/ephemeral/configure", `{"queue":"fit-declared","options":{"maxLength":100,"policy":"dropOldest"}}`, 201)
	api.push("fit-orders", 3)
	// A name as long as a tenant may choose: the table shortens it rather
	// than widening the page.
	api.push("fit-a-queue-name-much-longer-than-the-column-it-is-drawn-in", 2)
	api.do("GET", "/api/v1/ephemeral/pop?queue=fit-orders&group=readers&autoAck=true", "", 200)

	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	// Every panel filled: the notes carry the metric names, the table its
	// rows, the bytes panel its figure (and, once read, its parts).
	filled := `document.getElementById('pushed-note').textContent !== '' && document.getElementById('delivered-note').textContent !== '' &&
		document.querySelectorAll('#queues tbody tr[data-queue]').length === 3 && document.getElementById('bytes').dataset.value !== ''`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](filled, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Fatalf("the panels were not filled: %v", err)
	}
	first, last := shotWidths[0], shotWidths[len(shotWidths)-1]
	for w := first; w <= last; w += layoutStep {
		over := overflowAt(t, ctx, w)
		where := ""
		if slices.Contains(shotWidths, w) {
			path := filepath.Join(artifacts, fmt.Sprintf("dashboard-%d.png", w))
			shot(t, ctx, path)
			where = " (screenshot " + path + ")"
		}
		if len(over) > 0 {
			t.Errorf("%d px: %d boxes overflow%s:\n  %s", w, len(over), where, strings.Join(over, "\n  "))
		}
	}
	errs, _ := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
}

// overflowAt sets the window w px wide and lists what overflows there
// (overflowJS).
func overflowAt(t *testing.T, ctx context.Context, w int64) []string {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(w, 900)); err != nil {
		t.Fatalf("a window %d px wide: %v", w, err)
	}
	var over []string
	if err := json.Unmarshal([]byte(evalString(t, ctx, overflowJS)), &over); err != nil {
		t.Fatal(err)
	}
	return over
}
