package server

import (
	"bytes"
	"time"

	"github.com/queenmq/ephemeral/wire"
)

const (
	prefix     = "/api/v1/ephemeral/"
	queuePath  = prefix + "queue/" // DELETE /api/v1/ephemeral/queue/:queue
	queuesPath = prefix + "queues" // GET /api/v1/ephemeral/queues
	depthTail  = "/depth"          // GET /api/v1/ephemeral/queues/:queue/depth
	healthPath = "/health"
)

// route serves one request and observes its latency: here when it is
// answered on the loop, else when the busy spell answers it.
func (cs *conn) route(req *wire.Request) {
	cs.reqStart, cs.reqRoute = time.Now(), routeOther
	cs.dispatch(req)
	if cs.state.Load() == stIdle {
		cs.s.m.observe(cs.reqRoute, cs.reqStart)
	}
}

// dispatch hands one request to its handler (ephemeral-routes.md, the
// routes). Every handler appends its answer to cs.out, or makes the
// connection busy and answers later. A recognised route sets cs.reqRoute
// before its handler runs (a parked pop may be answered before Pop returns).
func (cs *conn) dispatch(req *wire.Request) {
	path := req.Path
	switch {
	case bytes.Equal(path, []byte(healthPath)):
		cs.reqRoute = routeHealth
		if cs.method(req, wire.MethodGet) {
			cs.health(req)
		}
	case bytes.Equal(path, []byte(metricsPath)):
		cs.reqRoute = routeMetrics
		if cs.method(req, wire.MethodGet) {
			cs.serveMetrics(req)
		}
	case bytes.HasPrefix(path, []byte(systemPath)):
		cs.routeSystem(req, path)
	case !bytes.HasPrefix(path, []byte(prefix)):
		cs.refuse(req, errNoRoute)
	default:
		cs.routeEphemeral(req, path[len(prefix):])
	}
}

func (cs *conn) routeEphemeral(req *wire.Request, rest []byte) {
	switch string(rest) {
	case "push":
		cs.reqRoute = routePush
		if cs.method(req, wire.MethodPost) && cs.admit(req, accWrite) {
			cs.pushVerb(req)
		}
		return
	case "pop":
		cs.reqRoute = routePop
		if cs.method(req, wire.MethodGet) && cs.admit(req, accReadWrite) {
			cs.pop(req)
		}
		return
	case "ack":
		cs.reqRoute = routeAck
		if cs.method(req, wire.MethodPost) && cs.admit(req, accReadWrite) {
			cs.ackVerb(req)
		}
		return
	case "configure":
		cs.reqRoute = routeConfigure
		if cs.method(req, wire.MethodPost) && cs.admit(req, accReadWrite) {
			cs.configure(req)
		}
		return
	case "reset":
		cs.reqRoute = routeReset
		if cs.method(req, wire.MethodPost) && cs.admit(req, accReadWrite) {
			cs.reset(req)
		}
		return
	case "queues":
		cs.reqRoute = routeQueues
		if cs.method(req, wire.MethodGet) && cs.admit(req, accRead) {
			cs.listQueues(req)
		}
		return
	}
	switch {
	// An empty :queue segment is still the route: it is a name that breaks
	// the name rule, so it is a 400 after identity, like any other bad name
	// (docs/server.md, routes and answers).
	case bytes.HasPrefix(rest, []byte("queue/")):
		cs.reqRoute = routeDeleteQueue
		seg := rest[len("queue/"):]
		if bytes.IndexByte(seg, '/') >= 0 {
			cs.refuse(req, errNoRoute)
		} else if cs.method(req, wire.MethodDelete) && cs.admit(req, accReadWrite) {
			if len(seg) == 0 {
				cs.refuse(req, errEmptyPathQueue)
			} else {
				cs.deleteQueue(req, req.PathUnescape(seg))
			}
		}
	case len(rest) >= len("queues/")+len(depthTail) &&
		bytes.HasPrefix(rest, []byte("queues/")) && bytes.HasSuffix(rest, []byte(depthTail)):
		cs.reqRoute = routeDepth
		seg := rest[len("queues/") : len(rest)-len(depthTail)]
		if bytes.IndexByte(seg, '/') >= 0 {
			cs.refuse(req, errNoRoute)
		} else if cs.method(req, wire.MethodGet) && cs.admit(req, accRead) {
			if len(seg) == 0 {
				cs.refuse(req, errEmptyPathQueue)
			} else {
				cs.depthRead(req, req.PathUnescape(seg))
			}
		}
	default:
		cs.refuse(req, errNoRoute)
	}
}

// method refuses req with 405, naming the method the route takes in an
// Allow header (RFC 9110 15.5.6), unless it has method m.
func (cs *conn) method(req *wire.Request, m wire.Method) bool {
	if req.Method == m {
		return true
	}
	head := req.Head(0)
	head.Extra = allowLines[m]
	cs.out = cs.s.appendError(cs.out, head, errMethod)
	return false
}

var allowLines = map[wire.Method][]byte{
	wire.MethodGet:    []byte("Allow: GET\r\n"),
	wire.MethodPost:   []byte("Allow: POST\r\n"),
	wire.MethodDelete: []byte("Allow: DELETE\r\n"),
}
