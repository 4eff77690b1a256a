// Package server puts the engine on the wire: gnet event loops, routing of
// the eight /api/v1/ephemeral routes and /health, long-poll parking, the
// refusals in the specification's shape, and the store calls that
// configure and delete make off the loops (P1).
//
// One connection is served in request order. A request that cannot be
// answered on the loop (a pop that parks, a declaration write) makes the
// connection busy: the bytes of later pipelined requests stay in gnet's
// inbound buffer until the answer has been written, and are served after
// it. The answer is written on the connection's own loop when the request
// that completed it was served there, by the completer itself once the
// loop has handed the connection over (stDirect, conn.writeDirect), and
// with AsyncWrite otherwise. So responses leave in request order and a
// parked pop holds no goroutine (P5, D13).
package server
