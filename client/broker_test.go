package client

// The harness: the broker binary, built once for the package's tests, and
// started through internal/brokertest.

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen) }

// startBroker starts a broker with env (QUEEN_* variables) on a fresh data
// directory; it is killed when the test ends.
func startBroker(t testing.TB, env map[string]string) *brokertest.Broker {
	t.Helper()
	return brokertest.StartQueen(t, env)
}

// brokerGauge reads one unlabelled sample (a gauge or a counter) from the
// broker's /metrics, which answers loopback clients without a credential.
func brokerGauge(t testing.TB, b *brokertest.Broker, name string) float64 {
	t.Helper()
	resp, err := http.Get(b.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// awaitCond polls cond until it holds, failing t after within: a bound
// generous enough for a loaded machine, never a measure of the rule.
func awaitCond(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}
