package client

// The harness: the broker binary, built once for the package's tests, and
// started through internal/brokertest.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "queen-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "queen")
	if err := brokertest.Build("..", "./cmd/queen", binPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startBroker starts a broker with env (QUEEN_* variables) on a fresh data
// directory; it is killed when the test ends.
func startBroker(t testing.TB, env map[string]string) *brokertest.Broker {
	t.Helper()
	return brokertest.Start(t, binPath, env)
}
