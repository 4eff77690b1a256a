package server

import (
	"testing"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// TestRouteTable pins the family's route table to the route file and D17:
// each route's method, the access it needs, and how a cell serves it
// (push, pop and ack by the queue's owner; configure, reset and delete by
// every member; the status reads, the cell's view among them, by the member
// they land on).
func TestRouteTable(t *testing.T) {
	type want struct {
		method wire.Method
		need   identity.Level
		cell   cellRole
	}
	wants := map[string]want{
		"push":      {wire.MethodPost, identity.Write, servedByOwner},
		"pop":       {wire.MethodGet, identity.ReadWrite, servedByOwner},
		"ack":       {wire.MethodPost, identity.ReadWrite, servedByOwner},
		"configure": {wire.MethodPost, identity.ReadWrite, appliedByAll},
		"reset":     {wire.MethodPost, identity.ReadWrite, appliedByAll},
		"queues":    {wire.MethodGet, identity.Read, servedHere},
		"queue/":    {wire.MethodDelete, identity.ReadWrite, appliedByAll},
		"queues/":   {wire.MethodGet, identity.Read, servedHere},
		"cell":      {wire.MethodGet, identity.Read, servedHere}, // the addition for owner-aware clients (D19)
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
