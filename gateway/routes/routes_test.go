package routes_test

import (
	"bytes"
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/internal/routegen"
)

// routes.json is what cmd/queen-routes writes from the broker's route
// table as built now.
func TestRoutesJSONIsGenerated(t *testing.T) {
	file, err := os.ReadFile("routes.json")
	if err != nil {
		t.Fatal(err)
	}
	if want := routegen.JSON(); !bytes.Equal(file, want) {
		t.Fatalf("routes.json is not what the broker's route table gives now: run go generate ./gateway/routes (make generate)\n got %s\nwant %s", file, want)
	}
	if !bytes.Equal(routes.Default().JSON(), file) {
		t.Fatal("Default().JSON() is not routes.json")
	}
}

// The embedded table is the broker's: the same routes, in order.
func TestDefaultIsTheBrokersTable(t *testing.T) {
	d := routegen.Current()
	tb := routes.Default()
	if tb.Family() != d.Family || tb.Family() != "/api/v1/ephemeral" {
		t.Fatalf("family %q, the broker's %q", tb.Family(), d.Family)
	}
	var want []routes.Route
	for _, r := range d.Routes {
		want = append(want, routes.Route(r))
	}
	if got := tb.Routes(); !slices.Equal(got, want) || len(got) != 9 { // the eight and the cell's view (D19)
		t.Fatalf("routes\n got %v\nwant %v", got, want)
	}
	if routes.Default() != tb {
		t.Fatal("Default built the table twice")
	}
}

// The package imports the standard library only: a gateway built with it
// links nothing of the broker.
func TestImportsNothingOfTheBroker(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("imports %s: only the standard library is allowed", imp)
		}
	}
}

func TestMatchEachRoute(t *testing.T) {
	tb := routes.Default()
	cases := []struct {
		method, path string
		want         routes.Route
	}{
		{"POST", "/api/v1/ephemeral/push", routes.Route{"POST", "/api/v1/ephemeral/push", "write-only", "messages"}},
		{"GET", "/api/v1/ephemeral/pop", routes.Route{"GET", "/api/v1/ephemeral/pop", "read-write", "deliveries"}},
		{"GET", "/api/v1/ephemeral/pop?queue=q&batch=10", routes.Route{"GET", "/api/v1/ephemeral/pop", "read-write", "deliveries"}},
		{"POST", "/api/v1/ephemeral/ack", routes.Route{"POST", "/api/v1/ephemeral/ack", "read-write", "none"}},
		{"POST", "/api/v1/ephemeral/configure", routes.Route{"POST", "/api/v1/ephemeral/configure", "read-write", "none"}},
		{"POST", "/api/v1/ephemeral/reset", routes.Route{"POST", "/api/v1/ephemeral/reset", "read-write", "none"}},
		{"DELETE", "/api/v1/ephemeral/queue/orders", routes.Route{"DELETE", "/api/v1/ephemeral/queue/:queue", "read-write", "none"}},
		{"DELETE", "/api/v1/ephemeral/queue/a%2Fb", routes.Route{"DELETE", "/api/v1/ephemeral/queue/:queue", "read-write", "none"}},
		{"GET", "/api/v1/ephemeral/queues", routes.Route{"GET", "/api/v1/ephemeral/queues", "read-only", "none"}},
		{"GET", "/api/v1/ephemeral/queues?x=1", routes.Route{"GET", "/api/v1/ephemeral/queues", "read-only", "none"}},
		{"GET", "/api/v1/ephemeral/queues/orders/depth", routes.Route{"GET", "/api/v1/ephemeral/queues/:queue/depth", "read-only", "none"}},
		{"GET", "/api/v1/ephemeral/queues/depth/depth", routes.Route{"GET", "/api/v1/ephemeral/queues/:queue/depth", "read-only", "none"}},
		{"GET", "/api/v1/ephemeral/queues/queues/depth?group=g", routes.Route{"GET", "/api/v1/ephemeral/queues/:queue/depth", "read-only", "none"}},
	}
	for _, c := range cases {
		got, ok := tb.Match(c.method, []byte(c.path))
		if !ok || got != c.want {
			t.Errorf("%s %s: %v %v, want %v", c.method, c.path, got, ok, c.want)
		}
	}
}

func TestMatchRefuses(t *testing.T) {
	tb := routes.Default()
	for _, c := range []struct{ why, method, path string }{
		{"wrong method", "GET", "/api/v1/ephemeral/push"},
		{"wrong method", "POST", "/api/v1/ephemeral/pop"},
		{"wrong method", "GET", "/api/v1/ephemeral/queue/q"},
		{"wrong method", "DELETE", "/api/v1/ephemeral/queues/q/depth"},
		{"wrong method", "DELETE", "/api/v1/ephemeral/queues"},
		{"method is case-sensitive", "post", "/api/v1/ephemeral/push"},
		{"extra segment", "POST", "/api/v1/ephemeral/push/x"},
		{"extra segment", "DELETE", "/api/v1/ephemeral/queue/a/b"},
		{"extra segment", "GET", "/api/v1/ephemeral/queues/q/depth/x"},
		{"extra segment", "GET", "/api/v1/ephemeral/queues/a/b/depth"},
		{"missing segment", "GET", "/api/v1/ephemeral/queues/q"},
		{"missing segment", "DELETE", "/api/v1/ephemeral/queue"},
		{"empty :queue", "DELETE", "/api/v1/ephemeral/queue/"},
		{"empty :queue", "GET", "/api/v1/ephemeral/queues//depth"},
		{"empty :queue", "DELETE", "/api/v1/ephemeral/queue/?x=1"},
		{"empty :queue", "DELETE", "/api/v1/ephemeral/queue//"},
		{"trailing slash", "POST", "/api/v1/ephemeral/push/"},
		{"trailing slash", "GET", "/api/v1/ephemeral/queues/"},
		{"trailing slash", "GET", "/api/v1/ephemeral/queues/q/depth/"},
		{"trailing slash", "DELETE", "/api/v1/ephemeral/queue/q/"},
		{"double slash", "POST", "/api/v1/ephemeral//push"},
		{"unknown path", "POST", "/api/v1/ephemeral/publish"},
		{"unknown path", "GET", "/api/v1/ephemeral/"},
		{"unknown path", "GET", "/api/v1/ephemeral"},
		{"unknown path", "POST", "/api/v1/ephemeralpush"},
		{"unknown path", "POST", "/api/v1/ephemeralx/push"},
		{"unknown path", "GET", "/health"},
		{"unknown path", "GET", "/metrics"},
		{"unknown path", "GET", "/"},
		{"unknown path", "GET", ""},
		{"unknown path", "POST", "/api/v1/system/ephemeral"},
		{"case", "POST", "/API/v1/ephemeral/push"},
	} {
		if r, ok := tb.Match(c.method, []byte(c.path)); ok {
			t.Errorf("%s: %s %q matched %v", c.why, c.method, c.path, r)
		}
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	tb := routes.Default()
	paths := [][]byte{
		[]byte("/api/v1/ephemeral/push"), []byte("/api/v1/ephemeral/queues/orders/depth"),
		[]byte("/api/v1/ephemeral/queue/orders"), []byte("/api/v1/ephemeral/nope"),
	}
	if n := testing.AllocsPerRun(1000, func() {
		for _, p := range paths {
			tb.Match("GET", p)
			tb.Match("DELETE", p)
		}
	}); n != 0 {
		t.Fatalf("Match allocated %v times", n)
	}
}

// An older table (here, before the depth read) is what a gateway that
// predates a route would use: the route is none of its.
func TestParseAnOlderTable(t *testing.T) {
	tb, err := routes.Parse([]byte(older))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Match("GET", []byte("/api/v1/ephemeral/queues/q/depth")); ok {
		t.Fatal("the older table matched the depth read")
	}
	if r, ok := tb.Match("POST", []byte("/api/v1/ephemeral/push")); !ok || r.Meter != routes.MeterMessages {
		t.Fatalf("push: %v %v", r, ok)
	}
	if string(tb.JSON()) != older {
		t.Fatalf("JSON is not the document: %s", tb.JSON())
	}
	name := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(name, []byte(older), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(routes.EnvFile, name)
	fromEnv, err := routes.FromEnv()
	if err != nil || len(fromEnv.Routes()) != 2 {
		t.Fatalf("FromEnv with %s set: %v, %v", routes.EnvFile, fromEnv, err)
	}
	t.Setenv(routes.EnvFile, "")
	if d, err := routes.FromEnv(); err != nil || d != routes.Default() {
		t.Fatalf("FromEnv unset: %v, %v", d, err)
	}
	t.Setenv(routes.EnvFile, filepath.Join(t.TempDir(), "absent.json"))
	if _, err := routes.FromEnv(); err == nil {
		t.Fatal("FromEnv read a file that does not exist")
	}
}

const older = `{"family": "/api/v1/ephemeral", "routes": [
  {"method": "POST", "path": "/api/v1/ephemeral/push", "access": "write-only", "meter": "messages"},
  {"method": "GET", "path": "/api/v1/ephemeral/pop", "access": "read-write", "meter": "deliveries"}
]}`

func TestParseRefuses(t *testing.T) {
	route := func(method, path, access, meter string) string {
		return `{"method":"` + method + `","path":"` + path + `","access":"` + access + `","meter":"` + meter + `"}`
	}
	doc := func(routes ...string) string {
		return `{"family":"/api/v1/ephemeral","routes":[` + strings.Join(routes, ",") + `]}`
	}
	ok := route("POST", "/api/v1/ephemeral/push", "write-only", "messages")
	if _, err := routes.Parse([]byte(doc(ok))); err != nil {
		t.Fatalf("a good table: %v", err)
	}
	for why, b := range map[string]string{
		"unknown access":       doc(route("POST", "/api/v1/ephemeral/push", "write", "messages")),
		"empty access":         doc(route("POST", "/api/v1/ephemeral/push", "", "messages")),
		"access in capitals":   doc(route("POST", "/api/v1/ephemeral/push", "Write-Only", "messages")),
		"unknown meter":        doc(route("POST", "/api/v1/ephemeral/push", "write-only", "bytes")),
		"empty meter":          doc(route("POST", "/api/v1/ephemeral/push", "write-only", "")),
		"unknown method":       doc(route("FETCH", "/api/v1/ephemeral/push", "write-only", "messages")),
		"method in lowercase":  doc(route("post", "/api/v1/ephemeral/push", "write-only", "messages")),
		"path outside":         doc(route("GET", "/health", "read-only", "none")),
		"path is the family":   doc(route("GET", "/api/v1/ephemeral", "read-only", "none")),
		"trailing slash":       doc(route("GET", "/api/v1/ephemeral/queues/", "read-only", "none")),
		"empty segment":        doc(route("GET", "/api/v1/ephemeral/queues//depth", "read-only", "none")),
		"query in the path":    doc(route("GET", "/api/v1/ephemeral/pop?queue=:queue", "read-write", "none")),
		"unnamed parameter":    doc(route("DELETE", "/api/v1/ephemeral/queue/:", "read-write", "none")),
		"a route twice":        doc(ok, ok),
		"no routes":            doc(),
		"unknown route key":    doc(`{"method":"POST","path":"/api/v1/ephemeral/push","access":"write-only","meter":"messages","cell":"owner"}`),
		"missing meter":        doc(`{"method":"POST","path":"/api/v1/ephemeral/push","access":"write-only"}`),
		"unknown top key":      `{"family":"/api/v1/ephemeral","version":2,"routes":[` + ok + `]}`,
		"no family":            `{"routes":[` + ok + `]}`,
		"family with slash":    `{"family":"/api/v1/ephemeral/","routes":[` + ok + `]}`,
		"relative family":      `{"family":"api/v1/ephemeral","routes":[` + ok + `]}`,
		"data after":           doc(ok) + `{}`,
		"not JSON":             `routes`,
		"empty":                ``,
		"routes not an array":  `{"family":"/api/v1/ephemeral","routes":{}}`,
		"access not a string":  `{"family":"/api/v1/ephemeral","routes":[{"method":"POST","path":"/api/v1/ephemeral/push","access":2,"meter":"none"}]}`,
		"truncated":            doc(ok)[:20],
		"null document":        `null`,
		"array document":       `[` + ok + `]`,
		"garbage after spaces": doc(ok) + "\n x",
	} {
		if tb, err := routes.Parse([]byte(b)); err == nil {
			t.Errorf("%s: accepted %s as %v", why, b, tb.Routes())
		} else if !errors.Is(err, routes.ErrInvalid) {
			t.Errorf("%s: %v does not wrap ErrInvalid", why, err)
		}
	}
}

// Parameters anywhere in a pattern, several in one.
func TestMatchOtherPatterns(t *testing.T) {
	tb, err := routes.Parse([]byte(`{"family":"/f","routes":[
		{"method":"GET","path":"/f/:a","access":"read-only","meter":"none"},
		{"method":"GET","path":"/f/x/:a/y/:b","access":"read-only","meter":"none"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/f/q": "/f/:a", "/f/x": "/f/:a", "/f/x/1/y/2": "/f/x/:a/y/:b",
		"/f/": "", "/f/q/": "", "/f/x/1/y/": "", "/f/x//y/2": "", "/f/x/1/z/2": "", "/f/x/1/y/2/3": "",
		"/f//": "", "/f/x/1/y//": "",
	} {
		r, ok := tb.Match("GET", []byte(path))
		if r.Path != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", path, r.Path, ok, want)
		}
	}
}
