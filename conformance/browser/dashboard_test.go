// Package browser tests the dashboard page (docs/dashboard.md) in real
// headless Chromium, driven with chromedp, against the real broker binary:
// what a user sees, not what the server answers.
//
// Without a Chromium on PATH the test skips, unless
// QUEEN_TEST_REQUIRE_CHROMIUM=1 (CI installs it and sets that, so a missing
// browser cannot pass silently there). QUEEN_TEST_ARTIFACTS names the
// directory the screenshots are written to (default: the test's temporary
// directory, removed afterwards).
package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// findChromium returns the browser to drive, or skips (or fails, when CI
// requires it) when there is none.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("QUEEN_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("QUEEN_TEST_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("no chromium on PATH and QUEEN_TEST_REQUIRE_CHROMIUM=1 (Debian: apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (Debian: apt-get install chromium; QUEEN_TEST_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("QUEEN_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleLog collects what the page wrote to its console. Listener funcs run
// on chromedp's reading goroutine and must return at once, hence the lock
// and no work beyond appending.
type consoleLog struct {
	mu sync.Mutex
	// errors: console.error/assert calls and uncaught exceptions, never
	// expected from the page.
	errors []string
	// browser: the browser's own log at level error (a failed load, or a
	// status >= 400 answering one of the page's requests), with the time it
	// arrived.
	browser []timedLine
}

type timedLine struct {
	at   time.Time
	line string
}

func (c *consoleLog) listen(ev any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			c.errors = append(c.errors, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		c.errors = append(c.errors, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError {
			c.browser = append(c.browser, timedLine{time.Now(), fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)})
		}
	}
}

func (c *consoleLog) snapshot() (errs []string, browser []timedLine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errors...), append([]timedLine(nil), c.browser...)
}

// The dashboard in a browser: it loads with no console error, lists the
// queues the test made with their depths, sorts by a column on a click,
// shows a push within two seconds, splits the broker's bytes into parts
// that add up to them, shows "serving" and then "paused since …" once the
// kill switch is set through the API, says why a paused broker's table is
// empty, and leaves screenshots behind.
func TestDashboardInChromium(t *testing.T) {
	chrome := findChromium(t)
	artifacts := artifactsDir(t)

	// Mode none: the browser on loopback is the operator, so every panel
	// has its source (docs/dashboard.md, access).
	b := brokertest.StartQueen(t, nil)
	base := b.URL()

	api := &apiClient{t: t, base: base}
	api.do("POST", "/api/v1/ephemeral/configure", `{"queue":"dash-declared","options":{"maxLength":100,"policy":"dropOldest"}}`, 201)
	api.push("dash-orders", 3)
	api.push("dash-inbox", 1)
	api.push("dash-bulk", 7)
	// A group on dash-inbox, so that the skipped column has a depth read
	// to show.
	api.do("GET", "/api/v1/ephemeral/pop?queue=dash-inbox&group=readers&autoAck=true", "", 200)

	ctx, cons := newBrowser(t, chrome)

	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	t.Logf("chromium: %s; page loaded in %v", chrome, time.Since(start).Round(time.Millisecond))

	// Every queue, with the depth the listing gives (D5 decides what depth
	// counts; the page only has to show it).
	want := api.depths()
	for _, q := range []string{"dash-declared", "dash-orders", "dash-inbox", "dash-bulk"} {
		if _, ok := want[q]; !ok {
			t.Fatalf("the listing lacks %s: %v", q, want)
		}
	}
	for q, d := range want {
		waitDepth(t, ctx, q, d, 5*time.Second)
	}
	skipped := evalString(t, ctx, `document.querySelector('tr[data-queue="dash-inbox"] td[data-col="skipped"]').dataset.value`)
	if skipped == "" {
		// The depth reads follow the listing in the same poll.
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
			`document.querySelector('tr[data-queue="dash-inbox"] td[data-col="skipped"]').dataset.value !== ""`,
			chromedp.WithPollingTimeout(3*time.Second))); err != nil {
			t.Fatalf("the skipped column of dash-inbox (a queue with a group) stays empty: %v", err)
		}
	}

	// A click on Depth sorts deepest first; a second click reverses.
	click(t, ctx, `th[data-key="depth"]`)
	if first := evalString(t, ctx, `document.querySelector('#queues tbody tr').dataset.queue`); first != "dash-bulk" {
		t.Fatalf("sorted by depth, the first row is %q; want dash-bulk (7 messages)", first)
	}
	click(t, ctx, `th[data-key="depth"]`)
	if last := evalString(t, ctx, `[...document.querySelectorAll('#queues tbody tr')].pop().dataset.queue`); last != "dash-bulk" {
		t.Fatalf("sorted by depth ascending, the last row is %q; want dash-bulk", last)
	}

	// The broker's state, not the switch's: "enabled" read as "the switch
	// is engaged".
	if ks := evalString(t, ctx, `(() => { const el = document.getElementById('killswitch'); return el.dataset.state + ' ' + el.textContent; })()`); ks != "serving serving" {
		t.Fatalf("kill switch panel: %q before any pause; want state serving, text serving", ks)
	}
	// The charts come from /metrics, which loopback may read in mode none.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('pushed-rate').dataset.value !== ""`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("the pushed rate never showed: %v", err)
	}
	// A client link shows beside the connections (docs/link.md).
	openClientLink(t, b.Addr())
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.getElementById('client-links').dataset.value === "1" && document.getElementById('gateway-links').dataset.value === "0" && document.getElementById('conns').dataset.value !== ""`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("the connections panel does not show the client link: %v", err)
	}

	// A push shows within two seconds (the page polls once a second).
	api.push("dash-orders", 2)
	after := api.depths()["dash-orders"]
	pushed := time.Now()
	waitDepth(t, ctx, "dash-orders", after, 2*time.Second)
	t.Logf("dash-orders showed depth %d %v after the push", after, time.Since(pushed).Round(time.Millisecond))

	checkBytesParts(t, ctx, api.payload())
	// A single broker's listing is the broker's: no member's scope line.
	if scope := evalString(t, ctx, `document.getElementById('queues-scope').textContent`); scope != "" {
		t.Errorf("a single broker's queue table says %q; want no scope line (that is for a cell member)", scope)
	}

	shot(t, ctx, filepath.Join(artifacts, "dashboard.png"))

	// Nothing failed to load and nothing was logged as an error while the
	// broker served: every request the page made was answered.
	errs, browser := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
	for _, l := range browser {
		t.Errorf("browser log before the pause: %s", l.line)
	}
	seen := len(errs)

	// The kill switch, set through the API, shows as paused.
	api.do("POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":5}`, 200)
	paused := time.Now()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('killswitch').dataset.state === "paused"`,
		chromedp.WithPollingTimeout(3*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("the kill switch panel does not show the pause: %v", err)
	}
	t.Logf("paused state shown %v after the POST", time.Since(paused).Round(time.Millisecond))
	// The page saw the broker serving a poll before, so it knows when the
	// pause began within a poll: "paused since <time>", not "before".
	if ks := evalString(t, ctx, `document.getElementById('killswitch').textContent`); !strings.HasPrefix(ks, "paused since ") || strings.Contains(ks, "before") {
		t.Errorf("paused: the kill switch panel says %q; want \"paused since <time>\"", ks)
	}
	// The table keeps the last rows it read: the broker still holds them.
	if n := evalString(t, ctx, `String(document.querySelectorAll('#queues tbody tr').length)`); n != fmt.Sprint(len(want)) {
		t.Errorf("paused: %s rows in the table; want the %d last read", n, len(want))
	}
	// Let one poll meet the paused listing before the last screenshot.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues').classList.contains('stale')`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Errorf("paused: the table is not marked stale: %v", err)
	}
	// The count says the rows are the last read, not that there are none.
	if count := evalString(t, ctx, `document.getElementById('queue-count').textContent`); count != fmt.Sprintf("(%d as read before the pause)", len(want)) {
		t.Errorf("paused: the queue count says %q; want (%d as read before the pause)", count, len(want))
	}
	shot(t, ctx, filepath.Join(artifacts, "dashboard-paused.png"))

	// A page opened during the pause has no rows to keep: the table says
	// the broker is paused rather than "QUEUES (0)", and the kill switch
	// cannot know when the pause began.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatalf("reloading /dashboard: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`(() => { const td = document.getElementById('queues-empty'); return td !== null && td.dataset.reason === 'paused'; })()`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("reopened while paused: the queue table does not say the broker is paused: %v", err)
	}
	if count := evalString(t, ctx, `document.getElementById('queue-count').textContent`); count != "(not listed while paused)" {
		t.Errorf("reopened while paused: the queue count says %q; want (not listed while paused)", count)
	}
	if empty := evalString(t, ctx, `document.getElementById('queues-empty').textContent`); !strings.Contains(empty, "paused") || !strings.Contains(empty, "kept") {
		t.Errorf("reopened while paused: the table says %q; want why it is empty (paused, contents kept)", empty)
	}
	if ks := evalString(t, ctx, `document.getElementById('killswitch').textContent`); !strings.HasPrefix(ks, "paused since before ") {
		t.Errorf("reopened while paused: the kill switch panel says %q; want \"paused since before <time>\"", ks)
	}
	// The paused panels fit the narrowest window too.
	if over := overflowAt(t, ctx, 800); len(over) > 0 {
		t.Errorf("paused, at 800 px: %d boxes overflow:\n  %s", len(over), strings.Join(over, "\n  "))
	}
	shot(t, ctx, filepath.Join(artifacts, "dashboard-paused-reopened.png"))

	// Paused, the listing answers 503 and the browser logs that load as
	// failed (its own log, not the page's console): expected. The page
	// itself must still write no error.
	errs, browser = cons.snapshot()
	for _, e := range errs[seen:] {
		t.Errorf("console: %s", e)
	}
	for _, l := range browser {
		if l.at.Before(paused) {
			continue // reported above
		}
		if !strings.Contains(l.line, "503") {
			t.Errorf("browser log while paused: %s", l.line)
		}
	}
	t.Logf("screenshots in %s", artifacts)
}

// openClientLink upgrades a connection to addr to a client link (docs/link.md)
// and keeps it open until the test ends.
func openClientLink(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("the upgrade to a client link: %v %v", resp, err)
	}
}

// The broker is built on the first test that finds a Chromium (without
// the race detector, as the conformance harness does by default).
func TestMain(m *testing.M) { brokertest.Main(m) }

// newBrowser starts a headless Chromium for the test (with opts added to
// its command line), with a listener on its console from the first page on. It is closed when the test ends.
func newBrowser(t *testing.T, chrome string, opts ...chromedp.ExecAllocatorOption) (context.Context, *consoleLog) {
	t.Helper()
	cons := &consoleLog{}
	allocOpts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
	)
	allocOpts = append(allocOpts, opts...)
	if os.Geteuid() == 0 {
		// Chromium refuses to start its sandbox as root (CI runs as root).
		allocOpts = append(allocOpts, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocOpts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(cons.listen))
	// The browser lives as long as the context of the first Run, so the
	// test's budget is a watchdog rather than a timeout on that context.
	watchdog := time.AfterFunc(50*time.Second, cancel)
	t.Cleanup(func() {
		watchdog.Stop()
		cancel()
		cancelAlloc()
	})
	return ctx, cons
}

// In jwt mode the page loads without a token, says what refused it, and
// shows the tenant's queues once the token is typed into it.
func TestDashboardTokenInJWTMode(t *testing.T) {
	chrome := findChromium(t)
	secret := "dashboard-test-secret"
	b := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE":       "jwt",
		"QUEEN_JWT_SECRET":      secret,
		"QUEEN_OPERATOR_TENANT": "ops",
	})
	mint := func(tenant, role string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"tenant": tenant, "role": role, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok := mint("ops", "admin")
	api := &apiClient{t: t, base: b.URL(), token: tok}
	api.push("jwt-orders", 4)

	ctx, cons := newBrowser(t, chrome)
	if err := chromedp.Do(ctx, chromedp.Navigate(b.URL()+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('queues-note').textContent.includes('401')`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("without a token the queue panel does not say 401: %v", err)
	}
	// Refused, the table says so rather than counting no queues.
	if got := evalString(t, ctx, `document.getElementById('queue-count').textContent + ' ' + document.getElementById('queues-empty').dataset.reason`); got != "(not listed) refused" {
		t.Errorf("without a token the queue count and empty row are %q; want (not listed) refused", got)
	}
	if empty := evalString(t, ctx, `document.getElementById('queues-empty').textContent`); !strings.Contains(empty, "401 unauthorized") {
		t.Errorf("without a token the table says %q; want the listing's 401 unauthorized", empty)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), tok),
		chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`)),
	); err != nil {
		t.Fatalf("typing the token: %v", err)
	}
	waitDepth(t, ctx, "jwt-orders", 4, 3*time.Second)
	// The operator tenant's admin reads /metrics and the kill switch too.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		`document.getElementById('killswitch').dataset.state === "serving" && document.getElementById('parked').dataset.value === "0"`,
		chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("with the operator's token, the kill switch and parked pops panels stay empty: %v", err)
	}
	if stored := evalString(t, ctx, `sessionStorage.getItem('queen.dashboard.token') === `+strconv.Quote(tok)+` ? "yes" : "no"`); stored != "yes" {
		t.Fatal("the token is not kept in sessionStorage")
	}
	errs, browser := cons.snapshot()
	for _, e := range errs {
		t.Errorf("console: %s", e)
	}
	// The browser logs each 401 answer before the token as a failed load;
	// anything else is a fault.
	for _, l := range browser {
		if !strings.Contains(l.line, "401") {
			t.Errorf("browser log: %s", l.line)
		}
	}

	// A tenant that is not the operator reads neither /metrics nor the kill
	// switch: the switch is inferred from the listing, and the bytes are
	// the listing's cellBytes in two parts, its payload and the rest.
	acme := &apiClient{t: t, base: b.URL(), token: mint("acme", "read-write")}
	acme.push("acme-orders", 3)
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("token"), acme.token),
		chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`)),
	); err != nil {
		t.Fatalf("typing the tenant's token: %v", err)
	}
	waitDepth(t, ctx, "acme-orders", 3, 3*time.Second)
	parts := fmt.Sprintf(`(() => { const p = [...document.querySelectorAll('#bytes-parts dd')];
		return p.map((d) => d.dataset.part).join(',') === 'payload,rest' && p[0].dataset.value === %q &&
			p.reduce((a, d) => a + Number(d.dataset.value), 0) === Number(document.getElementById('bytes').dataset.value); })()`, fmt.Sprint(acme.payload()))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](parts, chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Errorf("a tenant without /metrics: the bytes parts are not its payload and the rest of cellBytes: %v (shown: %s)", err,
			evalString(t, ctx, `document.getElementById('bytes-parts').textContent`))
	}
	ks := evalString(t, ctx, `document.getElementById('killswitch').dataset.state + ' · ' + document.getElementById('killswitch-note').textContent`)
	if !strings.HasPrefix(ks, "serving · ") || !strings.Contains(ks, "from the queue listing (kill switch: 403") {
		t.Errorf("a tenant's reader: the kill switch panel is %q; want serving, inferred from the listing", ks)
	}
}

// waitDepth waits until the row of queue q shows depth d.
func waitDepth(t *testing.T, ctx context.Context, q string, d int64, within time.Duration) {
	t.Helper()
	sel := fmt.Sprintf(`tr[data-queue=%q] td[data-col="depth"]`, q)
	js := fmt.Sprintf(`(() => { const td = document.querySelector(%q); return td !== null && td.dataset.value === %q; })()`, sel, fmt.Sprint(d))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js,
		chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		shown := evalString(t, ctx, fmt.Sprintf(`(() => { const td = document.querySelector(%q); return td === null ? "no row" : td.dataset.value; })()`, sel))
		t.Fatalf("%s: depth %d not shown within %v (shown: %s): %v", q, d, within, shown, err)
	}
}

func evalString(t *testing.T, ctx context.Context, js string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("evaluating %s: %v", js, err)
	}
	return s
}

func click(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
}

func shot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// apiClient speaks to the broker as the test's own client, not the page's.
type apiClient struct {
	t     *testing.T
	base  string
	token string // sent as a bearer token when set
}

func (a *apiClient) do(method, path, body string, want int) []byte {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, b, want)
	}
	return b
}

func (a *apiClient) push(queue string, n int) {
	a.t.Helper()
	msgs := make([]string, n)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"payload":{"n":%d}}`, i)
	}
	a.do("POST", "/api/v1/ephemeral/push", fmt.Sprintf(`{"queue":%q,"messages":[%s]}`, queue, strings.Join(msgs, ",")), 201)
}

// depths reads every queue's depth from the listing.
func (a *apiClient) depths() map[string]int64 {
	a.t.Helper()
	var l struct {
		Queues []struct {
			Queue string `json:"queue"`
			Depth int64  `json:"depth"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(a.do("GET", "/api/v1/ephemeral/queues", "", 200), &l); err != nil {
		a.t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, q := range l.Queues {
		out[q.Queue] = q.Depth
	}
	return out
}

// payload sums the listed queues' bytes: their payloads.
func (a *apiClient) payload() int64 {
	a.t.Helper()
	var l struct {
		Queues []struct {
			Bytes int64 `json:"bytes"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(a.do("GET", "/api/v1/ephemeral/queues", "", 200), &l); err != nil {
		a.t.Fatal(err)
	}
	var n int64
	for _, q := range l.Queues {
		n += q.Bytes
	}
	return n
}

// checkBytesParts waits until the broker bytes panel lists its parts with
// the payload the listing sums (payload), and checks that they are the
// payload, the object charges and the connections with the arena's slack,
// and that they add up to the broker's bytes shown above them.
func checkBytesParts(t *testing.T, ctx context.Context, payload int64) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const d = document.querySelector('#bytes-parts dd[data-part="payload"]'); return d !== null && d.dataset.value === %q; })()`, fmt.Sprint(payload))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Fatalf("the broker bytes panel does not show the payload part %d (the listing's sum): %v; parts: %s", payload, err,
			evalString(t, ctx, `document.getElementById('bytes-parts').textContent`))
	}
	var got struct {
		Total int64
		Parts []struct {
			Key, Label string
			Value      int64
		}
	}
	raw := evalString(t, ctx, `JSON.stringify({
		Total: Number(document.getElementById('bytes').dataset.value),
		Parts: [...document.querySelectorAll('#bytes-parts dd')].map((dd) => ({
			Key: dd.dataset.part, Label: dd.previousElementSibling.textContent, Value: Number(dd.dataset.value) })) })`)
	if err := json.Unmarshal([]byte(raw), &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var sum int64
	for _, p := range got.Parts {
		keys = append(keys, p.Key)
		sum += p.Value
	}
	if strings.Join(keys, ",") != "payload,objects,rest" {
		t.Fatalf("bytes parts %v; want payload, objects, rest", got.Parts)
	}
	if sum != got.Total {
		t.Errorf("the bytes parts %v add up to %d; the broker's bytes shown are %d", got.Parts, sum, got.Total)
	}
	if got.Parts[1].Value <= 0 {
		t.Errorf("object charges %d with queues held; want > 0", got.Parts[1].Value)
	}
	// At least the page's own connection is open, charged 2048 bytes by
	// default (QUEEN_CONNECTION_CHARGE_BYTES).
	if rest := got.Parts[2]; rest.Value < 2048 || !strings.Contains(rest.Label, "connection") {
		t.Errorf("the last part is %q %d; want the connections (at least the page's, 2048 bytes) and the slack", rest.Label, rest.Value)
	}
}
