// Package routegen writes the gateway's route table, gateway/routes's
// routes.json, from the broker's own (server.RouteTable). cmd/queen-routes
// runs it (go generate ./gateway/routes); gateway/routes's tests compare
// the file with what it would write now.
package routegen

import (
	"encoding/json"

	"github.com/queenmq/ephemeral/server"
)

// Document is routes.json: the family's path and its routes, in the
// broker's table's order.
type Document struct {
	Family string  `json:"family"`
	Routes []Route `json:"routes"`
}

// Route is one route of the document.
type Route struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Access string `json:"access"`
	Meter  string `json:"meter"`
}

// Current is the document of the broker's route table as built.
func Current() Document {
	d := Document{Family: server.RouteFamily}
	for _, r := range server.RouteTable() {
		d.Routes = append(d.Routes, Route(r))
	}
	return d
}

// JSON is Current as routes.json holds it: indented by two spaces, with a
// trailing newline.
func JSON() []byte {
	b, err := json.MarshalIndent(Current(), "", "  ")
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return append(b, '\n')
}
