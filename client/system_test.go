package client

import (
	"strings"
	"testing"
)

// TestSystemRoutes: the kill switch and the grants against a real broker,
// once as a loopback client of mode none (protected mode admits it) and
// once with the admin token, whose absence is then 401.
func TestSystemRoutes(t *testing.T) {
	b := startBroker(t, map[string]string{"QUEEN_ADMIN_TOKEN": "s3cret"})
	ctx := testCtx(t)

	anon := newClient(t, b.URL())
	_, err := anon.KillSwitch(ctx)
	wantCode(t, "kill switch without the token", err, 401, CodeUnauthorized)

	c := newClient(t, b.URL(), WithToken("s3cret"))
	k, err := c.KillSwitch(ctx)
	if err != nil || !k.Enabled || k.RetryAfterSeconds != 0 {
		t.Fatalf("KillSwitch = %+v, %v; want enabled", k, err)
	}
	k, err = c.SetKillSwitch(ctx, KillSwitch{Enabled: false, RetryAfterSeconds: 7})
	if err != nil || k.Enabled || k.RetryAfterSeconds != 7 {
		t.Fatalf("SetKillSwitch(pause) = %+v, %v", k, err)
	}
	_, err = c.Push(ctx, "q", []any{1}, PushOptions{})
	wantCode(t, "push while paused", err, 503, CodeDisabled)
	if e := err.(*Error); e.RetryAfter.Seconds() != 7 {
		t.Fatalf("Retry-After = %v, want 7s", e.RetryAfter)
	}
	if k, err = c.SetKillSwitch(ctx, KillSwitch{Enabled: true}); err != nil || !k.Enabled {
		t.Fatalf("SetKillSwitch(resume) = %+v, %v", k, err)
	}

	_, err = c.Grant(ctx, "acme")
	wantCode(t, "grant of a tenant without one", err, 404, CodeGrantNotFound)
	g, err := c.SetGrant(ctx, Grant{Tenant: "acme", MaxBytes: 1 << 20, MaxQueues: 10})
	if err != nil || *g != (Grant{Tenant: "acme", MaxBytes: 1 << 20, MaxQueues: 10}) {
		t.Fatalf("SetGrant = %+v, %v", g, err)
	}
	if g, err = c.Grant(ctx, "acme"); err != nil || g.MaxQueues != 10 {
		t.Fatalf("Grant = %+v, %v", g, err)
	}
	d, err := c.DeleteGrant(ctx, "acme")
	if err != nil || !d.Deleted || d.Tenant != "acme" {
		t.Fatalf("DeleteGrant = %+v, %v", d, err)
	}
	if d, err = c.DeleteGrant(ctx, "acme"); err != nil || d.Deleted {
		t.Fatalf("DeleteGrant again = %+v, %v; want deleted false", d, err)
	}
	_, err = c.Grant(ctx, strings.Repeat("x", 600))
	wantCode(t, "grant of an over-long tenant name", err, 400, CodeSystemBadRequest)
	if !strings.Contains(err.Error(), systemPrefix+"/grants/") {
		t.Fatalf("error %q does not name the system route", err)
	}
}
