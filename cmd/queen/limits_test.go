package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDerivedDefaults(t *testing.T) {
	const mib = 1 << 20
	if got := memLimit(256 * mib); got != 336*mib {
		t.Errorf("memLimit(256 MiB) = %d MiB, want 336", got/mib)
	}
	for budget, want := range map[int64]int64{0: 64 * mib, 64 * mib: 16 * mib, 32 * mib: 16 * mib, 1024 * mib: 256 * mib} {
		if got := inflightDefault(budget); got != want {
			t.Errorf("inflightDefault(%d MiB) = %d MiB, want %d", budget/mib, got/mib, want/mib)
		}
	}
}

// Every transport and memory variable is listed by --help with its default.
func TestHelpListsTransportSettings(t *testing.T) {
	var b bytes.Buffer
	printHelp(&b)
	for _, v := range []string{"QUEEN_MAX_INFLIGHT_BYTES", "QUEEN_BODY_TIMEOUT_MS  ", "QUEEN_OUTBOUND_SOFT_BYTES", "QUEEN_OUTBOUND_HARD_BYTES", "QUEEN_OUTBOUND_SOFT_S", "GOMEMLIMIT"} {
		if !strings.Contains(b.String(), v) {
			t.Errorf("--help does not list %s", v)
		}
	}
}
