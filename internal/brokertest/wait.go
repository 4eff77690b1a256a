package brokertest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails t saying
// what when within has passed first: a test waits on the condition
// itself, never for a fixed time.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Metric sums the samples of the series name whose labels contain
// labelPart (every sample of name when labelPart is "") in text, a
// Prometheus text exposition (GET /metrics); 0 when there is none.
func Metric(text, name, labelPart string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.eE+-]+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		if labelPart != "" && !strings.Contains(m[1], labelPart) {
			continue
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		sum += v
	}
	return sum
}
