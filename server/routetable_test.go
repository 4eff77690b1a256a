package server

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// RouteTable publishes the family as docs/routes.md lists it, each route
// with the access D14 gives it and the metering of docs/routes.md's
// gateway section; and each pattern, with a queue name for its segment,
// is routed by dispatch to that route, which takes that method only.
func TestRouteTablePublishesTheFamily(t *testing.T) {
	want := []RouteInfo{
		{"POST", "/api/v1/ephemeral/push", "write-only", "messages"},
		{"GET", "/api/v1/ephemeral/pop", "read-write", "deliveries"},
		{"POST", "/api/v1/ephemeral/ack", "read-write", "none"},
		{"POST", "/api/v1/ephemeral/configure", "read-write", "none"},
		{"POST", "/api/v1/ephemeral/reset", "read-write", "none"},
		{"GET", "/api/v1/ephemeral/queues", "read-only", "none"},
		{"GET", "/api/v1/ephemeral/cell", "read-only", "none"},
		{"DELETE", "/api/v1/ephemeral/queue/:queue", "read-write", "none"},
		{"GET", "/api/v1/ephemeral/queues/:queue/depth", "read-only", "none"},
	}
	ids := []routeID{routePush, routePop, routeAck, routeConfigure, routeReset, routeQueues, routeCellView, routeDeleteQueue, routeDepth}
	got := RouteTable()
	if !slices.Equal(got, want) {
		t.Fatalf("RouteTable:\n got %v\nwant %v", got, want)
	}
	if prefix != RouteFamily+"/" {
		t.Fatalf("RouteFamily %q does not name the prefix %q", RouteFamily, prefix)
	}

	e := engine.New(engine.Config{})
	defer e.Close()
	// In gateway mode without the gateway's headers, a request routed to
	// a route with its method is refused 401 at identity, before any
	// handler runs.
	s := New(Config{Engine: e, Store: openStore(t), Auth: gatewayAuth(t)})
	cs := &conn{s: s, ls: new(loopState)}
	cs.sink = popSink{cs: cs, e: e}
	serve := func(method, path string) *wire.Request {
		var p wire.Parser
		req, _, err := p.Parse([]byte(method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"))
		if err != nil || req == nil {
			t.Fatalf("parse %s %s: %v", method, path, err)
		}
		cs.out = cs.out[:0]
		cs.dispatch(req)
		return req
	}
	for i, r := range got {
		if !strings.HasPrefix(r.Path, RouteFamily+"/") {
			t.Errorf("%s: not under %s", r.Path, RouteFamily)
		}
		path := strings.ReplaceAll(r.Path, ":queue", "q")
		serve(r.Method, path)
		if cs.reqRoute != ids[i] || !bytes.HasPrefix(cs.out, []byte("HTTP/1.1 401 ")) {
			t.Errorf("%s %s: routed to %v, answered %.40q", r.Method, path, cs.reqRoute, cs.out)
		}
		other := "PUT"
		serve(other, path)
		if !bytes.HasPrefix(cs.out, []byte("HTTP/1.1 405 ")) || !bytes.Contains(cs.out, []byte("Allow: "+r.Method+"\r\n")) {
			t.Errorf("%s %s: answered %.60q", other, path, cs.out)
		}
		if lvl, ok := identity.ParseLevel([]byte(r.Access)); !ok || lvl.String() != r.Access {
			t.Errorf("%s %s: access %q is no level", r.Method, r.Path, r.Access)
		}
	}
}
