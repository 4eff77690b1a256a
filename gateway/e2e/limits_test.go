package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestBrokerRefusalGivesBack: a push the gateway admitted and the broker
// refused (429 queue_full) meters nothing and gives back what it held: its
// items against the allowance and its tokens from the rate's bucket.
func TestBrokerRefusalGivesBack(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "tight", planJSON(true, 20, 3600, 1, 0))
	c := p.gw.as(t, "acme", "read-write")
	want(t, "configure a short queue", c.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"short","options":{"maxLength":5,"policy":"reject"}}`), 201, "")
	r := c.push(t, "short", 20)
	want(t, "push 20 to a queue of 5", r, 429, "queue_full")
	p.admin.wantUsage(t, "acme", 0, 0)
	// The allowance (20) and the bucket (1/s, into debt by 19 had it kept
	// the tokens) are whole again.
	c.mustPush(t, "long", 20)
	p.admin.wantUsage(t, "acme", 20, 0)
}

// TestPopPaysAfter: a pop is admitted while the bucket is not empty and
// pays for its deliveries after: its debt refuses what follows.
func TestPopPaysAfter(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "slow", planJSON(true, 0, 0, 1, 0))
	// Pushed behind the gateway's back, so the bucket is full.
	want(t, "push at the broker", asGatewayOf(p.broker, "acme", "read-write").push(t, "q", 20), 201, "")
	c := p.gw.as(t, "acme", "read-write")
	if m := c.mustPop(t, "queue=q&batch=20&autoAck=true"); len(m.Messages) != 20 {
		t.Fatalf("popped %d, want 20", len(m.Messages))
	}
	p.admin.wantUsage(t, "acme", 0, 20)
	r := c.push(t, "q", 1)
	want(t, "push after a pop of 20 at 1/s", r, 429, "rate_limited")
	wantRetryAfter(t, "push after a pop of 20 at 1/s", r, 5, 20)
	want(t, "pop after a pop of 20 at 1/s", c.pop(t, "queue=q"), 429, "rate_limited")
}

// TestUnlimitedSlots: parkedSlots 0 is unlimited.
func TestUnlimitedSlots(t *testing.T) {
	t.Parallel()
	unlimitedSlots(t, nil)
}

// unlimitedSlots is TestUnlimitedSlots with gwExtra over the gateway's
// environment.
func unlimitedSlots(t *testing.T, gwExtra map[string]string) {
	p := startPair(t, nil, gwExtra)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	var waiting []<-chan popResult
	for range 5 {
		waiting = append(waiting, asyncPop(t.Context(), c, "queue=u&wait=true&timeout=20000&autoAck=true"))
	}
	p.admin.waitParked(t, "acme", 5)
	c.mustPush(t, "u", 5)
	got := 0
	for i, w := range waiting {
		got += len(await(t, "waiting pop "+strconv.Itoa(i), w).Messages)
	}
	if got != 5 {
		t.Fatalf("5 waiting pops got %d messages, want 5", got)
	}
	p.admin.waitParked(t, "acme", 0)
	p.admin.wantUsage(t, "acme", 5, 5)
}

// TestBodyLimit: a body over QUEEN_MAX_BODY_BYTES is refused by the
// gateway itself (400, the connection closes), and meters nothing.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_MAX_BODY_BYTES": "1000"})
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := g.as(t, "acme", "read-write")
	r := c.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"big","messages":[{"payload":"`+strings.Repeat("x", 2000)+`"}]}`)
	want(t, "push over the body limit", r, 400, "ephemeral_bad_request") // the broker's code for a framing error
	if !strings.Contains(r.message(), "QUEEN_MAX_BODY_BYTES") {
		t.Fatalf("push over the body limit: %s", r)
	}
	admin.wantUsage(t, "acme", 0, 0)
	c.mustPush(t, "big", 1)
}

// runGateway runs the gateway binary with env (over BaseEnv) until it exits
// (at most wait) and answers its exit code and output.
func runGateway(t *testing.T, env map[string]string, wait time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t, gatewayPkg))
	cmd.Env = append(brokertest.BaseEnv(), "HOST=127.0.0.1", "PORT="+strconv.Itoa(brokertest.Port(t)))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, _ := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the gateway did not exit within %v: %s", wait, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// TestCatalogUnavailableAtBoot: a catalog that cannot be opened is an
// error at boot: a database nobody listens on, and an embedded file that
// another gateway holds.
func TestCatalogUnavailableAtBoot(t *testing.T) {
	t.Parallel()
	base := gatewayEnv([]string{"http://127.0.0.1:1"}, nil)
	env := merge(base, map[string]string{
		"QUEEN_DATABASE_URL": "postgres://postgres@127.0.0.1:" + strconv.Itoa(brokertest.Port(t)) + "/postgres?sslmode=disable&connect_timeout=2",
	})
	code, out := runGateway(t, env, 40*time.Second)
	if code == 0 || !strings.Contains(out, "catalog") {
		t.Fatalf("a gateway on a database nobody listens on: exit %d: %s", code, out)
	}

	dir := t.TempDir()
	b := startBroker(t, nil)
	startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_DATA_DIR": dir})
	code, out = runGateway(t, merge(base, map[string]string{"QUEEN_DATA_DIR": dir}), 20*time.Second)
	if code == 0 || !strings.Contains(out, "catalog") {
		t.Fatalf("a second gateway on the same data directory: exit %d: %s", code, out)
	}
}
