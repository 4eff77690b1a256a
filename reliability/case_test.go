//go:build reliability

package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// hs256 is a token for a broker in jwt mode with QUEEN_JWT_SECRET = secret.
func hs256(secret, role string) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"role": role, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		panic(err)
	}
	return s
}

// figures is what one case measured: one greppable line in the test log
// ("RELIABILITY case=…") and, with QUEEN_RELIABILITY_OUT, one JSON file that
// `go run ./reliability/cmd/report` turns into RELIABILITY.md's table.
type figures = Figures

// rcase is one case against one broker: the broker, the RSS sampler, the
// probe, and the figures it is building.
type rcase struct {
	t      *testing.T
	b      *brokertest.Broker
	addr   string // host:port
	budget int64
	// ctx is the attack's: it ends when the case ends or RSS passes rssCap.
	ctx   context.Context
	rss   *sampler
	probe *probe
	f     figures
	start time.Time
}

// newCase starts a broker with QUEEN_EPHEMERAL_MAX_BYTES = budget (unless
// env names another) and env, samples its RSS, and starts the probe. The
// figures are written when the test ends, passed or failed.
func newCase(t *testing.T, env map[string]string) *rcase {
	t.Helper()
	e := map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": fmt.Sprint(budget)}
	maps.Copy(e, env)
	var bud int64
	fmt.Sscan(e["QUEEN_EPHEMERAL_MAX_BYTES"], &bud)
	c := &rcase{t: t, budget: bud, start: time.Now()}
	c.f = figures{Case: t.Name(), Scale: scale, BudgetBytes: bud, BoundMiB: mib(rssBound(bud)),
		Codes: map[string]int64{}, Extra: map[string]float64{}, Started: c.start.UTC().Format(time.RFC3339)}
	c.b = brokertest.Start(t, bin, e)
	c.addr = strings.TrimPrefix(c.b.URL(), "http://")
	ctx, cancel := context.WithCancel(context.Background())
	c.ctx = ctx
	// A case whose budget is above the safety cap (the million-queue
	// listing) may grow to its own bound and a little past it.
	c.rss = startSampler(c.b.PID(), max(rssCap, rssBound(bud)+256<<20), cancel)
	c.f.BaseRSSMiB = mib(c.rss.now())
	auth := ""
	if secret := e["QUEEN_JWT_SECRET"]; e["QUEEN_AUTH_MODE"] == "jwt" && secret != "" {
		auth = "Bearer " + hs256(secret, "read-write")
	}
	c.probe = startProbe(c.b.URL(), "probe", auth)
	t.Cleanup(func() {
		cancel()
		c.probe.Stop()
		c.rss.Close()
		c.write()
	})
	return c
}

// fail records a failed assertion in the test and in the figures.
func (c *rcase) fail(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	c.f.Failures = append(c.f.Failures, msg)
	c.t.Error(msg)
}

// endLoad is called when the attack has stopped: it stops the probe and
// asserts the bounds that hold during an attack: peak RSS ≤ 1.25 × budget +
// 64 MiB, probe p99 ≤ 50 ms for /health and for a push+pop, no probe
// request failing, every probe answer one the spec allows.
func (c *rcase) endLoad() {
	c.t.Helper()
	c.f.DurationS = time.Since(c.start).Seconds()
	// A p99 of a few dozen samples is their maximum, one scheduling hiccup
	// of the shared machine: the probe goes on, on the broker as the attack
	// left it, until it has 250 (5 s), so that p99 is the 3rd worst.
	for deadline := time.Now().Add(10 * time.Second); c.probe.samples() < 250 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	pf := c.probe.Stop()
	c.f.HealthP50, c.f.HealthP99 = ms(pf.HealthP50), ms(pf.HealthP99)
	c.f.PushPopP50, c.f.PushPopP99 = ms(pf.PushPopP50), ms(pf.PushPopP99)
	c.f.ProbeErrors = pf.Errors
	peak := c.rss.peakRSS()
	c.f.PeakRSSMiB = mib(peak)
	capHit, killed := c.rss.hitCap()
	c.f.CapHit = capHit
	if capHit {
		c.f.Extra["rssCapMiB"] = mib(c.rss.cap)
		c.fail("RSS passed the safety cap of %.0f MiB: the attack was stopped there", mib(c.rss.cap))
	}
	if killed {
		c.f.Extra["killedAtMiB"] = mib(2 * c.rss.cap)
		c.fail("RSS passed twice the safety cap: the broker was killed")
	}
	if bound := rssBound(c.budget); peak > bound {
		c.fail("peak RSS %.0f MiB > bound %.0f MiB (1.25 × budget + 64 MiB)", mib(peak), mib(bound))
	}
	if pf.HealthP99 > 50*time.Millisecond || pf.PushPopP99 > 50*time.Millisecond {
		c.fail("probe p99: /health %.1f ms, push+pop %.1f ms; want ≤ 50 ms", ms(pf.HealthP99), ms(pf.PushPopP99))
	}
	if pf.Errors > 0 {
		c.fail("probe: %d of its requests failed (first: %s)", pf.Errors, pf.FirstErr)
	}
	if pf.Samples == 0 {
		c.fail("probe: no sample")
	}
	if bad := c.probe.codes.unexpected(probeAnswers...); len(bad) > 0 {
		c.fail("probe answered %v", bad)
	}
}

// checkCodes requires every answer counted in cs to be one of allowed, and
// adds the counts to the figures under prefix.
func (c *rcase) checkCodes(prefix string, cs *codes, allowed ...string) {
	c.t.Helper()
	for k, n := range cs.snapshot() {
		c.f.Codes[prefix+k] += n
	}
	if bad := cs.unexpected(allowed...); len(bad) > 0 {
		c.fail("%s answers outside the spec's %v: %v", prefix, allowed, bad)
	}
}

// fallback asserts that memory falls back once the load has stopped (and
// what the case does to end it, e.g. deleting its queues, is done): RSS at
// most the idle RSS at the start + half the budget, polled for up to 20 s.
func (c *rcase) fallback() {
	c.t.Helper()
	c.fallbackUnder(c.budget/2, "budget/2")
}

// fallbackUnder is fallback with the bound idle + over (named for the
// failure's message).
func (c *rcase) fallbackUnder(over int64, name string) {
	c.t.Helper()
	bound := int64(c.f.BaseRSSMiB*(1<<20)) + over
	if _, killed := c.rss.hitCap(); killed {
		c.fail("no fallback to measure: the broker was killed past twice the safety cap")
		return
	}
	// Not scaled: the broker gives memory back on its own clock (the sweeper
	// trims every 5 s and returns memory at most every 10 s, docs/engine.md,
	// "Memory goes back when the load falls"), within the minute the issue
	// allows; the wait ends as soon as RSS is under the bound.
	rss, took := c.rss.settle(bound, 30*time.Second)
	c.f.AfterRSSMiB, c.f.AfterS = mib(rss), took.Seconds()
	if rss > bound {
		c.fail("RSS %.0f MiB %.0f s after the load stopped; want ≤ %.0f MiB (idle %.0f + %s)",
			mib(rss), took.Seconds(), mib(bound), c.f.BaseRSSMiB, name)
	}
}

// health requires GET /health = 200 on a new connection within d.
func (c *rcase) healthWithin(d time.Duration) error {
	var last error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		p, err := dialPipe(c.addr, 1)
		if err != nil {
			last = err
			continue
		}
		_ = p.c.SetDeadline(time.Now().Add(2 * time.Second))
		status := 0
		err = p.run(context.Background(), once(request("GET", "/health", nil)), func(s int, _ []byte, _ time.Duration) { status = s })
		p.Close()
		if err == nil && status == 200 {
			return nil
		}
		last = fmt.Errorf("status %d, %v", status, err)
	}
	return last
}

// once is a next func for pipe.run that sends req once.
func once(req []byte) func() []byte {
	sent := false
	return func() []byte {
		if sent {
			return nil
		}
		sent = true
		return req
	}
}

func (c *rcase) write() {
	c.f.Passed = !c.t.Failed()
	if c.f.DurationS == 0 {
		c.f.DurationS = time.Since(c.start).Seconds()
	}
	var line strings.Builder
	fmt.Fprintf(&line, "RELIABILITY case=%s pass=%v peakRSS=%.0fMiB bound=%.0fMiB base=%.0fMiB after=%.0fMiB/%.1fs probe_health_p99=%.1fms probe_pushpop_p99=%.1fms probe_errors=%d dur=%.1fs",
		c.f.Case, c.f.Passed, c.f.PeakRSSMiB, c.f.BoundMiB, c.f.BaseRSSMiB, c.f.AfterRSSMiB, c.f.AfterS, c.f.HealthP99, c.f.PushPopP99, c.f.ProbeErrors, c.f.DurationS)
	for _, k := range slices.Sorted(maps.Keys(c.f.Codes)) {
		fmt.Fprintf(&line, " code[%s]=%d", strings.ReplaceAll(k, " ", ":"), c.f.Codes[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.f.Extra)) {
		fmt.Fprintf(&line, " %s=%.4g", k, c.f.Extra[k])
	}
	c.t.Log(line.String())
	if outDir == "" {
		return
	}
	dir := filepath.Join(outDir, runName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Error(err)
		return
	}
	b, _ := json.MarshalIndent(c.f, "", "  ")
	name := strings.ReplaceAll(c.f.Case, "/", "_") + ".json"
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		c.t.Error(err)
	}
}
