package e2e

import "testing"

// The parked-consumer slots with QUEEN_GATEWAY_LINK=false (docs/gateway.md,
// "Parked-consumer slots"): every waiting pop then has a broker connection
// of its own, and the slot of a pop whose client leaves is given back on
// that path (clientConn.closed, the HTTP connection's exchanges), not on
// the link's. The tests with the link on run their pops on the link, so
// these are the only ones that hold the HTTP path to the rule.

var linkOff = map[string]string{"QUEEN_GATEWAY_LINK": "false"}

// TestParkedSlotsLinkOff is TestParkedSlots over HTTP: the slot comes back
// when the pop is answered, times out, and when its client disconnects.
func TestParkedSlotsLinkOff(t *testing.T) {
	t.Parallel()
	parkedSlots(t, false)
}

// TestParkedSlotsPerTenantLinkOff is TestParkedSlotsPerTenant over HTTP.
func TestParkedSlotsPerTenantLinkOff(t *testing.T) {
	t.Parallel()
	parkedSlotsPerTenant(t, linkOff)
}

// TestUnlimitedSlotsLinkOff is TestUnlimitedSlots over HTTP.
func TestUnlimitedSlotsLinkOff(t *testing.T) {
	t.Parallel()
	unlimitedSlots(t, linkOff)
}
