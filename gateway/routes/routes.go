// Package routes classifies the requests of the broker's ephemeral family,
// /api/v1/ephemeral/*, for a gateway in front of the broker: which route a
// request is, the access level it needs (D14) and how it is metered
// (docs/routes.md, "Through a gateway").
//
// The table is routes.json, embedded: generated from the broker's own route
// table (server.RouteTable) by cmd/queen-routes, so it cannot drift from
// what the broker serves (a test fails while the file is stale: run
// `go generate ./gateway/routes`). The package imports nothing of the
// broker: a gateway built with it does not link the server.
//
// Another table, an older one say (to reproduce a gateway that predates a
// route), is read with Parse, Load or FromEnv (QUEEN_GATEWAY_ROUTES_FILE).
//
// A Table is read-only once built and safe for concurrent use.
package routes

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	_ "embed"
)

//go:generate go run ../../cmd/queen-routes -o routes.json

//go:embed routes.json
var embedded []byte

// EnvFile names the environment variable FromEnv reads: the path of a
// routes.json to use instead of the embedded one.
const EnvFile = "QUEEN_GATEWAY_ROUTES_FILE"

// The access levels a route may need (D14), as X-Queen-Access spells them.
// Levels nest: admin ⊃ read-write ⊃ {read-only, write-only}.
const (
	AccessReadOnly  = "read-only"
	AccessWriteOnly = "write-only"
	AccessReadWrite = "read-write"
	AccessAdmin     = "admin"
)

// How a route is metered.
const (
	// MeterMessages: a push meters as messages, one per item of its
	// messages array.
	MeterMessages = "messages"
	// MeterDeliveries: a pop meters as deliveries, the messages its answer
	// carries (in gateway mode the broker says how many in the answer's
	// X-Queen-Delivered header).
	MeterDeliveries = "deliveries"
	// MeterNone: not metered.
	MeterNone = "none"
)

// Route is one route of the table.
type Route struct {
	Method string `json:"method"` // "GET", "POST", "DELETE", ...
	// Path is the route's pattern: the whole path, a segment starting with
	// ':' (":queue") standing for one non-empty path segment, e.g.
	// "/api/v1/ephemeral/queues/:queue/depth".
	Path   string `json:"path"`
	Access string `json:"access"` // the least level it needs: AccessReadOnly, ...
	Meter  string `json:"meter"`  // MeterMessages, MeterDeliveries or MeterNone
}

// Table is a route table.
type Table struct {
	family string    // "/api/v1/ephemeral"
	routes []Route   // in the document's order
	pats   []pattern // per route, its path after family + "/"
	doc    []byte    // the document as given
}

// pattern is a route's path after the family and its '/': the literal
// text before its first parameter, then the segments from that parameter
// on (nil for a path without a parameter, which lit is whole).
type pattern struct {
	lit  string
	segs []segment
}

// segment is one segment of a pattern: a literal, or a parameter (any one
// non-empty segment).
type segment struct {
	lit   string
	param bool
}

// document is routes.json.
type document struct {
	Family string  `json:"family"`
	Routes []Route `json:"routes"`
}

var defaultTable = sync.OnceValue(func() *Table {
	t, err := Parse(embedded)
	if err != nil {
		panic("gateway/routes: the embedded routes.json: " + err.Error())
	}
	return t
})

// Default returns the embedded table, the routes of the broker this
// package was generated from. Every call returns the same Table.
func Default() *Table { return defaultTable() }

// Load reads and parses the table in the file name.
func Load(name string) (*Table, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// FromEnv returns the table in the file named by QUEEN_GATEWAY_ROUTES_FILE
// when it is set and not empty, else Default.
func FromEnv() (*Table, error) {
	if name := os.Getenv(EnvFile); name != "" {
		return Load(name)
	}
	return Default(), nil
}

// ErrInvalid is wrapped by every refusal of Parse.
var ErrInvalid = errors.New("invalid route table")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Parse reads a table in the form of routes.json:
//
//	{"family": "/api/v1/ephemeral", "routes": [{"method", "path", "access", "meter"}, ...]}
//
// It is strict: an unknown key, a missing or empty field, an access level
// or a meter it does not know, a method that is not an HTTP method, a path
// outside the family (or with an empty segment, a trailing slash, a query,
// a parameter without a name), a route given twice, no route at all, or
// anything after the document is refused with an error wrapping
// ErrInvalid.
func Parse(b []byte) (*Table, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d document
	if err := dec.Decode(&d); err != nil {
		return nil, invalid("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("data after the document")
	}
	if !strings.HasPrefix(d.Family, "/") || strings.HasSuffix(d.Family, "/") ||
		strings.Contains(d.Family, "//") || strings.ContainsAny(d.Family, "?#:") {
		return nil, invalid("family %q: want a path such as /api/v1/ephemeral", d.Family)
	}
	if len(d.Routes) == 0 {
		return nil, invalid("no routes")
	}
	t := &Table{family: d.Family, routes: d.Routes, doc: slices.Clone(b)}
	for i, r := range d.Routes {
		if !slices.Contains(methods, r.Method) {
			return nil, invalid("route %d: method %q", i, r.Method)
		}
		switch r.Access {
		case AccessReadOnly, AccessWriteOnly, AccessReadWrite, AccessAdmin:
		default:
			return nil, invalid("route %d (%s %s): access %q: want read-only, write-only, read-write or admin", i, r.Method, r.Path, r.Access)
		}
		switch r.Meter {
		case MeterMessages, MeterDeliveries, MeterNone:
		default:
			return nil, invalid("route %d (%s %s): meter %q: want messages, deliveries or none", i, r.Method, r.Path, r.Meter)
		}
		rest, ok := strings.CutPrefix(r.Path, d.Family+"/")
		if !ok {
			return nil, invalid("route %d: path %q is not under the family %s", i, r.Path, d.Family)
		}
		if strings.ContainsAny(rest, "?#") {
			return nil, invalid("route %d: path %q has a query or a fragment", i, r.Path)
		}
		pat := pattern{lit: rest}
		off := 0 // where the segment s starts in rest
		for s := range strings.SplitSeq(rest, "/") {
			switch {
			case s == "":
				return nil, invalid("route %d: path %q has an empty segment", i, r.Path)
			case s == ":":
				return nil, invalid("route %d: path %q has a parameter without a name", i, r.Path)
			case s[0] == ':':
				if pat.segs == nil {
					pat.lit = rest[:off]
				}
				pat.segs = append(pat.segs, segment{param: true})
			case pat.segs != nil:
				pat.segs = append(pat.segs, segment{lit: s})
			}
			off += len(s) + 1
		}
		for j := range i {
			if d.Routes[j].Method == r.Method && d.Routes[j].Path == r.Path {
				return nil, invalid("route %d: %s %s is given twice", i, r.Method, r.Path)
			}
		}
		t.pats = append(t.pats, pat)
	}
	return t, nil
}

// Family is the path every route starts with (followed by '/'), e.g.
// "/api/v1/ephemeral".
func (t *Table) Family() string { return t.family }

// Routes returns the table's routes in order (a copy).
func (t *Table) Routes() []Route { return slices.Clone(t.routes) }

// JSON returns the document the table was read from, byte for byte (for
// Default, the embedded routes.json), as a gateway serves it. The caller
// must not modify it.
func (t *Table) JSON() []byte { return t.doc[:len(t.doc):len(t.doc)] }

// Match returns the route a request with method and path is, and false
// when it is none: a path outside the table, a path of the table with
// another method, a parameter segment that is empty, a trailing slash or
// an extra segment. path is the request target's path, still escaped
// ("%2F" inside a queue name stays within its segment); from a '?' on it is
// ignored, so a target with its query string matches too. It does not
// allocate.
func (t *Table) Match(method string, path []byte) (Route, bool) {
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	f := t.family
	if len(path) <= len(f) || string(path[:len(f)]) != f || path[len(f)] != '/' {
		return Route{}, false
	}
	rest := path[len(f)+1:]
	for i := range t.routes {
		p := &t.pats[i]
		if t.routes[i].Method != method {
			continue
		}
		if p.segs == nil { // no parameter: one comparison
			if string(rest) == p.lit {
				return t.routes[i], true
			}
			continue
		}
		if len(rest) > len(p.lit) && string(rest[:len(p.lit)]) == p.lit && matchSegments(p.segs, rest[len(p.lit):]) {
			return t.routes[i], true
		}
	}
	return Route{}, false
}

// matchSegments reports whether p is exactly the segments segs: a
// parameter is any one segment but an empty one.
func matchSegments(segs []segment, p []byte) bool {
	for i := range segs {
		if i > 0 {
			if len(p) == 0 || p[0] != '/' {
				return false
			}
			p = p[1:]
		}
		j := bytes.IndexByte(p, '/')
		if j < 0 {
			j = len(p)
		}
		if segs[i].param {
			if j == 0 {
				return false
			}
		} else if string(p[:j]) != segs[i].lit {
			return false
		}
		p = p[j:]
	}
	return len(p) == 0
}
