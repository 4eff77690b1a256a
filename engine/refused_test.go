package engine

import (
	"strings"
	"testing"
)

// engine.md (a refused push changes nothing): a push refused for any reason
// after its names were read creates no queue: the listing does not show it
// and it does not consume the tenant's queue allowance.
func TestRefusedPushCreatesNoQueue(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 100 })
	h.e.SetTenantLimits("default", 0, 2)
	h.push("kept", "", "x")
	if _, err := h.e.Push("big", "filler", "", payloads(strings.Repeat("x", 95))); err != nil {
		t.Fatal(err)
	}
	h.e.SetTenantLimits("small", 3, 0)
	for _, c := range []struct {
		name, tenant string
		ps           []string
		code         Code
	}{
		{"too many messages", "default", numbered("m", MaxBatch+1), CodeBadRequest},
		{"never fits (maxBytes is the broker total)", "default", []string{strings.Repeat("x", 101)}, CodeBadRequest},
		{"tenant bytes", "small", []string{"abcd"}, CodeQuotaExceeded},
		{"broker total", "default", []string{"0123456789"}, CodeUnavailable},
	} {
		if n, err := h.e.Push(c.tenant, "refused", "", payloads(c.ps...)); n != 0 || CodeOf(err) != c.code {
			t.Fatalf("%s: n=%d err=%v, want code %d", c.name, n, err, c.code)
		}
		if got := h.e.Queues(c.tenant, nil); len(got) != 0 && got[0].Name == "refused" || len(got) > 1 {
			t.Fatalf("%s: the refused push left a queue: %+v", c.name, got)
		}
	}
	// The allowance of 2 still has room for a second queue.
	h.push("second", "", "y")
	if qs := h.e.Queues("default", nil); len(qs) != 2 || qs[0].Name != "kept" || qs[1].Name != "second" {
		t.Fatalf("listing %+v, want kept and second", qs)
	}
}

// engine.md (a refused push changes nothing): a refused push to a partition
// that does not exist creates no partition.
func TestRefusedPushCreatesNoPartition(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.payloadOnly = true; c.MaxBytes = 10 })
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 1}))
	h.push("q", "p1", "a")
	if _, err := h.pushErr("q", "p2", "b"); err != ErrQueueFull {
		t.Fatalf("push past maxLength: %v, want queue_full", err)
	}
	h.configure("r", OptionSet{})
	h.push("r", "p1", "12345678") // 9 bytes held of the broker's 10
	if _, err := h.pushErr("r", "p2", "12"); err != ErrBrokerFull {
		t.Fatalf("push past the broker total: %v, want broker full", err)
	}
	for _, q := range []string{"q", "r"} {
		if d := h.depthOf(q, ""); len(d.Partitions) != 1 || d.Partitions[0].Partition != "p1" {
			t.Fatalf("%s: partitions %+v, want p1 only", q, d.Partitions)
		}
	}
}
