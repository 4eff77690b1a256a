package gateway

import "github.com/queenmq/ephemeral/wire"

// The gateway's own error codes (docs/gateway.md, "Refusals"). The codes
// that the broker also answers keep the broker's meaning.
const (
	codeRouteBlocked      = "route_blocked"              // 404: a route the gateway's table does not know
	codeFeatureGated      = "feature_gated"              // 403: the plan does not include the ephemeral feature
	codeAllowanceExceeded = "message_allowance_exceeded" // 429: the plan's messages for this period are spent
	codeRateLimited       = "rate_limited"               // 429: over the plan's messages per second
	codeSlotsExhausted    = "parked_slots_exhausted"     // 429: every parked-consumer slot is taken
	codeForwardFailed     = "ephemeral_forward_failed"   // 503: no broker could be reached
	codeUnauthorized      = "unauthorized"               // 401
	codeForbidden         = "forbidden"                  // 403
	codeBadRequest        = "bad_request"                // 400, the admin routes
	codePlanNotFound      = "plan_not_found"             // 404, the admin routes
	codeTenantNotFound    = "tenant_not_found"           // 404, the admin routes
	codeMethodNotAllowed  = "method_not_allowed"         // 405
	codeStoreUnavailable  = "gateway_store_unavailable"  // 503: the catalog could not be read or written
	codeUnavailable       = "ephemeral_unavailable"      // 503: too many request bytes in flight (the broker's code)
)

// Refusals allocated once.
var (
	errRouteBlocked  = &wire.Error{Status: 404, Code: codeRouteBlocked, Msg: "this route is not served through the gateway"}
	errFeatureGated  = &wire.Error{Status: 403, Code: codeFeatureGated, Msg: "the tenant's plan does not include ephemeral queues"}
	errAllowance     = &wire.Error{Status: 429, Code: codeAllowanceExceeded, Msg: "the tenant's plan allows no more messages in this period"}
	errRate          = &wire.Error{Status: 429, Code: codeRateLimited, Msg: "the tenant is over its plan's messages per second"}
	errSlots         = &wire.Error{Status: 429, Code: codeSlotsExhausted, Msg: "every parked-consumer slot of the tenant's plan is taken; answer or stop a waiting pop first"}
	errForwardFailed = &wire.Error{Status: 503, Code: codeForwardFailed, Msg: "no broker behind the gateway could be reached; retry"}
	errLevel         = &wire.Error{Status: 403, Code: codeForbidden, Msg: "the credential's access level does not allow this route"}
	errMethod        = &wire.Error{Status: 405, Code: codeMethodNotAllowed, Msg: "method not allowed on this route"}
)

// appendRefusal appends e as an answer to req, with Retry-After when
// retryAfter is positive.
func appendRefusal(dst []byte, req *wire.Request, e *wire.Error, retryAfter int) []byte {
	h := req.Head(e.Status)
	h.Close = h.Close || e.Close
	h.RetryAfter = retryAfter
	return wire.AppendError(dst, h, e)
}

// appendFailure appends the answer to a forwarded request that never
// reached a broker (e is errForwardFailed, worth a retry after a second);
// close: the client asked to close after it.
func appendFailure(dst []byte, e *wire.Error, close bool) []byte {
	return wire.AppendError(dst, wire.Head{Status: e.Status, Close: close, RetryAfter: 1}, e)
}
