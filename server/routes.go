package server

import (
	"bytes"
	"time"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
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

// dispatch hands one request to its handler (docs/server.md, "Routes and
// answers"). Every handler appends its answer to cs.out, or makes the
// connection busy and answers later. A recognised route sets cs.reqRoute
// before its handler runs (a parked pop may be answered before Pop returns).
func (cs *conn) dispatch(req *wire.Request) {
	path := req.Path
	cs.cors = nil
	if crossorigin.StateChanging(req.Method, req.Path) {
		if werr := cs.s.cfg.Browsers.Check(req); werr != nil {
			cs.refuse(req, werr)
			return
		}
	}
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
	case bytes.Equal(path, []byte(cellPath)):
		cs.cellStatus(req)
	case bytes.Equal(path, []byte(gatewayLinkPath)):
		cs.gatewayLink(req)
	case bytes.HasPrefix(path, []byte(systemPath)):
		cs.routeSystem(req, path)
	case isDashboard(path):
		cs.serveDashboard(req)
	case !bytes.HasPrefix(path, []byte(prefix)):
		cs.refuse(req, errNoRoute)
	case bytes.Equal(path, []byte(clientLinkPath)):
		cs.clientLink(req)
	default:
		cs.routeEphemeral(req, path[len(prefix):])
	}
}

// ephemeralRoute is one route of the family (docs/server.md): its
// name in the metrics, the method it takes, the access it needs, how a cell
// serves it (D17), how a gateway meters it and its handler. RouteTable
// publishes it (routetable.go) for gateway/routes. Handlers of the two routes with a
// :queue segment get the segment, still escaped; the others get nil.
type ephemeralRoute struct {
	path   string // under prefix; for a :queue route, the part before the segment
	tail   string // for a :queue route, the part after the segment
	id     routeID
	method wire.Method
	need   identity.Level
	cell   cellRole
	meter  meter
	serve  func(cs *conn, req *wire.Request, seg []byte)
}

// meter says how a gateway in front of the broker meters a route
// (docs/routes.md, "Through a gateway"; docs/contract.md): the broker
// counts the same (queen_ephemeral_pushed_messages_total,
// queen_ephemeral_delivered_messages_total). Published by RouteTable for
// gateway/routes.
type meter uint8

const (
	meterNone meter = iota
	// meterMessages: a push meters as messages, item by item, one per
	// element of its messages array, against the tenant's rate.
	meterMessages
	// meterDeliveries: a pop meters as deliveries, the messages its answer
	// carries (X-Queen-Delivered in gateway mode).
	meterDeliveries
)

// cellRole says where a route is served in a cell of several brokers (D17).
type cellRole uint8

const (
	// servedByOwner: push, pop and ack act on a queue's contents, which
	// live on the queue's owner; a request that lands elsewhere is relayed
	// to it.
	servedByOwner cellRole = iota
	// appliedByAll: configure, reset and delete are applied by every
	// member to its own copy.
	appliedByAll
	// servedHere: the status reads answer with what the member that
	// received them owns; they are never relayed.
	servedHere
)

// fixedRoutes are the routes whose path is fixed, looked up by a scan
// (seven string comparisons cost less than hashing the path).
var fixedRoutes = []ephemeralRoute{
	{path: "push", id: routePush, method: wire.MethodPost, need: identity.Write, cell: servedByOwner, meter: meterMessages,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.push(req) }},
	{path: "pop", id: routePop, method: wire.MethodGet, need: identity.ReadWrite, cell: servedByOwner, meter: meterDeliveries,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.pop(req) }},
	{path: "ack", id: routeAck, method: wire.MethodPost, need: identity.ReadWrite, cell: servedByOwner, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.ack(req) }},
	{path: "configure", id: routeConfigure, method: wire.MethodPost, need: identity.ReadWrite, cell: appliedByAll, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.configure(req) }},
	{path: "reset", id: routeReset, method: wire.MethodPost, need: identity.ReadWrite, cell: appliedByAll, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.reset(req) }},
	{path: "queues", id: routeQueues, method: wire.MethodGet, need: identity.Read, cell: servedHere, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.listQueues(req) }},
	// An addition to the specification's eight (D19): the cell's view for
	// clients that route by owner (cellview.go). Last, so that the scan
	// finds the hot routes before it.
	{path: "cell", id: routeCellView, method: wire.MethodGet, need: identity.Read, cell: servedHere, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, _ []byte) { cs.cellViewRead(req) }},
}

// The routes with a :queue segment: DELETE queue/:queue and GET
// queues/:queue/depth.
var (
	deleteRoute = ephemeralRoute{path: "queue/", id: routeDeleteQueue, method: wire.MethodDelete, need: identity.ReadWrite, cell: appliedByAll, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, seg []byte) { cs.deleteQueue(req, req.PathUnescape(seg)) }}
	depthRoute = ephemeralRoute{path: "queues/", tail: depthTail, id: routeDepth, method: wire.MethodGet, need: identity.Read, cell: servedHere, meter: meterNone,
		serve: func(cs *conn, req *wire.Request, seg []byte) { cs.depthRead(req, req.PathUnescape(seg)) }}
)

func (cs *conn) routeEphemeral(req *wire.Request, rest []byte) {
	for i := range fixedRoutes {
		if string(rest) == fixedRoutes[i].path {
			cs.serveRoute(req, &fixedRoutes[i], nil)
			return
		}
	}
	var r *ephemeralRoute
	var seg []byte
	switch {
	case bytes.HasPrefix(rest, []byte(deleteRoute.path)):
		r, seg = &deleteRoute, rest[len(deleteRoute.path):]
	case len(rest) >= len(depthRoute.path)+len(depthRoute.tail) &&
		bytes.HasPrefix(rest, []byte(depthRoute.path)) && bytes.HasSuffix(rest, []byte(depthRoute.tail)):
		r, seg = &depthRoute, rest[len(depthRoute.path):len(rest)-len(depthRoute.tail)]
	default:
		cs.refuse(req, errNoRoute)
		return
	}
	if bytes.IndexByte(seg, '/') >= 0 {
		cs.reqRoute = r.id
		cs.refuse(req, errNoRoute)
		return
	}
	cs.serveRoute(req, r, seg)
}

// serveRoute checks req's method and identity against r and serves it. An
// empty :queue segment is still the route: it is a name that breaks the
// name rule, so it is a 400 after identity, like any other bad name
// (docs/server.md, routes and answers).
func (cs *conn) serveRoute(req *wire.Request, r *ephemeralRoute, seg []byte) {
	cs.reqRoute = r.id
	if req.Method == wire.MethodOptions && corsRead(r) && cs.preflight(req) {
		return // before identity: a preflight carries no credentials
	}
	if !cs.method(req, r.method) {
		return
	}
	if corsRead(r) {
		if o := cs.memberOrigin(req); o != nil {
			cs.cors = o.lines
		}
	}
	if !cs.admit(req, r.need) {
		return
	}
	if seg != nil && len(seg) == 0 {
		cs.refuse(req, errEmptyPathQueue)
		return
	}
	r.serve(cs, req, seg)
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
