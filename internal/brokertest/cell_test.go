package brokertest

import (
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/cell"
)

// QueueOwnedBy's queue is owned by the member asked for, as the cell's
// members compute it (cell.OwnerOf over their view), for every member of a
// cell of three.
func TestQueueOwnedByAgreesWithTheCell(t *testing.T) {
	ids := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	for _, owner := range ids {
		q := QueueOwnedBy(t, ids, "acme", "own", owner)
		if !strings.HasPrefix(q, "own-") {
			t.Errorf("queue %q: want the prefix own-", q)
		}
		if got := cell.OwnerOf(ids, "acme", q); got != owner {
			t.Errorf("queue %s: the cell gives it to %s, want %s", q, got, owner)
		}
	}
}

// A cell's member environment: the store and schema, the test timings, the
// advertised id, then the cell's variables, then the member's own, which
// win.
func TestCellEnv(t *testing.T) {
	c := NewCell("postgres://db", "s1", map[string]string{"QUEEN_CELL_SECRET": "x", "QUEEN_CELL_HEARTBEAT_MS": "200"})
	env := c.Env("127.0.0.1:7001", map[string]string{"QUEEN_CELL_SECRET": "y"})
	want := map[string]string{
		"QUEEN_DATABASE_URL":                "postgres://db",
		"QUEEN_DATABASE_SCHEMA":             "s1",
		"QUEEN_CELL_ADVERTISE":              "127.0.0.1:7001",
		"QUEEN_CELL_HEARTBEAT_MS":           "200",
		"QUEEN_CELL_MEMBER_TIMEOUT_MS":      "1000",
		"QUEEN_CELL_SECRET":                 "y",
		"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": "10000",
	}
	if len(env) != len(want) {
		t.Errorf("env %v, want %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
}
