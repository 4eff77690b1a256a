//go:build reliability

package reliability

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// The knobs, from the environment (Makefile: RELIABILITY_SCALE,
// RELIABILITY_OUT).
var (
	// scale multiplies every attack's duration and count: 1 is the issue's
	// full size (`make reliability`, under 10 minutes), 0.2 is CI's brief run.
	scale = envFloat("QUEEN_RELIABILITY_SCALE", 1)
	// outDir, when set, receives one JSON file of figures per case, under a
	// directory named after the run's start (UTC).
	outDir = os.Getenv("QUEEN_RELIABILITY_OUT")
	// rssCap stops an attack once the broker's RSS passes it, so that a broker
	// without its bounds does not take the shared machine down with it; the
	// case fails anyway, and its figures say the cap was hit.
	rssCap = int64(envFloat("QUEEN_RELIABILITY_RSS_CAP_MB", 1024)) << 20
)

// budget is QUEEN_EPHEMERAL_MAX_BYTES for every case but the million-queue
// listing: 64 MiB, the budget of the table.
const budget = 64 << 20

// rssBound is the bound on the broker's RSS for a budget:
// 1.25 × QUEEN_EPHEMERAL_MAX_BYTES + 64 MiB.
func rssBound(budget int64) int64 { return budget*5/4 + 64<<20 }

var (
	bin     string // the broker, built once without -race (RSS must be real)
	pg      *storetest.Postgres
	runName = time.Now().UTC().Format("20060102T150405Z")
)

func TestMain(m *testing.M) {
	if base := os.Getenv("QUEEN_RELIABILITY_PROBE"); base != "" {
		runProbeChild(base) // this process is a probe (startProbe)
		os.Exit(0)
	}
	var err error
	if bin, err = brokertest.Wait(brokertest.Queen); err != nil {
		fmt.Fprintln(os.Stderr, err)
		brokertest.Cleanup()
		os.Exit(1)
	}
	fmt.Printf("reliability: scale %.2f, RSS cap %d MiB, results %q\n", scale, rssCap>>20, outDir)
	code := storetest.MainWithPostgres(m, &pg)
	brokertest.Cleanup()
	os.Exit(code)
}

func envFloat(name string, def float64) float64 {
	if v := os.Getenv(name); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			fmt.Fprintf(os.Stderr, "%s=%q: want a positive number\n", name, v)
			os.Exit(2)
		}
		return f
	}
	return def
}

// scaled is d × scale, at least lo.
func scaled(d, lo time.Duration) time.Duration {
	return max(lo, time.Duration(float64(d)*scale))
}

// scaledN is n × scale, at least lo.
func scaledN(n, lo int) int {
	return max(lo, int(math.Round(float64(n)*scale)))
}
