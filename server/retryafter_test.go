package server

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// 503 ephemeral_forward_failed (relay and fan-out alike) carries
// Retry-After: 1 from the one writer every refusal goes through; 503
// owner_moved and other refusals carry none, and a Retry-After the caller
// set (the kill switch's) is kept.
// conformance.TestCellOwnerMoved, TestCellOwnerKilled and
// TestCellResetAndDeleteFanOut check it on real brokers.
func TestCellRefusalsCarryRetryAfter(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	s := New(Config{Engine: e, Store: openStore(t)})
	retryAfter := func(head wire.Head, we *wire.Error) (int, string, string) {
		t.Helper()
		raw := s.appendError(nil, head, we)
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("%s: %v", we.Code, err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After"), we.Code
	}
	for _, we := range []*wire.Error{errForwardFailed, errOwnerNotReached} {
		if st, ra, code := retryAfter(wire.Head{}, we); st != 503 || ra != "1" {
			t.Errorf("%s: %d, Retry-After %q, want 503 and 1", code, st, ra)
		}
	}
	if st, ra, _ := retryAfter(wire.Head{}, errOwnerMoved); st != 503 || ra != "" {
		t.Errorf("owner_moved: %d, Retry-After %q, want 503 and none", st, ra)
	}
	if st, ra, _ := retryAfter(wire.Head{}, refusal(engine.ErrTenantQueues)); st != 403 || ra != "" {
		t.Errorf("quota refusal: %d, Retry-After %q, want 403 and none", st, ra)
	}
	if _, ra, _ := retryAfter(wire.Head{RetryAfter: 7}, errForwardFailed); ra != "7" {
		t.Errorf("a Retry-After set by the caller: %q, want 7 kept", ra)
	}
}
