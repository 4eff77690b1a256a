package gateway

import (
	"github.com/queenmq/ephemeral/wire"
)

// The cell's view read, GET /api/v1/ephemeral/cell (docs/routes.md,
// "cell"): the gateway answers it itself, once the request has passed the
// gates any read of the family passes (identity, the route's level, the
// plan's feature), and answers as a single broker does: generation 0, the
// caller's tenant, no members. Its clients must never be sent around it to
// the brokers' public ports (which would skip the gateway's identity,
// metering and plans), so the brokers' views, and their URLs, never reach
// them. It answers at once whatever `after` says: generation 0 never
// changes, so a client does not wait on it (docs/routes.md says so);
// holding the request for its timeout would hold a connection or stream
// for nothing.

const cellViewPath = "/api/v1/ephemeral/cell"

// cellViewAnswer appends the gateway's answer to a view read with head
// (req.Head(200) over HTTP; no connection field on a link), or the 400 a
// broker gives for a query it cannot read.
func cellViewAnswer(dst []byte, req *wire.Request, head wire.Head, tenant string) []byte {
	if _, err := wire.ParseCellView(req.Query(), 0); err != nil {
		werr := err.(*wire.Error)
		head.Status = werr.Status
		return wire.AppendError(dst, head, werr)
	}
	body := append([]byte(`{"generation":0,"tenant":`), wire.AppendString(nil, tenant)...)
	body = append(body, `,"members":[]}`...)
	return wire.AppendResponse(dst, head, body)
}
