package server

// The gates a request passes before its handler, outermost first (D7):
// identity, access level, the kill switch, the grant; a push then meets the
// tenant's rate (rateLimited below; the bucket is internal/ratebucket) once
// its shape is checked.

import (
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

var errDisabledMsg = "an operator paused the ephemeral surface"

// Refusals of the gates, allocated once.
var (
	errFeatureGated = &wire.Error{Status: 403, Code: codeFeatureGated, Msg: "the tenant is not granted the ephemeral class"}
	errRateLimited  = &wire.Error{Status: 429, Code: codeRateLimited, Msg: "the tenant is over its messages-per-second allowance"}
	errDisabled     = &wire.Error{Status: 503, Code: codeDisabled, Msg: errDisabledMsg}
)

// admit runs identity, the access level need, then the kill switch and the
// grant (D7). It sets cs.tenant and cs.ts, or answers the refusal.
func (cs *conn) admit(req *wire.Request, need identity.Level) bool {
	s := cs.s
	if cs.frameLink != nil && cs.frameLink.role == linkClient {
		return cs.linkAdmits(req, need) // established on the link's upgrade
	}
	tenant, level, werr := s.auth.IdentifyAs(req, cs.tenant)
	if werr != nil {
		cs.out = s.appendError(cs.out, cs.head(req, 0), werr)
		return false
	}
	return cs.admitAs(req, need, tenant, level)
}

// admitAs is admit for a request whose identity is established already (a
// gateway link's frame): the access level need, the kill switch, the grant.
func (cs *conn) admitAs(req *wire.Request, need identity.Level, tenant string, level identity.Level) bool {
	s := cs.s
	if !level.Allows(need) {
		cs.out = s.appendError(cs.out, cs.head(req, 0), identity.ErrLevel)
		return false
	}
	cs.tenant, cs.access = tenant, level
	if s.paused.Load() {
		head := cs.head(req, 0)
		head.RetryAfter = int(s.retryAfter.Load())
		cs.out = s.appendError(cs.out, head, errDisabled)
		return false
	}
	cs.ts = s.tenantState(tenant)
	if s.cfg.RequireGrant {
		if !cs.ts.granted.Load() {
			cs.out = s.appendError(cs.out, cs.head(req, 0), errFeatureGated)
			return false
		}
	}
	return true
}

// rateLimited refuses a push of n messages over the tenant's rate (after
// shape, before the queue's bounds, D7).
func (cs *conn) rateLimited(req *wire.Request, n int) bool {
	wait := cs.ts.take(n)
	if wait == 0 {
		return false
	}
	head := cs.head(req, 0)
	head.RetryAfter = wait
	cs.out = cs.s.appendError(cs.out, head, errRateLimited)
	return true
}
