package server

import (
	"testing"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// The server maps wire values onto engine values by cast; this pins that
// both packages agree on the bits and orders the casts rely on.
func TestWireAndEngineAgreeOnCasts(t *testing.T) {
	bits := [][2]uint16{
		{wire.HasMaxBytes, engine.HasMaxBytes}, {wire.HasMaxLength, engine.HasMaxLength},
		{wire.HasPolicy, engine.HasPolicy}, {wire.HasTTLSeconds, engine.HasTTLSeconds},
		{wire.HasLeaseSeconds, engine.HasLeaseSeconds}, {wire.HasRetryLimit, engine.HasRetryLimit},
		{wire.HasWindowBuffer, engine.HasWindowBuffer},
	}
	for i, b := range bits {
		if b[0] != b[1] {
			t.Errorf("presence bit %d: wire %b, engine %b", i, b[0], b[1])
		}
	}
	if engine.Policy(wire.PolicyReject) != engine.PolicyReject || engine.Policy(wire.PolicyDropOldest) != engine.PolicyDropOldest {
		t.Error("policy orders differ")
	}
	for _, s := range []wire.AckStatus{wire.AckCompleted, wire.AckFailed, wire.AckRetry} {
		if es, ok := engine.ParseAckStatus(s.String()); !ok || es != engine.AckStatus(s) {
			t.Errorf("ack status %s: engine %v", s, es)
		}
	}
}
