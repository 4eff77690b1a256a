package server

import "github.com/queenmq/ephemeral/wire"

// Every code the server answers in an error body's "code", in one place:
// the family's (docs/server.md, "Routes and answers"), the system routes'
// (D15), identity's and the HTTP layer's. An SDK branches on these; the
// conformance tests pin each with its status.
const (
	// The family's refusals.
	codeBadRequest      = wire.CodeBadRequest          // 400 "ephemeral_bad_request"
	codeQueueFull       = "queue_full"                 // 429
	codeRateLimited     = "rate_limited"               // 429
	codeQuotaExceeded   = "ephemeral_quota_exceeded"   // 403
	codeFeatureGated    = "feature_gated"              // 403
	codeNotFound        = "ephemeral_queue_not_found"  // 404, the depth read only
	codeUnavailable     = "ephemeral_unavailable"      // 503
	codeDisabled        = "ephemeral_disabled"         // 503, the kill switch
	codeConfigureFailed = "ephemeral_configure_failed" // 500, the store refused a declaration
	codeDeleteFailed    = "ephemeral_delete_failed"    // 500, the store refused a removal
	codeOwnerMoved      = "owner_moved"                // 503, a cell only: the relay reached a member that no longer owns the queue
	codeForwardFailed   = "ephemeral_forward_failed"   // 503, a cell only: the owner could not be reached

	// Identity and the admin scope. Defined in wire because package
	// identity answers them too (its refusals, identity.ErrLevel).
	codeUnauthorized = wire.CodeUnauthorized // 401 "unauthorized"
	codeForbidden    = wire.CodeForbidden    // 403 "forbidden"

	// The system routes (D15).
	codeSystemBadRequest = wire.CodeSystemBadRequest // 400 "bad_request"
	codeGrantNotFound    = "grant_not_found"         // 404

	// The HTTP layer.
	codeNoRoute  = "not_found"          // 404
	codeMethod   = "method_not_allowed" // 405
	codeInternal = "internal_error"     // 500, a bug
)
