package link

import (
	"bytes"

	"github.com/queenmq/ephemeral/wire"
)

// ToWire makes req the HTTP request a request frame stands for, as the
// route handlers take it: HTTP/1.1 and keep-alive, so that the answers made
// for it carry no connection field (a link is not closed by an answer).
// req's slices are views of rq's, which are views of the frame.
func ToWire(req *wire.Request, rq *Request) *wire.Request {
	*req = wire.Request{MethodName: rq.Method, Target: rq.Target, Path: rq.Target, Minor: 1, Body: rq.Body, KeepAlive: true}
	switch string(rq.Method) {
	case "GET":
		req.Method = wire.MethodGet
	case "POST":
		req.Method = wire.MethodPost
	case "DELETE":
		req.Method = wire.MethodDelete
	}
	if i := bytes.IndexByte(rq.Target, '?'); i >= 0 {
		req.Path, req.RawQuery = rq.Target[:i], rq.Target[i+1:]
	}
	return req
}
