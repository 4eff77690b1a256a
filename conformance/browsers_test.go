package conformance

// Browsers (D20, docs/server.md "Browsers"): a state-changing request that
// a browser marks as sent from another origin is refused 403 forbidden on
// its head, unless its origin is trusted; protected mode trusts a loopback
// client only when its Host names loopback (or a trusted host). Requests
// without browser headers are untouched. conformance/browser drives the
// same rules from a real Chromium page.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// crossSite is what Chromium sends with a no-cors fetch or a form POST
// from a page at http://evil.example.
var crossSite = []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}

// stateRoutes are the routes that change state, each with a body it would
// accept: every one must refuse a page on another origin.
var stateRoutes = []struct{ method, path, body string }{
	{"POST", "/api/v1/ephemeral/push", `{"queue":"victim","messages":[{"payload":"forged"}]}`},
	{"GET", "/api/v1/ephemeral/pop?queue=victim&autoAck=true", ""},
	{"POST", "/api/v1/ephemeral/ack", `{"queue":"victim","group":"g","acks":[{"id":"e:1:x:0","status":"completed"}]}`},
	{"POST", "/api/v1/ephemeral/configure", `{"queue":"victim","options":{"maxLength":1}}`},
	{"POST", "/api/v1/ephemeral/reset", `{"queue":"victim"}`},
	{"DELETE", "/api/v1/ephemeral/queue/victim", ""},
	{"POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":3600}`},
	{"PUT", "/api/v1/system/ephemeral/grants/default", `{"maxQueues":1}`},
	{"DELETE", "/api/v1/system/ephemeral/grants/default", ""},
}

// TestCrossOriginRefused: every state-changing route refuses a request a
// browser marks cross-site (Sec-Fetch-Site) or whose Origin is not its
// Host, with 403 forbidden naming QUEEN_TRUSTED_ORIGINS, and nothing
// changes. The same requests from the broker's own origin, or with no
// browser headers at all, are served.
func TestCrossOriginRefused(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.push(t, "victim", "", `"kept"`)
	host := b.addr()
	mismatch := []string{"Origin", "http://evil.example", "Host", host}
	sameSite := []string{"Sec-Fetch-Site", "same-site", "Origin", "http://127.0.0.1:1"}
	for _, r := range stateRoutes {
		for _, h := range [][]string{crossSite, mismatch, sameSite} {
			var body any
			if r.body != "" {
				body = r.body
			}
			e := b.doH(t, r.method, r.path, body, h...).wantErr(t, 403, "forbidden")
			wantMsg(t, e, "QUEEN_TRUSTED_ORIGINS")
		}
	}
	// Nothing changed: the message is still there, the broker is not
	// paused, no grant was set.
	if d := b.depth(t, "victim", ""); d.Pending != 1 {
		t.Fatalf("refused requests changed the queue: depth %+v, want the one message pushed", d)
	}
	var k killSwitch
	b.do(t, "GET", "/api/v1/system/ephemeral", nil).want(t, 200, &k)
	if !*k.Enabled {
		t.Fatal("a refused cross-origin POST paused the broker")
	}
	b.do(t, "GET", "/api/v1/system/ephemeral/grants/default", nil).wantErr(t, 404, "grant_not_found")

	// Reads are not refused: a page on another origin cannot read their
	// answers (the broker sends no CORS headers).
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, crossSite...).want(t, 200, nil)
	// Same origin (the dashboard's own calls), an address bar (none) and
	// no browser at all are served.
	self := "http://" + host
	b.doH(t, "POST", "/api/v1/ephemeral/push", string(pushBody("victim", "", `"a"`)),
		"Sec-Fetch-Site", "same-origin", "Origin", self).want(t, 201, nil)
	b.doH(t, "POST", "/api/v1/ephemeral/push", string(pushBody("victim", "", `"b"`)),
		"Origin", self, "Host", host).want(t, 201, nil)
	b.doH(t, "GET", "/api/v1/ephemeral/pop?queue=victim&batch=1", nil, "Sec-Fetch-Site", "none").want(t, 200, nil)
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("victim", "", `"c"`)).want(t, 201, nil)
}

// TestTrustedOrigins: an origin listed in QUEEN_TRUSTED_ORIGINS may change
// state from its pages; another origin still may not.
func TestTrustedOrigins(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_TRUSTED_ORIGINS": "https://app.example.com, http://tools.example:8080"})
	push := string(pushBody("q", "", `"1"`))
	b.doH(t, "POST", "/api/v1/ephemeral/push", push, "Sec-Fetch-Site", "cross-site", "Origin", "https://app.example.com").want(t, 201, nil)
	b.doH(t, "POST", "/api/v1/ephemeral/push", push, "Origin", "http://tools.example:8080").want(t, 201, nil)
	b.doH(t, "POST", "/api/v1/ephemeral/push", push, "Sec-Fetch-Site", "cross-site", "Origin", "https://app.example.com.evil").
		wantErr(t, 403, "forbidden")
	// A trusted origin needs an Origin header: Sec-Fetch-Site alone says
	// nothing about which page sent it.
	b.doH(t, "POST", "/api/v1/ephemeral/push", push, "Sec-Fetch-Site", "cross-site").wantErr(t, 403, "forbidden")
}

// TestTrustedOriginsMalformed: a list entry that is not an origin stops
// the broker at boot with a message naming it.
func TestTrustedOriginsMalformed(t *testing.T) {
	t.Parallel()
	for env, bad := range map[string]string{"QUEEN_TRUSTED_ORIGINS": "app.example.com", "QUEEN_TRUSTED_HOSTS": "queen.test:6632"} {
		cmd := exec.Command(brokerBin(t))
		cmd.Env = append(brokertest.BaseEnv(), "HOST=127.0.0.1", "PORT=0", "QUEEN_DATA_DIR="+t.TempDir(), env+"="+bad)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s=%s: the broker exited 0: %s", env, bad, out)
		}
		if !strings.Contains(string(out), strconv.Quote(bad)) || !strings.Contains(string(out), env) {
			t.Fatalf("%s=%s: the broker's error does not name the variable and the entry: %s", env, bad, out)
		}
	}
}

// TestCrossOriginRefusedBeforeTheBody: a cross-site upload is refused on
// its head and the connection closed; the body is never waited for.
func TestCrossOriginRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	c, err := net.DialTimeout("tcp", b.addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: %s\r\nSec-Fetch-Site: cross-site\r\n"+
		"Origin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", b.addr(), 60<<20)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the head alone: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 {
		t.Fatalf("status %d (%s), want 403", resp.StatusCode, body)
	}
	checkErrBody(t, body, "forbidden")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection stayed open after the refusal: %v", err)
	}
}

// TestLoopbackTrustNeedsALoopbackHost: in protected mode a loopback client
// naming another Host (a DNS-rebound page) gets 403 forbidden on the admin
// routes and /metrics, naming QUEEN_TRUSTED_HOSTS; loopback's own names are
// served, and so is a host listed in QUEEN_TRUSTED_HOSTS, and the admin
// token whatever the Host.
func TestLoopbackTrustNeedsALoopbackHost(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_TRUSTED_HOSTS": "queen.test"})
	port := strconv.Itoa(b.Port())
	rebound := "attacker.example:" + port
	for _, r := range adminRoutes {
		var body any
		if r.body != "" {
			body = r.body
		}
		// A rebound page is same-origin with itself: it passes the
		// cross-origin check, so the Host is what stops it.
		e := b.doH(t, r.method, r.path, body, "Host", rebound, "Sec-Fetch-Site", "same-origin",
			"Origin", "http://"+rebound).wantErr(t, 403, "forbidden")
		wantMsg(t, e, "QUEEN_TRUSTED_HOSTS")
	}
	var k killSwitch
	b.do(t, "GET", "/api/v1/system/ephemeral", nil).want(t, 200, &k)
	if !*k.Enabled {
		t.Fatal("a rebound page paused the broker")
	}
	for _, h := range []string{"localhost:" + port, "127.0.0.1:" + port, "LOCALHOST", "queen.test:" + port} {
		b.doH(t, "GET", "/metrics", nil, "Host", h).want(t, 200, nil)
	}
	// The queue routes are everyone's in mode none: the Host is not asked.
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, "Host", rebound).want(t, 200, nil)

	tok := "a-long-admin-token-for-the-test"
	bt := startBroker(t, map[string]string{"QUEEN_ADMIN_TOKEN": tok})
	bt.doH(t, "GET", "/metrics", nil, "Host", rebound, "Authorization", "Bearer "+tok).want(t, 200, nil)
}
