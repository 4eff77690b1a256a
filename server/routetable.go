package server

import "strings"

// RouteFamily is the path every route of the ephemeral family starts with
// (followed by '/').
const RouteFamily = "/api/v1/ephemeral"

// RouteInfo describes one route of the ephemeral family for a gateway in
// front of the broker: what gateway/routes publishes (routes.json,
// generated from RouteTable by cmd/queen-routes).
type RouteInfo struct {
	Method string // "GET", "POST" or "DELETE"
	// Path is the route's pattern: the whole path, with ":queue" for the
	// one segment that names a queue, e.g. "/api/v1/ephemeral/queue/:queue".
	Path string
	// Access is the least level the route needs (D14): "write-only"
	// (push), "read-write" (pop, ack, configure, reset, delete) or
	// "read-only" (the two status reads). Levels nest: admin holds all.
	Access string
	// Meter is how the route is metered: "messages" (push, one per item),
	// "deliveries" (pop, the messages its answer carries) or "none".
	Meter string
}

// RouteTable returns the ephemeral family's routes as the broker serves
// them (fixedRoutes, then the two :queue routes), a new slice on every
// call.
func RouteTable() []RouteInfo {
	rs := make([]*ephemeralRoute, 0, len(fixedRoutes)+2)
	for i := range fixedRoutes {
		rs = append(rs, &fixedRoutes[i])
	}
	rs = append(rs, &deleteRoute, &depthRoute)
	out := make([]RouteInfo, len(rs))
	for i, r := range rs {
		out[i] = RouteInfo{Method: r.method.String(), Path: r.pattern(), Access: r.need.String(), Meter: r.meter.String()}
	}
	return out
}

// pattern is r's path with ":queue" for its segment.
func (r *ephemeralRoute) pattern() string {
	if strings.HasSuffix(r.path, "/") {
		return prefix + r.path + ":queue" + r.tail
	}
	return prefix + r.path
}

func (m meter) String() string {
	switch m {
	case meterMessages:
		return "messages"
	case meterDeliveries:
		return "deliveries"
	}
	return "none"
}
