package server

import (
	"testing"

	"github.com/queenmq/ephemeral/wire"
)

// TestRouteTable pins the family's route table to the route file and D17:
// each route's method, the access it needs, and how a cell serves it
// (push, pop and ack by the queue's owner; configure, reset and delete by
// every member; the two status reads by the member they land on).
func TestRouteTable(t *testing.T) {
	type want struct {
		method wire.Method
		need   Access
		cell   cellRole
	}
	wants := map[string]want{
		"push":      {wire.MethodPost, accWrite, servedByOwner},
		"pop":       {wire.MethodGet, accReadWrite, servedByOwner},
		"ack":       {wire.MethodPost, accReadWrite, servedByOwner},
		"configure": {wire.MethodPost, accReadWrite, appliedByAll},
		"reset":     {wire.MethodPost, accReadWrite, appliedByAll},
		"queues":    {wire.MethodGet, accRead, servedHere},
		"queue/":    {wire.MethodDelete, accReadWrite, appliedByAll},
		"queues/":   {wire.MethodGet, accRead, servedHere},
	}
	all := append(append([]ephemeralRoute(nil), fixedRoutes...), deleteRoute, depthRoute)
	if len(all) != len(wants) {
		t.Fatalf("%d routes in the table, want %d", len(all), len(wants))
	}
	for _, r := range all {
		w, ok := wants[r.path]
		if !ok {
			t.Errorf("route %q is not in the route file", r.path)
			continue
		}
		if r.method != w.method || r.need != w.need || r.cell != w.cell || r.serve == nil {
			t.Errorf("route %q: method %v need %v cell %v, want %v %v %v and a handler", r.path, r.method, r.need, r.cell, w.method, w.need, w.cell)
		}
	}
}
