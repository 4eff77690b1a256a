//go:build reliability

package reliability

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// The gateway's front door (docs/gateway.md, "The front door"): the same
// transport attacks against a real queen-gateway in front of a real
// broker, with the gateway's RSS sampled and its CPU read, and the probe
// going through the gateway.

const (
	gwSecret    = "reliability-gateway-secret"
	gwJWTSecret = "reliability-gateway-jwt"
)

// gatewayBin is the gateway to attack: QUEEN_RELIABILITY_GATEWAY_BIN (an
// older build, for the figures before a fix), else ./cmd/queen-gateway
// built without -race.
func gatewayBin(t *testing.T) string {
	if p := os.Getenv("QUEEN_RELIABILITY_GATEWAY_BIN"); p != "" {
		return p
	}
	return brokertest.Binary(t, "./cmd/queen-gateway")
}

// gwToken is an HS256 token of the gateway's end clients.
func gwToken(tenant, role string) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"tenant": tenant, "role": role, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(gwJWTSecret))
	if err != nil {
		panic(err)
	}
	return s
}

// newGatewayCase starts a broker in gateway mode and a gateway in front of
// it (JWT identity, the operator tenant ops, env over that), puts tenant
// probe-co on a plan with ephemeral, and samples the gateway's RSS; the
// probe goes through the gateway as probe-co. The bounds of endLoad and
// fallback are the gateway's, for a budget of its in-flight bound
// (QUEEN_MAX_INFLIGHT_BYTES, 64 MiB): 144 MiB.
func newGatewayCase(t *testing.T, env map[string]string) *rcase {
	t.Helper()
	b := brokertest.Start(t, bin, map[string]string{
		"QUEEN_EPHEMERAL_MAX_BYTES":     fmt.Sprint(budget),
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          gwSecret,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	})
	e := map[string]string{
		"QUEEN_GATEWAY_UPSTREAMS": b.URL(),
		"QUEEN_GATEWAY_SECRET":    gwSecret,
		"QUEEN_JWT_SECRET":        gwJWTSecret,
		"QUEEN_OPERATOR_TENANT":   "ops",
		"QUEEN_EVENT_LOOPS":       "2",
	}
	for k, v := range env {
		e[k] = v
	}
	c := &rcase{t: t, budget: budget, start: time.Now()}
	c.f = figures{Case: t.Name(), Scale: scale, BudgetBytes: budget, BoundMiB: mib(rssBound(budget)),
		Codes: map[string]int64{}, Extra: map[string]float64{}, Started: c.start.UTC().Format(time.RFC3339)}
	c.b = brokertest.Start(t, gatewayBin(t), e)
	c.addr = strings.TrimPrefix(c.b.URL(), "http://")
	ops := "Bearer " + gwToken("ops", "admin")
	for _, r := range [][2]string{
		{"/api/v1/gateway/plans/pro", `{"features":{"ephemeral":true}}`},
		{"/api/v1/gateway/tenants/probe-co", `{"plan":"pro"}`},
	} {
		req, _ := http.NewRequest("PUT", c.b.URL()+r[0], strings.NewReader(r[1]))
		req.Header.Set("Authorization", ops)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("PUT %s: %s", r[0], resp.Status)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.ctx = ctx
	c.rss = startSampler(c.b.PID(), rssCap, cancel)
	c.f.BaseRSSMiB = mib(c.rss.now())
	c.probe = startProbe(c.b.URL(), "probe", "Bearer "+gwToken("probe-co", "read-write"))
	t.Cleanup(func() {
		cancel()
		c.probe.Stop()
		c.rss.Close()
		c.write()
	})
	return c
}

// TestGatewayUploads: four connections each sending a 60 MiB push body
// without a token at full speed, and slow heads (one header byte every 8 s)
// beside them, against queen-gateway. Each upload must be answered 401
// unauthorized before 16 MiB of it was sent (refused on its head), each
// slow head closed within 13 s (head timeout 10 s), the gateway's RSS
// within 144 MiB and its CPU under 3 s. Before the fix (b9b27b3): 1.29 GB
// RSS and 30 s of CPU, held for 20 s by one byte every 10 s; a slow head
// still open at 72 s.
func TestGatewayUploads(t *testing.T) {
	c := newGatewayCase(t, nil)
	cpu0 := c.b.CPU(t)
	ctx, cancel := context.WithTimeout(c.ctx, scaled(30*time.Second, 20*time.Second))
	defer cancel()
	uploads, heads := newCodes(), newCodes()
	var wg sync.WaitGroup
	const size = 60 << 20
	sentAtAnswer := startUploads(ctx, t, &wg, c.addr, 4, size, uploads)
	nHeads := scaledN(200, 50)
	worstClose := startSlowHeads(ctx, t, &wg, c.addr, nHeads, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", 8*time.Second, heads)
	wg.Wait()
	cpu := c.b.CPU(t) - cpu0
	c.endLoad()
	worst := worstClose()
	c.f.Extra["gatewayCPUs"] = cpu.Seconds()
	c.f.Extra["slowHeads"] = float64(nHeads)
	c.f.Extra["worstHeadCloseS"] = worst.Seconds()
	c.checkCodes("upload ", uploads, "401 unauthorized")
	c.checkCodes("slow head ", heads, "closed", "400 ephemeral_bad_request")
	c.checkRefusedOnHead("upload", sentAtAnswer)
	if worst > 13*time.Second {
		c.fail("a slow head was still open %.1f s after it began; want closed within 13 s", worst.Seconds())
	}
	if cpu > 3*time.Second {
		c.fail("the gateway spent %.1f s of CPU on the attack; want under 3 s", cpu.Seconds())
	}
	c.fallback()
}
