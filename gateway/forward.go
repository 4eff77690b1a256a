package gateway

import (
	"strconv"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// appendForward appends req as the gateway forwards it: the method and
// target as the client sent them, the body (de-chunked), and the headers
// the broker reads: Host, Content-Type when the client sent one,
// Content-Length, and the tenancy the broker trusts from a gateway. No other
// header of the client is forwarded, so none can forge the tenancy
// (X-Queen-*) or reach the broker's own identity (Authorization).
func appendForward(dst []byte, req *wire.Request, host, tenant string, level identity.Level, secret string) []byte {
	dst = append(dst, req.MethodName...)
	dst = append(dst, ' ')
	dst = append(dst, req.Target...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	if ct, ok := req.Header("Content-Type"); ok {
		dst = append(dst, "\r\nContent-Type: "...)
		dst = append(dst, ct...)
	}
	if len(req.Body) > 0 || req.Method == wire.MethodPost || req.Method == wire.MethodPut {
		dst = append(dst, "\r\nContent-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(req.Body)), 10)
	}
	dst = append(dst, "\r\nX-Queen-Tenant: "...)
	dst = append(dst, tenant...)
	dst = append(dst, "\r\nX-Queen-Access: "...)
	dst = append(dst, level.String()...)
	dst = append(dst, "\r\nX-Queen-Gateway-Secret: "...)
	dst = append(dst, secret...)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, req.Body...)
}
