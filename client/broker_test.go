package client

// The harness: the broker binary, built once for the package's tests, and
// started through internal/brokertest.

import (
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen) }

// startBroker starts a broker with env (QUEEN_* variables) on a fresh data
// directory; it is killed when the test ends.
func startBroker(t testing.TB, env map[string]string) *brokertest.Broker {
	t.Helper()
	return brokertest.StartQueen(t, env)
}
