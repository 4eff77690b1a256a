package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// attackPage is a page on another origin that tries every way a page can
// change state on a server it cannot read (D20): no-cors fetches (a POST
// with a text/plain JSON body, a pop by GET), a form POST with
// enctype=text/plain whose field spells a JSON body (name=value: the
// payload is "x="), and a CORS PUT that
// needs a preflight. It sets window.attackDone when every try has ended.
// The kill switch goes last: once paused, a broker refuses the rest.
const attackPage = `<!doctype html>
<title>elsewhere</title>
<iframe name="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="TARGET/api/v1/ephemeral/push">
<input type="hidden" name='{"queue":"forged-form","messages":[{"payload":"x' value='"}]}'>
</form>
<script>
const target = "TARGET";
async function attack() {
  const tried = [];
  const formLoaded = new Promise(r => document.querySelector('iframe').addEventListener('load', r, {once: true}));
  document.getElementById('f').submit();
  await Promise.race([formLoaded, new Promise(r => setTimeout(r, 5000))]);
  tried.push('form');
  const tries = [
    ['push', () => fetch(target + '/api/v1/ephemeral/push', {method: 'POST', mode: 'no-cors',
      headers: {'Content-Type': 'text/plain'}, body: '{"queue":"forged-fetch","messages":[{"payload":1}]}'})],
    ['pop', () => fetch(target + '/api/v1/ephemeral/pop?queue=victim&autoAck=true&batch=100', {mode: 'no-cors'})],
    ['reset', () => fetch(target + '/api/v1/ephemeral/reset', {method: 'POST', mode: 'no-cors', body: '{"queue":"victim"}'})],
    ['grant', () => fetch(target + '/api/v1/system/ephemeral/grants/default', {method: 'PUT', body: '{"maxQueues":1}'})],
    ['pause', () => fetch(target + '/api/v1/system/ephemeral', {method: 'POST', mode: 'no-cors',
      body: '{"enabled":false,"retryAfterSeconds":3600}'})],
  ];
  for (const [name, f] of tries) {
    try { await f(); tried.push(name); } catch (e) { tried.push(name + ' failed: ' + e.message); }
  }
  window.attackResult = tried.join(', ');
  window.attackDone = true;
}
attack();
</script>`

// TestCrossOriginPageInChromium: a page served from another origin
// (http://localhost:<port>, another site than http://127.0.0.1:<port>)
// tries to pause the broker, reset and drain a queue, push by fetch and by
// form, and set a grant, against a real broker and against a real
// queen-gateway in front of one. Refused, nothing changes. As a control,
// the same page with its origin in QUEEN_TRUSTED_ORIGINS does change them,
// so the page's requests really arrive and the refusal is what stops them.
// And the broker's own page still changes state from its own origin.
func TestCrossOriginPageInChromium(t *testing.T) {
	chrome := findChromium(t)
	page, pageOrigin := servePage(t)

	for _, door := range []string{"broker", "gateway"} {
		for _, trusted := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trusted=%v", door, trusted), func(t *testing.T) {
				env := map[string]string{}
				if trusted {
					env["QUEEN_TRUSTED_ORIGINS"] = pageOrigin
				}
				var b *brokertest.Broker
				target := ""
				if door == "broker" {
					b = brokertest.StartQueen(t, env)
					target = b.URL()
				} else {
					b, target = startGatewayPair(t, env)
				}
				api := &apiClient{t: t, base: target}
				api.push("victim", 3)

				ctx, _ := newBrowser(t, chrome)
				if err := chromedp.Do(ctx, chromedp.Navigate(page+"?target="+target)); err != nil {
					t.Fatalf("loading the page on another origin: %v", err)
				}
				if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.attackDone === true`,
					chromedp.WithPollingTimeout(20*time.Second))); err != nil {
					t.Fatalf("the page's tries did not end: %v", err)
				}
				t.Logf("the page tried: %s", evalString(t, ctx, `window.attackResult`))

				// The broker's switches; behind the gateway the page's pause
				// has no route (the gateway serves the queue routes only).
				operator := &apiClient{t: t, base: b.URL(), token: operatorToken}
				if door == "broker" {
					operator.token = ""
				}
				paused := !killSwitchEnabled(t, operator)
				if paused {
					// Paused, the listing is refused: resume it to read.
					operator.do("POST", "/api/v1/system/ephemeral", `{"enabled":true}`, 200)
				}
				depths := api.depths()
				_, formPushed := depths["forged-form"]
				_, fetchPushed := depths["forged-fetch"]
				if !trusted {
					if paused || depths["victim"] != 3 || formPushed || fetchPushed {
						t.Fatalf("a page on another origin changed the %s: paused=%v, queues %v (want victim: 3 and nothing else)",
							door, paused, depths)
					}
					if door == "broker" {
						api.do("GET", "/api/v1/system/ephemeral/grants/default", "", 404)
						sameOrigin(t, ctx, b.URL())
					}
					return
				}
				// The control: every no-cors try and the form landed (the
				// CORS PUT stops at its preflight, which neither door
				// answers with CORS headers).
				if door == "broker" && !paused {
					t.Fatal("with the page's origin trusted, its pause did not land")
				}
				if depths["victim"] != 0 || !formPushed || !fetchPushed {
					t.Fatalf("with the page's origin trusted, its requests did not all land at the %s: queues %v", door, depths)
				}
			})
		}
	}
}

// operatorToken is the admin token of the broker behind the gateway.
const operatorToken = "browser-test-operator-token"

// startGatewayPair starts a broker in gateway mode and a queen-gateway in
// front of it (gwEnv added to its environment) without end-client
// identity, whose tenant default is on a plan with ephemeral queues. It
// returns the broker and the gateway's URL.
func startGatewayPair(t *testing.T, gwEnv map[string]string) (*brokertest.Broker, string) {
	t.Helper()
	const secret = "browser-test-gateway-secret"
	b := brokertest.StartQueen(t, map[string]string{"QUEEN_AUTH_MODE": "gateway", "QUEEN_GATEWAY_SECRET": secret,
		"QUEEN_ADMIN_TOKEN": operatorToken, "QUEEN_EPHEMERAL_REQUIRE_GRANT": "false"})
	env := map[string]string{"QUEEN_GATEWAY_UPSTREAMS": b.URL(), "QUEEN_GATEWAY_SECRET": secret, "QUEEN_GATEWAY_POLL_MS": "50"}
	for k, v := range gwEnv {
		env[k] = v
	}
	g := brokertest.Start(t, brokertest.Binary(t, "./cmd/queen-gateway"), env)
	// Without identity a loopback client is the gateway's operator.
	admin := &apiClient{t: t, base: g.URL()}
	admin.do("PUT", "/api/v1/gateway/plans/open", `{"features":{"ephemeral":true}}`, 200)
	admin.do("PUT", "/api/v1/gateway/tenants/default", `{"plan":"open"}`, 200)
	// The catalog is read every 50 ms: wait until the plan is in force.
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := 0, ""
		resp, err := http.Get(g.URL() + "/api/v1/ephemeral/queues")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
			if status == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway does not serve tenant default its plan: %d %s %v", status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return b, g.URL()
}

// sameOrigin loads the broker's dashboard and pushes from it, as a page of
// the broker's own origin does: served (201), and the message is there.
func sameOrigin(t *testing.T, ctx context.Context, base string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/dashboard")); err != nil {
		t.Fatalf("loading /dashboard: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch('/api/v1/ephemeral/push', {method: 'POST',
		headers: {'Content-Type': 'application/json'}, body: '{"queue":"from-dashboard","messages":[{"payload":1}]}'})
		.then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 201 {
		t.Fatalf("a push from the broker's own page: status %d, %v; want 201", status, err)
	}
}

// servePage serves attackPage at http://localhost:<port>/attack, with the
// target taken from the query, and returns that URL and the page's origin.
func servePage(t *testing.T) (page, origin string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.URL.Query().Get("target")
		if !strings.HasPrefix(target, "http://127.0.0.1:") {
			http.Error(w, "target must be http://127.0.0.1:<port>", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, strings.ReplaceAll(attackPage, "TARGET", target))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	origin = fmt.Sprintf("http://localhost:%d", ln.Addr().(*net.TCPAddr).Port)
	return origin + "/attack", origin
}

// killSwitchEnabled reads the kill switch as the operator (the test's own
// client, from loopback).
func killSwitchEnabled(t *testing.T, api *apiClient) bool {
	t.Helper()
	var k struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(api.do("GET", "/api/v1/system/ephemeral", "", 200), &k); err != nil {
		t.Fatal(err)
	}
	return k.Enabled
}

// TestReboundNameInChromium: DNS rebinding, for real. Chromium resolves
// rebound.test to 127.0.0.1 (as a page's own name does once its DNS answer
// is rebound), so a page at http://rebound.test:<broker port> is the
// broker's dashboard served under the attacker's name: same-origin with
// itself, from loopback. In protected mode its reads of /metrics and the
// kill switch and its pause are 403 forbidden (its Host names no loopback);
// the same page under localhost is the operator's.
func TestReboundNameInChromium(t *testing.T) {
	chrome := findChromium(t)
	b := brokertest.StartQueen(t, nil)
	api := &apiClient{t: t, base: b.URL()}
	ctx, _ := newBrowser(t, chrome, chromedp.Flag("host-resolver-rules", "MAP rebound.test 127.0.0.1"))

	status := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js+`.then(r => r.status)`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return n
	}
	pause := `fetch('/api/v1/system/ephemeral', {method: 'POST', body: '{"enabled":false,"retryAfterSeconds":3600}'})`
	for _, c := range []struct {
		name string
		want int
	}{{"rebound.test", 403}, {"localhost", 200}} {
		if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("http://%s:%d/dashboard", c.name, b.Port()))); err != nil {
			t.Fatalf("loading the dashboard as %s: %v", c.name, err)
		}
		if got := status(`fetch('/metrics')`); got != c.want {
			t.Fatalf("/metrics from a page at %s: %d, want %d", c.name, got, c.want)
		}
		if got := status(`fetch('/api/v1/system/ephemeral')`); got != c.want {
			t.Fatalf("the kill switch read from a page at %s: %d, want %d", c.name, got, c.want)
		}
		if c.want == 403 {
			if got := status(pause); got != 403 {
				t.Fatalf("a pause from a page at %s: %d, want 403", c.name, got)
			}
			if !killSwitchEnabled(t, api) {
				t.Fatal("a page under a rebound name paused the broker")
			}
		}
	}
}
