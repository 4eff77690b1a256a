package docs

// docs/openapi.yaml, the OpenAPI 3.1 description of the broker's routes, is
// held to three things: it is a well-formed OpenAPI 3.1 document whose
// schemas are valid JSON Schema 2020-12 (TestOpenAPIDocument); it names
// every route of the broker's route table with the access the table gives
// it, every refusal of docs/routes.md, and nothing else
// (TestOpenAPIRouteTable, TestOpenAPIRefusals); and a real broker's answers,
// successes and refusals, are the statuses, codes and bodies it documents
// (TestOpenAPIRealAnswers).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/internal/jwtmint"
	"github.com/queenmq/ephemeral/server"
)

const openapiURL = "file:///openapi.json" // the document's URL for the schema compiler

// apiDoc is docs/openapi.yaml, parsed.
type apiDoc struct {
	raw      map[string]any // as JSON would give it (json.Number for numbers)
	compiler *jsonschema.Compiler
}

func loadAPIDoc(t *testing.T) *apiDoc {
	t.Helper()
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var y any
	if err := yaml.Unmarshal(text, &y); err != nil {
		t.Fatalf("docs/openapi.yaml is not YAML: %v", err)
	}
	// Through JSON: a map with a key that is not a string (an unquoted
	// status code) fails here, as it would in a JSON tool.
	j, err := json.Marshal(y)
	if err != nil {
		t.Fatalf("docs/openapi.yaml is not JSON-compatible (quote every status code): %v", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	raw, ok := v.(map[string]any)
	if !ok {
		t.Fatal("docs/openapi.yaml is not a mapping")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(openapiURL, raw); err != nil {
		t.Fatal(err)
	}
	return &apiDoc{raw: raw, compiler: c}
}

// obj is v as a JSON object, or nil.
func obj(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// pointer answers the value at the JSON pointer p ("#/a/b") of the document.
func (d *apiDoc) pointer(p string) (any, bool) {
	if !strings.HasPrefix(p, "#/") {
		return nil, false
	}
	var v any = d.raw
	for _, tok := range strings.Split(p[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m := obj(v)
		if m == nil {
			return nil, false
		}
		var ok bool
		if v, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return v, true
}

// deref follows v's $ref, if it has one, and answers the object and its
// pointer (ptr when v is not a reference).
func (d *apiDoc) deref(v any, ptr string) (map[string]any, string) {
	m := obj(v)
	for m != nil {
		ref, ok := m["$ref"].(string)
		if !ok {
			break
		}
		t, found := d.pointer(ref)
		if !found {
			return nil, ref
		}
		m, ptr = obj(t), ref
	}
	return m, ptr
}

func escapePtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// operations answers every (METHOD, path template) of the document.
func (d *apiDoc) operations() map[[2]string]map[string]any {
	out := map[[2]string]map[string]any{}
	for path, item := range obj(d.raw["paths"]) {
		for _, m := range methods {
			if op := obj(obj(item)[m]); op != nil {
				out[[2]string{strings.ToUpper(m), path}] = op
			}
		}
	}
	return out
}

// TestOpenAPIDocument checks the document's structure as OpenAPI 3.1 has
// it: the version, the info, every path and operation and their
// parameters (each {name} of a path declared, and no other), every
// response keyed by a status with a description, unique operation ids,
// security requirements naming declared schemes, every $ref resolving,
// and every schema compiling as JSON Schema 2020-12 (validated against its
// meta-schema by the compiler).
func TestOpenAPIDocument(t *testing.T) {
	d := loadAPIDoc(t)
	if v, _ := d.raw["openapi"].(string); !regexp.MustCompile(`^3\.1\.\d+$`).MatchString(v) {
		t.Errorf("openapi is %q, want 3.1.x", v)
	}
	info := obj(d.raw["info"])
	for _, k := range []string{"title", "version"} {
		if s, _ := info[k].(string); s == "" {
			t.Errorf("info.%s is missing", k)
		}
	}
	known := map[string]bool{"parameters": true, "summary": true, "description": true, "servers": true}
	for _, m := range methods {
		known[m] = true
	}
	schemes := obj(obj(d.raw["components"])["securitySchemes"])
	checkSecurity := func(where string, v any) {
		reqs, _ := v.([]any)
		for _, r := range reqs {
			for name := range obj(r) {
				if schemes[name] == nil {
					t.Errorf("%s: security names %q, which components.securitySchemes does not declare", where, name)
				}
			}
		}
	}
	checkSecurity("the document", d.raw["security"])
	ids := map[string]string{}
	paramRE := regexp.MustCompile(`\{([^}]+)\}`)
	paths := obj(d.raw["paths"])
	if len(paths) == 0 {
		t.Fatal("no paths")
	}
	for path, item := range paths {
		if !strings.HasPrefix(path, "/") {
			t.Errorf("path %q does not start with /", path)
		}
		var inTemplate []string
		for _, m := range paramRE.FindAllStringSubmatch(path, -1) {
			inTemplate = append(inTemplate, m[1])
		}
		pathParams := d.pathParams(t, path, obj(item)["parameters"])
		for key := range obj(item) {
			if !known[key] {
				t.Errorf("%s: %q is not a field of a path item", path, key)
			}
		}
		nops := 0
		for _, m := range methods {
			op := obj(obj(item)[m])
			if op == nil {
				continue
			}
			nops++
			where := strings.ToUpper(m) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q is %s's too", where, id, other)
			}
			ids[id] = where
			checkSecurity(where, op["security"])
			declared := slices.Clone(pathParams)
			declared = append(declared, d.pathParams(t, where, op["parameters"])...)
			sort.Strings(declared)
			want := slices.Clone(inTemplate)
			sort.Strings(want)
			if !slices.Equal(slices.Compact(declared), want) {
				t.Errorf("%s: path parameters declared %v, the template has %v", where, declared, want)
			}
			if rb := op["requestBody"]; rb != nil {
				if body, ptr := d.deref(rb, ""); body == nil || obj(body["content"]) == nil {
					t.Errorf("%s: requestBody %s has no content", where, ptr)
				}
			}
			responses := obj(op["responses"])
			if len(responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			for status, r := range responses {
				if n, err := strconv.Atoi(status); (err != nil || n < 100 || n > 599) && status != "default" {
					t.Errorf("%s: response key %q is not a status", where, status)
				}
				resp, ptr := d.deref(r, "")
				if resp == nil {
					t.Errorf("%s %s: the response %s does not resolve", where, status, ptr)
					continue
				}
				if s, _ := resp["description"].(string); s == "" {
					t.Errorf("%s %s: the response has no description", where, status)
				}
			}
		}
		if nops == 0 {
			t.Errorf("%s: no operation", path)
		}
	}
	// Every $ref resolves.
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				if _, found := d.pointer(ref); !found {
					t.Errorf("%s: $ref %q does not resolve", at, ref)
				}
			}
			for k, e := range x {
				walk(e, at+"/"+escapePtr(k))
			}
		case []any:
			for i, e := range x {
				walk(e, at+"/"+strconv.Itoa(i))
			}
		}
	}
	walk(d.raw, "#")
	// Every schema compiles.
	for name := range obj(obj(d.raw["components"])["schemas"]) {
		if _, err := d.compiler.Compile(openapiURL + "#/components/schemas/" + escapePtr(name)); err != nil {
			t.Errorf("components.schemas.%s: %v", name, err)
		}
	}
}

// pathParams answers the names of the path parameters among params (a
// path item's or an operation's), each required as OpenAPI demands.
func (d *apiDoc) pathParams(t *testing.T, where string, params any) []string {
	list, _ := params.([]any)
	var out []string
	for _, p := range list {
		m, ptr := d.deref(p, "")
		if m == nil {
			t.Errorf("%s: parameter %s does not resolve", where, ptr)
			continue
		}
		name, _ := m["name"].(string)
		in, _ := m["in"].(string)
		if name == "" || !slices.Contains([]string{"path", "query", "header", "cookie"}, in) {
			t.Errorf("%s: parameter %v has no name or no valid in", where, m)
		}
		if m["schema"] == nil && m["content"] == nil {
			t.Errorf("%s: parameter %s has no schema", where, name)
		}
		if in == "path" {
			if req, _ := m["required"].(bool); !req {
				t.Errorf("%s: path parameter %s is not required", where, name)
			}
			out = append(out, name)
		}
	}
	return out
}

// The family's route the document adds to the table: the link's upgrade
// is no route of the table by design (a gateway answers it as its own).
const linkPath = server.RouteFamily + "/link"

// templateOf is a route table pattern as an OpenAPI path: {queue} for :queue.
func templateOf(pattern string) string { return strings.ReplaceAll(pattern, ":queue", "{queue}") }

// accessRE reads the access an operation's description names, as
// docs/routes.md writes it: "Access *write*".
var accessRE = regexp.MustCompile(`[Aa]ccess \*(write|read-write|read)\*`)

var accessOf = map[string]string{"write": "write-only", "read-write": "read-write", "read": "read-only"}

// TestOpenAPIRouteTable checks the document's family against the broker's
// route table (server.RouteTable, which gateway/routes is generated from):
// every route of the table is in the document, with the access the table
// gives it, and every family route of the document is in the table, but
// for the link's upgrade (never in the table).
func TestOpenAPIRouteTable(t *testing.T) {
	d := loadAPIDoc(t)
	ops := d.operations()
	inTable := map[[2]string]bool{}
	for _, r := range server.RouteTable() {
		key := [2]string{r.Method, templateOf(r.Path)}
		inTable[key] = true
		op := ops[key]
		if op == nil {
			t.Errorf("%s %s is in the route table, not in docs/openapi.yaml", r.Method, r.Path)
			continue
		}
		desc, _ := op["description"].(string)
		m := accessRE.FindStringSubmatch(desc)
		if m == nil {
			t.Errorf("%s %s: the description names no access (\"Access *read*\")", r.Method, r.Path)
		} else if accessOf[m[1]] != r.Access {
			t.Errorf("%s %s: the document says access %s, the table %s", r.Method, r.Path, m[1], r.Access)
		}
	}
	if inTable[[2]string{"GET", linkPath}] {
		t.Errorf("GET %s is in the route table: the document's note that a gateway answers it itself is wrong", linkPath)
	}
	for key := range ops {
		if !strings.HasPrefix(key[1], server.RouteFamily+"/") || inTable[key] {
			continue
		}
		if key != [2]string{"GET", linkPath} {
			t.Errorf("%s %s is in docs/openapi.yaml, not in the route table", key[0], key[1])
		}
	}
}

// refusalRowRE reads a row of docs/routes.md's refusal table:
// "| 400 | `ephemeral_bad_request` | ...".
var refusalRowRE = regexp.MustCompile("^\\| ([0-9]{3}) \\| `([a-z_]+)` \\|")

// codeRE reads the statuses and codes docs/routes.md names in prose, as
// "404 `not_found`" or "500 `internal_error`".
var codeRE = regexp.MustCompile("([0-9]{3}) `([a-z_]+)`")

// documentedCodes answers, per "status code", the operations whose
// response of that status admits the code.
func (d *apiDoc) documentedCodes(t *testing.T) map[string][]string {
	out := map[string][]string{}
	for key, op := range d.operations() {
		for status, r := range obj(op["responses"]) {
			resp, _ := d.deref(r, "")
			for _, code := range d.codesOf(obj(obj(obj(resp["content"])["application/json"])["schema"])) {
				k := status + " " + code
				out[k] = append(out[k], key[0]+" "+key[1])
			}
		}
	}
	return out
}

// codesOf answers the codes an error schema admits: its code property's
// const or enum, through $ref and allOf.
func (d *apiDoc) codesOf(s map[string]any) []string {
	s, _ = d.deref(s, "")
	if s == nil {
		return nil
	}
	var out []string
	if code := obj(obj(s["properties"])["code"]); code != nil {
		if c, ok := code["const"].(string); ok {
			out = append(out, c)
		}
		enum, _ := code["enum"].([]any)
		for _, e := range enum {
			if c, ok := e.(string); ok {
				out = append(out, c)
			}
		}
	}
	all, _ := s["allOf"].([]any)
	for _, sub := range all {
		out = append(out, d.codesOf(obj(sub))...)
	}
	return out
}

// TestOpenAPIRefusals checks that every refusal docs/routes.md lists (its
// table, the HTTP layer's beside it, the system routes') is a response of
// some operation of the document with its status and code, and that the
// document names no code that docs/routes.md (or, for what a client meets
// through a gateway, docs/gateway.md) does not.
func TestOpenAPIRefusals(t *testing.T) {
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) (map[string]bool, int) {
		text, err := os.ReadFile(filepath.Join(root, "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		codes, rows := map[string]bool{}, 0
		for _, line := range strings.Split(string(text), "\n") {
			if m := refusalRowRE.FindStringSubmatch(line); m != nil {
				codes[m[1]+" "+m[2]] = true
				rows++
			}
			for _, m := range codeRE.FindAllStringSubmatch(line, -1) {
				codes[m[1]+" "+m[2]] = true
			}
		}
		return codes, rows
	}
	spec, rows := read("routes.md")
	// A gateway's refusals (docs/gateway.md) may be documented where a
	// client meets them (route_blocked, for a route a gateway predates);
	// they are not the broker's, so none is required.
	gateway, _ := read("gateway.md")
	if rows < 14 {
		t.Fatalf("read %d rows of docs/routes.md's refusal table, want its 14 at least: has the table's form changed?", rows)
	}
	for _, must := range []string{"404 not_found", "405 method_not_allowed", "500 internal_error", "400 bad_request", "404 grant_not_found"} {
		if !spec[must] {
			t.Errorf("docs/routes.md no longer names %s in the form this test reads", must)
		}
	}
	d := loadAPIDoc(t)
	documented := d.documentedCodes(t)
	for k := range spec {
		if documented[k] == nil {
			t.Errorf("docs/routes.md names %s; no operation of docs/openapi.yaml answers it", k)
		}
	}
	for k, where := range documented {
		if !spec[k] && !gateway[k] {
			t.Errorf("docs/openapi.yaml answers %s (%s), which docs/routes.md does not name", k, strings.Join(where, ", "))
		}
	}
}

// realAPI is a broker and the document, and the operations each request
// reached with the statuses they answered.
type realAPI struct {
	t    *testing.T
	d    *apiDoc
	url  string
	hc   *http.Client
	seen map[string]map[string]bool // "METHOD template" → statuses answered
}

// opFor answers the document's operation for a request's method and path
// (its method and path template); for a method the path does not take (a
// 405), the path's first operation, since each documents the 405 alike.
func (a *realAPI) opFor(method, path string, status int) (map[string]any, [2]string) {
	ops := a.d.operations()
	keys := make([][2]string, 0, len(ops))
	for key := range ops {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(x, y [2]string) int { return strings.Compare(x[0]+x[1], y[0]+y[1]) })
	for _, key := range keys {
		if key[0] != method && status != http.StatusMethodNotAllowed {
			continue
		}
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(key[1]), `[^/]*`) + "$"
		if regexp.MustCompile(re).MatchString(path) {
			return ops[key], key
		}
	}
	return nil, [2]string{}
}

// call sends a request and checks its answer: the status wanted, the code
// wanted (none for a success), the status among the operation's documented
// responses, and the body valid against that response's schema. It answers
// the response (its body read into body).
func (a *realAPI) call(method, target string, hdr map[string]string, body any, status int, code string) (*http.Response, []byte) {
	t := a.t
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, a.url+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	var got []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		got, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, target, err)
		}
	}
	what := fmt.Sprintf("%s %s", method, target)
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d: %s", what, resp.StatusCode, status, got)
		return resp, got
	}
	if code != "" {
		var e struct{ Code string }
		if err := json.Unmarshal(got, &e); err != nil || e.Code != code {
			t.Errorf("%s: code %q, want %q: %s", what, e.Code, code, got)
		}
	}
	path, _, _ := strings.Cut(target, "?")
	op, opKey := a.opFor(method, path, resp.StatusCode)
	if op == nil {
		t.Errorf("%s: no operation of docs/openapi.yaml is this request", what)
		return resp, got
	}
	tmpl := opKey[1]
	key := method + " " + tmpl
	if j, ok := body.(map[string]any); ok && opKey[0] == method {
		a.checkRequest(what, method, tmpl, op, j, resp.StatusCode)
	}
	if a.seen[key] == nil {
		a.seen[key] = map[string]bool{}
	}
	st := strconv.Itoa(resp.StatusCode)
	a.seen[key][st] = true
	r, ptr := a.d.deref(obj(op["responses"])[st], "#/paths/"+escapePtr(tmpl)+"/"+strings.ToLower(opKey[0])+"/responses/"+st)
	if r == nil {
		t.Errorf("%s: answered %d, which docs/openapi.yaml does not document for %s", what, resp.StatusCode, key)
		return resp, got
	}
	for name, h := range obj(r["headers"]) {
		hm, _ := a.d.deref(h, "")
		if req, _ := hm["required"].(bool); req && resp.Header.Get(name) == "" {
			t.Errorf("%s: the documented header %s is missing", what, name)
		}
	}
	content := obj(r["content"])
	if content == nil {
		return resp, got
	}
	if content["application/json"] == nil {
		return resp, got // text: the page, the metrics
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, documented application/json", what, ct)
	}
	sch, err := a.d.compiler.Compile(openapiURL + ptr + "/content/application~1json/schema")
	if err != nil {
		t.Fatalf("%s: compiling the schema at %s: %v", what, ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(got))
	if err != nil {
		t.Errorf("%s: the answer is not JSON: %v: %s", what, err, got)
		return resp, got
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%s: the answer does not match docs/openapi.yaml (%s): %#v\n%s", what, ptr, err, got)
	}
	return resp, got
}

// checkRequest holds a request body to the operation's documented one: a
// body the broker accepted must be valid against it, and one it refused
// with 400 must not be (a schema that admitted it would lead a generated
// client to send what the broker refuses).
func (a *realAPI) checkRequest(what, method, tmpl string, op, body map[string]any, status int) {
	t := a.t
	t.Helper()
	rb, ptr := a.d.deref(op["requestBody"], "#/paths/"+escapePtr(tmpl)+"/"+strings.ToLower(method)+"/requestBody")
	if rb == nil {
		t.Errorf("%s: the request has a body; the operation documents none", what)
		return
	}
	sch, err := a.d.compiler.Compile(openapiURL + ptr + "/content/application~1json/schema")
	if err != nil {
		t.Fatalf("%s: compiling the request schema at %s: %v", what, ptr, err)
	}
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	err = sch.Validate(v)
	switch {
	case status < 300 && err != nil:
		t.Errorf("%s: the broker accepted %s, which the documented request body (%s) refuses: %#v", what, j, ptr, err)
	case status == http.StatusBadRequest && err == nil:
		t.Errorf("%s: the broker refused %s with 400, which the documented request body (%s) admits", what, j, ptr)
	}
}

// TestOpenAPIRealAnswers starts a broker in mode jwt, grants required and
// an admin token set, and one in mode gateway (its gateway link, the
// gateway's headers, X-Queen-Delivered), and sends each route of the
// document a request that
// succeeds and requests that meet its documented refusals: each answer's
// status and code are the ones wanted, its status is documented for the
// operation, and its body validates against the documented schema. Every
// operation must have answered a success, and every path answers a method
// it does not take with 405 and an Allow header naming exactly the
// methods the document gives it.
func TestOpenAPIRealAnswers(t *testing.T) {
	const secret, admin = "openapi-test-secret", "openapi-admin-token"
	b := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE":               "jwt",
		"QUEEN_JWT_SECRET":              secret,
		"QUEEN_ADMIN_TOKEN":             admin,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "true",
	})
	a := &realAPI{t: t, d: loadAPIDoc(t), url: b.URL(), seen: map[string]map[string]bool{},
		hc: &http.Client{Timeout: 10 * time.Second}}
	bearer := func(tenant, role string) map[string]string {
		tok, err := jwtmint.HS256([]byte(secret), jwtmint.Claims{Tenant: tenant, Role: role, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{"Authorization": "Bearer " + tok}
	}
	op := map[string]string{"Authorization": "Bearer " + admin}
	rw, wo, ro := bearer("acme", "read-write"), bearer("acme", "write-only"), bearer("acme", "read-only")
	acmeAdmin, ungranted := bearer("acme", "admin"), bearer("nogrant", "read-write")
	const fam = server.RouteFamily

	// System: /health, /metrics, the grants (which open the family to acme).
	a.call("GET", "/health", nil, nil, 200, "")
	a.call("GET", "/metrics", op, nil, 200, "")
	a.call("GET", "/metrics", nil, nil, 401, "unauthorized")
	a.call("PUT", "/api/v1/system/ephemeral/grants/acme", op, map[string]any{}, 200, "")
	a.call("GET", "/api/v1/system/ephemeral/grants/acme", acmeAdmin, nil, 200, "")
	a.call("GET", "/api/v1/system/ephemeral/grants/nobody", op, nil, 404, "grant_not_found")
	a.call("PUT", "/api/v1/system/ephemeral/grants/acme", op, map[string]any{"maxBytez": 1}, 400, "bad_request")
	a.call("PUT", "/api/v1/system/ephemeral/grants/acme", acmeAdmin, map[string]any{}, 403, "forbidden")
	a.call("GET", "/api/v1/system/ephemeral/grants/acme", nil, nil, 401, "unauthorized")
	a.call("PUT", "/api/v1/system/ephemeral/grants/quota", op, map[string]any{"maxQueues": 1}, 200, "")
	a.call("PUT", "/api/v1/system/ephemeral/grants/rate", op, map[string]any{"messagesPerSecond": 1}, 200, "")
	a.call("PUT", "/api/v1/system/ephemeral/grants/gone", op, map[string]any{"maxBytes": 1 << 20}, 200, "")
	a.call("DELETE", "/api/v1/system/ephemeral/grants/gone", op, nil, 200, "")
	a.call("GET", "/api/v1/system/cell", op, nil, 200, "")
	a.call("GET", "/api/v1/system/cell", rw, nil, 403, "forbidden")
	a.call("GET", "/api/v1/system/gateway-link", map[string]string{"Upgrade": "queen-link/1"}, nil, 404, "not_found")
	a.call("GET", "/dashboard", nil, nil, 200, "")
	a.call("HEAD", "/dashboard", nil, nil, 200, "")

	// A broker in gateway mode: the gateway link, the gateway's headers as
	// the document's security schemes name them, and a pop's
	// X-Queen-Delivered.
	gw := brokertest.StartQueen(t, map[string]string{"QUEEN_AUTH_MODE": "gateway", "QUEEN_GATEWAY_SECRET": "openapi-gw",
		"QUEEN_ADMIN_TOKEN": admin})
	g := &realAPI{t: t, d: a.d, url: gw.URL(), seen: a.seen, hc: a.hc}
	secretHdr := map[string]string{"X-Queen-Gateway-Secret": "openapi-gw"}
	g.call("GET", "/api/v1/system/gateway-link", merge(secretHdr, map[string]string{"Connection": "Upgrade", "Upgrade": "queen-link/1"}), nil, 101, "")
	g.call("GET", "/api/v1/system/gateway-link", map[string]string{"Upgrade": "queen-link/1"}, nil, 401, "unauthorized")
	g.call("GET", "/api/v1/system/gateway-link", secretHdr, nil, 400, "bad_request")
	viaGateway := merge(secretHdr, map[string]string{"X-Queen-Tenant": "acme", "X-Queen-Access": "read-write"})
	g.call("POST", server.RouteFamily+"/push", viaGateway, map[string]any{"queue": "g", "messages": []any{map[string]any{"payload": 1}}}, 403, "feature_gated")
	g.call("PUT", "/api/v1/system/ephemeral/grants/acme", op, map[string]any{}, 200, "")
	g.call("POST", server.RouteFamily+"/push", viaGateway, map[string]any{"queue": "g", "messages": []any{map[string]any{"payload": 1}}}, 201, "")
	resp, _ := g.call("GET", server.RouteFamily+"/pop?queue=g&batch=5", viaGateway, nil, 200, "")
	if got := resp.Header.Get("X-Queen-Delivered"); got != "1" {
		t.Errorf("a pop in gateway mode: X-Queen-Delivered %q, want 1", got)
	}
	g.call("GET", server.RouteFamily+"/queues", map[string]string{"X-Queen-Tenant": "acme", "X-Queen-Access": "read-write"}, nil, 401, "unauthorized")

	// push
	a.call("POST", fam+"/push", wo, map[string]any{"queue": "jobs", "messages": []any{
		map[string]any{"payload": map[string]any{"n": 1}}, map[string]any{"payload": "two"}}}, 201, "")
	a.call("POST", fam+"/push", rw, map[string]any{"queue": "jobs", "partition": "p2", "messages": []any{}}, 201, "")
	a.call("POST", fam+"/push", rw, map[string]any{"queue": "jobs", "messages": []any{map[string]any{"payload": 1, "x": 2}}}, 400, "ephemeral_bad_request")
	a.call("POST", fam+"/push", rw, `{"queue": "jobs", "messages": [`, 400, "ephemeral_bad_request")
	a.call("POST", fam+"/push", ro, map[string]any{"queue": "jobs", "messages": []any{}}, 403, "forbidden")
	a.call("POST", fam+"/push", nil, map[string]any{"queue": "jobs", "messages": []any{}}, 401, "unauthorized")
	a.call("POST", fam+"/push", ungranted, map[string]any{"queue": "jobs", "messages": []any{}}, 403, "feature_gated")
	two := []any{map[string]any{"payload": 1}, map[string]any{"payload": 2}}
	// The bucket admits a batch while it is not empty and keeps the debt:
	// 20 messages at 1 a second leave 19 s of it, so the next push is
	// refused.
	rate, twenty := bearer("rate", "read-write"), []any{}
	for i := range 20 {
		twenty = append(twenty, map[string]any{"payload": i})
	}
	a.call("POST", fam+"/push", rate, map[string]any{"queue": "r", "messages": twenty}, 201, "")
	resp, _ = a.call("POST", fam+"/push", rate, map[string]any{"queue": "r", "messages": two}, 429, "rate_limited")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("rate_limited without Retry-After")
	}

	// configure, then the bounds and the allowance
	a.call("POST", fam+"/configure", rw, map[string]any{"queue": "small", "options": map[string]any{
		"maxLength": 1, "policy": "reject", "windowBuffer": map[string]any{"ms": 0, "count": 0}}}, 201, "")
	a.call("POST", fam+"/configure", rw, map[string]any{"queue": "small", "options": map[string]any{"maxLenght": 1}}, 400, "ephemeral_bad_request")
	a.call("POST", fam+"/configure", ro, map[string]any{"queue": "small"}, 403, "forbidden")
	a.call("POST", fam+"/push", rw, map[string]any{"queue": "small", "messages": two}, 429, "queue_full")
	quota := bearer("quota", "read-write")
	a.call("POST", fam+"/configure", quota, map[string]any{"queue": "q1"}, 201, "")
	a.call("POST", fam+"/configure", quota, map[string]any{"queue": "q2"}, 403, "ephemeral_quota_exceeded")

	// pop and ack
	_, body := a.call("GET", fam+"/pop?queue=jobs&batch=10", rw, nil, 200, "")
	var popped struct {
		Messages []struct{ ID string }
	}
	if err := json.Unmarshal(body, &popped); err != nil || len(popped.Messages) != 2 {
		t.Fatalf("the pop took %d messages, want the 2 pushed: %s", len(popped.Messages), body)
	}
	a.call("GET", fam+"/pop?queue=jobs&wait=true&timeout=0", rw, nil, 200, "")
	a.call("GET", fam+"/pop?queue=jobs&batch=0", rw, nil, 400, "ephemeral_bad_request")
	a.call("GET", fam+"/pop?queue=jobs", wo, nil, 403, "forbidden")
	a.call("POST", fam+"/ack", rw, map[string]any{"queue": "jobs", "acks": []any{
		map[string]any{"id": popped.Messages[0].ID}, map[string]any{"id": popped.Messages[1].ID, "status": "retry"},
		map[string]any{"id": "nonsense"}}}, 200, "")
	a.call("POST", fam+"/ack", rw, map[string]any{"queue": "jobs", "acks": []any{map[string]any{"id": "x", "status": ""}}}, 400, "ephemeral_bad_request")
	a.call("POST", fam+"/ack", ro, map[string]any{"queue": "jobs", "acks": []any{}}, 403, "forbidden")

	// the status reads
	a.call("GET", fam+"/queues", ro, nil, 200, "")
	a.call("GET", fam+"/queues", nil, nil, 401, "unauthorized")
	a.call("GET", fam+"/queues/jobs/depth", ro, nil, 200, "")
	a.call("GET", fam+"/queues/jobs/depth?group=g", ro, nil, 200, "")
	a.call("GET", fam+"/queues/nosuch/depth", ro, nil, 404, "ephemeral_queue_not_found")
	a.call("GET", fam+"/queues/jobs/depth", ungranted, nil, 403, "feature_gated")

	// reset and delete
	a.call("POST", fam+"/reset", rw, map[string]any{"queue": "jobs"}, 200, "")
	a.call("POST", fam+"/reset", rw, map[string]any{}, 400, "ephemeral_bad_request")
	a.call("DELETE", fam+"/queue/small", rw, nil, 200, "")
	a.call("DELETE", fam+"/queue/nosuch", rw, nil, 200, "")
	a.call("DELETE", fam+"/queue/", rw, nil, 400, "ephemeral_bad_request")
	a.call("DELETE", fam+"/queue/jobs", ro, nil, 403, "forbidden")

	// the link's upgrade
	up := map[string]string{"Connection": "Upgrade", "Upgrade": "queen-link/1"}
	a.call("GET", fam+"/link", merge(rw, up), nil, 101, "")
	a.call("GET", fam+"/link", rw, nil, 426, "ephemeral_bad_request")
	a.call("GET", fam+"/link", up, nil, 401, "unauthorized")

	// the cell's view read (a single broker: generation 0, no members)
	a.call("GET", fam+"/cell", ro, nil, 200, "")
	a.call("GET", fam+"/cell?after=0&timeout=0", ro, nil, 200, "")
	a.call("GET", fam+"/cell?after=x", ro, nil, 400, "ephemeral_bad_request")
	a.call("GET", fam+"/cell", nil, nil, 401, "unauthorized")

	// the kill switch: the family pauses, the system routes do not
	a.call("GET", "/api/v1/system/ephemeral", acmeAdmin, nil, 200, "")
	a.call("POST", "/api/v1/system/ephemeral", acmeAdmin, map[string]any{"enabled": false}, 403, "forbidden")
	a.call("POST", "/api/v1/system/ephemeral", op, map[string]any{"enabled": "no"}, 400, "bad_request")
	a.call("POST", "/api/v1/system/ephemeral", op, map[string]any{"enabled": false, "retryAfterSeconds": 7}, 200, "")
	resp, _ = a.call("POST", fam+"/push", rw, map[string]any{"queue": "jobs", "messages": []any{}}, 503, "ephemeral_disabled")
	if got := resp.Header.Get("Retry-After"); got != "7" {
		t.Errorf("a push while paused: Retry-After %q, want 7", got)
	}
	a.call("GET", fam+"/pop?queue=jobs", rw, nil, 503, "ephemeral_disabled")
	a.call("GET", fam+"/queues", ro, nil, 503, "ephemeral_disabled")
	a.call("GET", "/health", nil, nil, 200, "")
	a.call("POST", "/api/v1/system/ephemeral", op, map[string]any{"enabled": true}, 200, "")
	a.call("POST", fam+"/push", rw, map[string]any{"queue": "jobs", "messages": []any{}}, 201, "")

	// 405 with Allow naming exactly the documented methods, on every path.
	byPath := map[string][]string{}
	for key := range a.d.operations() {
		byPath[key[1]] = append(byPath[key[1]], key[0])
	}
	for tmpl, ms := range byPath {
		target := strings.NewReplacer("{queue}", "jobs", "{tenant}", "acme").Replace(tmpl)
		resp, _ := a.call("PATCH", target, op, nil, 405, "method_not_allowed")
		var allow []string
		for _, m := range strings.Split(resp.Header.Get("Allow"), ",") {
			allow = append(allow, strings.TrimSpace(m))
		}
		sort.Strings(allow)
		sort.Strings(ms)
		if !slices.Equal(allow, ms) {
			t.Errorf("PATCH %s: Allow %v, the document gives the path %v", target, allow, ms)
		}
	}

	// Every operation answered a success.
	for key := range a.d.operations() {
		k := key[0] + " " + key[1]
		ok := false
		for st := range a.seen[k] {
			ok = ok || st[0] == '2' || st == "101"
		}
		if !ok {
			t.Errorf("%s: no request of this test succeeded (answered %v)", k, a.seen[k])
		}
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}
