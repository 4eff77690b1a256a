package conformance

// The harness: the broker binary built once (internal/brokertest), brokers
// started on both stores (a fresh data directory or a PostgreSQL schema),
// stopped with SIGTERM or SIGKILL, restarted on the same data, and spoken
// to over HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

var (
	// pg is the run's PostgreSQL (nil when there is none and CI is not
	// true: then the PostgreSQL cases skip, and under CI=true the run
	// fails before any test, storetest.MainWithPostgres).
	pg *storetest.Postgres
)

// defaultParallel is how many tests run at once unless -test.parallel is
// given: most of these tests wait on timers in a broker (leases, ttl, idle
// collection), so more of them than cores keeps the package fast.
const defaultParallel = 8

// buildFlags are the broker's go build flags: none, or -race with
// QUEEN_CONFORMANCE_RACE=1 (with GORACE=halt_on_error=1 in the environment
// a race kills the broker, failing its test).
func buildFlags() []string {
	if os.Getenv("QUEEN_CONFORMANCE_RACE") == "1" {
		return []string{"-race"}
	}
	return nil
}

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", strconv.Itoa(defaultParallel))
	}
	// The build runs while PostgreSQL starts.
	brokertest.Prebuild(brokertest.Queen, buildFlags()...)
	code := storetest.MainWithPostgres(m, &pg)
	brokertest.Cleanup()
	os.Exit(code)
}

// brokerBin waits for the broker's build and answers the binary's path; it
// fails t when the build failed.
func brokerBin(t testing.TB) string {
	t.Helper()
	return brokertest.Binary(t, brokertest.Queen, buildFlags()...)
}

// needBinary fails t now, before any set-up, when the broker did not build.
func needBinary(t testing.TB) {
	t.Helper()
	brokerBin(t)
}

// ---------------------------------------------------------------------------
// Stores

// storeKind is one of the two stores a broker can keep its declarations in.
type storeKind struct {
	name string
	// env returns the variables that give a new broker a fresh, empty
	// store of this kind (restarts reuse them: same data).
	env func(t *testing.T) map[string]string
}

var (
	embeddedStore = storeKind{"embedded", func(t *testing.T) map[string]string {
		return map[string]string{"QUEEN_DATA_DIR": t.TempDir()}
	}}
	postgresStore = storeKind{"postgres", func(t *testing.T) map[string]string {
		storetest.NeedPostgres(t, pg)
		return map[string]string{
			"QUEEN_DATABASE_URL":                pg.URL(),
			"QUEEN_DATABASE_SCHEMA":             pg.FreshSchema(t),
			"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": strconv.Itoa(brokertest.StoreAcquireTimeoutMS), // the shared server may be slow
		}
	}}
	allStores = []storeKind{embeddedStore, postgresStore}
)

// forEachStore runs f as one parallel subtest per store.
func forEachStore(t *testing.T, f func(t *testing.T, st storeKind)) {
	t.Helper()
	for _, st := range allStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f(t, st)
		})
	}
}

// ---------------------------------------------------------------------------
// Brokers

// broker is one queen process (and its restarts on the same data), with
// the HTTP client the helpers below speak through (a new one each start).
type broker struct {
	*brokertest.Broker

	mu     sync.Mutex
	client *http.Client
}

// newBroker is a broker with env, not started yet (so that its options can
// be set): the conformance defaults are the broker's own log level (info,
// for the log a failed test prints: its last 6 KiB) and, for a start, a
// wait for the store to be ok.
func newBroker(t *testing.T, env map[string]string) *broker {
	t.Helper()
	e := map[string]string{"QUEEN_LOG_LEVEL": "info"}
	for k, v := range env {
		e[k] = v
	}
	b := &broker{Broker: brokertest.New(t, brokerBin(t), e), client: newClient()}
	b.WaitStoreOK = true
	b.LogTail = 6 << 10
	t.Cleanup(func() { b.httpClient().CloseIdleConnections() })
	return b
}

// startBroker starts a broker with env over the defaults. Without
// QUEEN_DATA_DIR or QUEEN_DATABASE_URL in env it gets a fresh embedded
// store. It is killed when the test ends.
func startBroker(t *testing.T, env map[string]string) *broker {
	t.Helper()
	// Connections count against the broker total (docs/server.md,
	// accepting connections), and how many the test's HTTP client keeps
	// open is its own business: the footprints these tests compute leave
	// them out, and TestConnectionsCharged checks the charge itself.
	e := map[string]string{"QUEEN_CONNECTION_CHARGE_BYTES": "0"}
	for k, v := range env {
		e[k] = v
	}
	b := newBroker(t, e)
	b.start(t)
	return b
}

// startBrokerOn starts a broker on store st (fresh) with extra variables.
func startBrokerOn(t *testing.T, st storeKind, env map[string]string) *broker {
	t.Helper()
	e := st.env(t)
	for k, v := range env {
		e[k] = v
	}
	return startBroker(t, e)
}

// start starts the process (again, on the same data) on a free port, or
// the one it had under KeepPort, with a new HTTP client, and waits for
// GET /health = 200 (and, for a store that should be up, "store": "ok").
func (b *broker) start(t *testing.T) {
	t.Helper()
	b.Start(t)
	b.mu.Lock()
	b.client = newClient()
	b.mu.Unlock()
}

func newClient() *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:          64,
			MaxIdleConnsPerHost:   64,
			DisableCompression:    true,
			ExpectContinueTimeout: time.Second,
			IdleConnTimeout:       30 * time.Second,
		},
	}
}

// signal sends sig and waits (at most wait) for the process to exit; it
// returns the exit code (-1 when killed by a signal) and how long the exit
// took. It fails t when the process does not exit in time.
func (b *broker) signal(t *testing.T, sig syscall.Signal, wait time.Duration) (code int, took time.Duration) {
	t.Helper()
	code, took = b.SignalWait(t, sig, wait)
	b.httpClient().CloseIdleConnections()
	return code, took
}

// stop sends SIGTERM and requires exit code 0 within 2 s.
func (b *broker) stop(t *testing.T) {
	t.Helper()
	code, took := b.signal(t, syscall.SIGTERM, 5*time.Second)
	if code != 0 || took > 2*time.Second {
		t.Fatalf("SIGTERM: exit code %d after %v; want 0 within 2s", code, took)
	}
}

// kill sends SIGKILL (a crash).
func (b *broker) kill(t *testing.T) {
	t.Helper()
	b.signal(t, syscall.SIGKILL, 5*time.Second)
}

// restart stops the broker with SIGTERM and starts it again on the same
// data, on a new port.
func (b *broker) restart(t *testing.T) {
	t.Helper()
	b.stop(t)
	b.start(t)
}

func (b *broker) addr() string { return b.Addr() }

func (b *broker) url(path string) string { return b.URL() + path }

func (b *broker) httpClient() *http.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.client
}

// ---------------------------------------------------------------------------
// HTTP over net/http

// reply is one answer (brokertest.Reply), with the suite's assertions.
type reply brokertest.Reply

func (r reply) String() string { return brokertest.Reply(r).String() }

// do sends one request with net/http (keep-alive) and reads the answer.
// body is nil, a string, a []byte, or a value marshalled as JSON. Every
// answer must be JSON (Content-Type application/json).
func (b *broker) do(t testing.TB, method, path string, body any) reply {
	t.Helper()
	return b.doWith(t, b.httpClient(), method, path, body)
}

func (b *broker) doWith(t testing.TB, c *http.Client, method, path string, body any) reply {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.url(path), rd)
	if err != nil {
		t.Fatalf("request %s %s: %v", method, path, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	rep, err := brokertest.Do(c, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	r := reply(rep)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json (%s)", method, path, ct, r)
	}
	return r
}

// want requires status and decodes the JSON body into out (when non-nil).
func (r reply) want(t testing.TB, status int, out any) reply {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d; body %s", r.Status, status, r.Body)
	}
	if out != nil {
		if err := json.Unmarshal(r.Body, out); err != nil {
			t.Fatalf("decoding %s: %v", r.Body, err)
		}
	}
	return r
}

// wantErr requires a refusal: status, and a body that is exactly
// {"error": <non-empty string>, "code": code} (docs/routes.md, Refusals).
func (r reply) wantErr(t testing.TB, status int, code string) errBody {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.Status, status, code, r.Body)
	}
	return checkErrBody(t, r.Body, code)
}

type errBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func checkErrBody(t testing.TB, body []byte, code string) errBody {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("refusal body is not a JSON object: %s", body)
	}
	if len(m) != 2 || m["error"] == nil || m["code"] == nil {
		t.Errorf("refusal body %s: want exactly the keys error and code", body)
	}
	var e errBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("refusal body %s: %v", body, err)
	}
	if e.Code != code {
		t.Fatalf("code %q, want %q; body %s", e.Code, code, body)
	}
	if e.Error == "" {
		t.Errorf("refusal body %s: error is empty", body)
	}
	return e
}

// requireKeys checks that the JSON object body has at least keys (D13:
// bodies carry at least the keys the spec shows).
func requireKeys(t testing.TB, body []byte, keys ...string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not a JSON object: %s", body)
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("body %s lacks the key %q", body, k)
		}
	}
}

// ---------------------------------------------------------------------------
// The route bodies

type popMsg struct {
	ID        string          `json:"id"`
	Partition string          `json:"partition"`
	Attempts  int             `json:"attempts"`
	Payload   json.RawMessage `json:"payload"`
}

type popResp struct {
	Queue    string   `json:"queue"`
	Messages []popMsg `json:"messages"`
}

func (p popResp) payloads() []string {
	out := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = string(m.Payload)
	}
	return out
}

func (p popResp) ids() []string {
	out := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.ID
	}
	return out
}

type ackResult struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
}

type ackResp struct {
	Results []ackResult `json:"results"`
}

func (a ackResp) outcomes() []string {
	out := make([]string, len(a.Results))
	for i, r := range a.Results {
		out[i] = r.Outcome
	}
	return out
}

type window struct {
	Ms    int64 `json:"ms"`
	Count int64 `json:"count"`
}

type options struct {
	MaxBytes     int64   `json:"maxBytes"`
	MaxLength    int64   `json:"maxLength"`
	Policy       string  `json:"policy"`
	TTLSeconds   int64   `json:"ttlSeconds"`
	LeaseSeconds int64   `json:"leaseSeconds"`
	RetryLimit   int64   `json:"retryLimit"`
	WindowBuffer *window `json:"windowBuffer"`
}

// defaultOptions are the options in force of a queue with nothing set, on
// a broker with the default environment (docs/routes.md, configure; D9).
var defaultOptions = options{
	MaxBytes: 16 << 20, MaxLength: 10000, Policy: "reject",
	TTLSeconds: 0, LeaseSeconds: 30, RetryLimit: 5,
}

type drops struct {
	Bounds int64 `json:"bounds"`
	TTL    int64 `json:"ttl"`
	Retry  int64 `json:"retry"`
}

type queueRow struct {
	Queue      string  `json:"queue"`
	Tier       string  `json:"tier"`
	Depth      int64   `json:"depth"`
	Bytes      int64   `json:"bytes"`
	Partitions int     `json:"partitions"`
	Groups     int     `json:"groups"`
	Drops      drops   `json:"drops"`
	Options    options `json:"options"`
}

type listing struct {
	Queues    []queueRow `json:"queues"`
	Count     int        `json:"count"`
	CellBytes int64      `json:"cellBytes"`
}

func (l listing) find(name string) (queueRow, bool) {
	for _, q := range l.Queues {
		if q.Queue == name {
			return q, true
		}
	}
	return queueRow{}, false
}

func (l listing) names() []string {
	var out []string
	for _, q := range l.Queues {
		out = append(out, q.Queue)
	}
	sort.Strings(out)
	return out
}

type partDepth struct {
	Partition string `json:"partition"`
	Pending   int64  `json:"pending"`
	Bytes     int64  `json:"bytes"`
}

type groupDepth struct {
	Group   string `json:"group"`
	Pending int64  `json:"pending"`
	Skipped int64  `json:"skipped"`
}

type depthResp struct {
	Queue             string       `json:"queue"`
	Group             *string      `json:"group"`
	Tier              string       `json:"tier"`
	Pending           int64        `json:"pending"`
	PartitionsPending int          `json:"partitionsPending"`
	Bytes             int64        `json:"bytes"`
	Partitions        []partDepth  `json:"partitions"`
	Groups            []groupDepth `json:"groups"`
}

// sorted returns d with its partitions and groups in name order (the spec
// orders neither).
func (d depthResp) sorted() depthResp {
	sort.Slice(d.Partitions, func(i, j int) bool { return d.Partitions[i].Partition < d.Partitions[j].Partition })
	sort.Slice(d.Groups, func(i, j int) bool { return d.Groups[i].Group < d.Groups[j].Group })
	if d.Partitions == nil {
		d.Partitions = []partDepth{}
	}
	if d.Groups == nil {
		d.Groups = []groupDepth{}
	}
	return d
}

// ---------------------------------------------------------------------------
// Route helpers (each requires the success status)

// pushBody builds a push body; payloads are raw JSON texts.
func pushBody(queue, partition string, payloads ...string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"queue":`)
	q, _ := json.Marshal(queue)
	b.Write(q)
	if partition != "" {
		p, _ := json.Marshal(partition)
		b.WriteString(`,"partition":`)
		b.Write(p)
	}
	b.WriteString(`,"messages":[`)
	for i, pl := range payloads {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"payload":`)
		b.WriteString(pl)
		b.WriteByte('}')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// push pushes raw JSON payloads and requires 201 {"pushed": len(payloads)}.
func (b *broker) push(t testing.TB, queue, partition string, payloads ...string) {
	t.Helper()
	var out struct {
		Pushed *int `json:"pushed"`
	}
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody(queue, partition, payloads...)).want(t, 201, &out)
	if out.Pushed == nil || *out.Pushed != len(payloads) {
		t.Fatalf("push to %s: pushed %v, want %d", queue, out.Pushed, len(payloads))
	}
}

// pushN pushes the payloads "0".."n-1" shifted by from, as JSON numbers.
func (b *broker) pushN(t testing.TB, queue, partition string, from, n int) {
	t.Helper()
	pl := make([]string, n)
	for i := range pl {
		pl[i] = strconv.Itoa(from + i)
	}
	b.push(t, queue, partition, pl...)
}

// popq is a pop's query.
type popq map[string]string

func (q popq) encode() string {
	v := url.Values{}
	for k, val := range q {
		v.Set(k, val)
	}
	return v.Encode()
}

// pop requires 200 and the pop answer's shape (queue echoed, messages an
// array, never null).
func (b *broker) pop(t testing.TB, q popq) popResp {
	t.Helper()
	return b.popWith(t, b.httpClient(), q)
}

func (b *broker) popWith(t testing.TB, c *http.Client, q popq) popResp {
	t.Helper()
	var out popResp
	r := b.doWith(t, c, "GET", "/api/v1/ephemeral/pop?"+q.encode(), nil).want(t, 200, &out)
	checkPopShape(t, r.Body, q["queue"], out)
	// These requests carry no gateway headers, so the broker is not in
	// gateway mode: its pop answers say nothing of their count.
	if v, ok := r.Header["X-Queen-Delivered"]; ok {
		t.Fatalf("a pop answer outside gateway mode carries X-Queen-Delivered %q", v)
	}
	return out
}

func checkPopShape(t testing.TB, body []byte, queue string, out popResp) {
	t.Helper()
	requireKeys(t, body, "queue", "messages")
	if out.Queue != queue {
		t.Errorf("pop answer names queue %q, want %q", out.Queue, queue)
	}
	if out.Messages == nil {
		t.Errorf("pop answer %s: messages must be an array (empty when nothing), not null or absent", body)
	}
	var raw struct {
		Messages []json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &raw)
	for _, m := range raw.Messages {
		requireKeys(t, m, "id", "partition", "attempts", "payload")
	}
}

// requireElemKeys checks that the array under key in the JSON object body
// exists and that each of its elements has keys; it returns the elements.
func requireElemKeys(t testing.TB, body []byte, key string, keys ...string) []json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not a JSON object: %s", body)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(m[key], &elems); err != nil {
		t.Fatalf("%s is not an array in %s", key, body)
	}
	for _, e := range elems {
		requireKeys(t, e, keys...)
	}
	return elems
}

type ackItem struct {
	ID     string `json:"id"`
	Status string `json:"status,omitempty"`
}

// ack requires 200 and one result per item, in order, with the ids echoed.
func (b *broker) ack(t testing.TB, queue, group string, items ...ackItem) []string {
	t.Helper()
	body := map[string]any{"queue": queue, "acks": items}
	if group != "" {
		body["group"] = group
	}
	var out ackResp
	b.do(t, "POST", "/api/v1/ephemeral/ack", body).want(t, 200, &out)
	if len(out.Results) != len(items) {
		t.Fatalf("ack: %d results for %d ids: %+v", len(out.Results), len(items), out)
	}
	for i, r := range out.Results {
		if r.ID != items[i].ID {
			t.Errorf("ack result %d: id %q, want %q", i, r.ID, items[i].ID)
		}
	}
	return out.outcomes()
}

// ackAll acks every message of p with status.
func (b *broker) ackAll(t testing.TB, queue, group, status string, p popResp) []string {
	t.Helper()
	items := make([]ackItem, len(p.Messages))
	for i, m := range p.Messages {
		items[i] = ackItem{ID: m.ID, Status: status}
	}
	return b.ack(t, queue, group, items...)
}

// configure requires 201 and the answer {"queue": Q, "options": <exactly
// the bytes sent>} (docs/routes.md, configure; D9). rawOptions is "" for none.
func (b *broker) configure(t testing.TB, queue, rawOptions string) {
	t.Helper()
	q, _ := json.Marshal(queue)
	body := `{"queue":` + string(q)
	if rawOptions != "" {
		body += `,"options":` + rawOptions
	}
	body += "}"
	var out struct {
		Queue   string          `json:"queue"`
		Options json.RawMessage `json:"options"`
	}
	r := b.do(t, "POST", "/api/v1/ephemeral/configure", body).want(t, 201, &out)
	requireKeys(t, r.Body, "queue", "options")
	want := rawOptions
	if want == "" {
		want = "{}"
	}
	if out.Queue != queue || string(out.Options) != want {
		t.Fatalf("configure %s: answer %s; want queue %q and options %s verbatim", queue, r.Body, queue, want)
	}
}

func (b *broker) queues(t testing.TB) listing {
	t.Helper()
	var out listing
	r := b.do(t, "GET", "/api/v1/ephemeral/queues", nil).want(t, 200, &out)
	requireKeys(t, r.Body, "queues", "count", "cellBytes")
	for _, row := range requireElemKeys(t, r.Body, "queues", "queue", "tier", "depth", "bytes", "partitions", "groups", "drops", "options") {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(row, &m)
		requireKeys(t, m["drops"], "bounds", "ttl", "retry")
		requireKeys(t, m["options"], "maxBytes", "maxLength", "policy", "ttlSeconds", "leaseSeconds", "retryLimit", "windowBuffer")
	}
	if out.Queues == nil {
		t.Errorf("listing %s: queues must be an array", r.Body)
	}
	if out.Count != len(out.Queues) {
		t.Errorf("listing: count %d, but %d rows", out.Count, len(out.Queues))
	}
	return out
}

// row requires the queue in the listing.
func (b *broker) row(t testing.TB, name string) queueRow {
	t.Helper()
	l := b.queues(t)
	q, ok := l.find(name)
	if !ok {
		t.Fatalf("queue %q is not in the listing %v", name, l.names())
	}
	return q
}

func depthPath(queue, group string) string {
	p := "/api/v1/ephemeral/queues/" + url.PathEscape(queue) + "/depth"
	if group != "" {
		p += "?group=" + url.QueryEscape(group)
	}
	return p
}

func (b *broker) depth(t testing.TB, queue, group string) depthResp {
	t.Helper()
	var out depthResp
	r := b.do(t, "GET", depthPath(queue, group), nil).want(t, 200, &out)
	requireKeys(t, r.Body, "queue", "group", "tier", "pending", "partitionsPending", "bytes", "partitions", "groups")
	requireElemKeys(t, r.Body, "partitions", "partition", "pending", "bytes")
	requireElemKeys(t, r.Body, "groups", "group", "pending", "skipped")
	return out.sorted()
}

func (b *broker) reset(t testing.TB, queue string) int64 {
	t.Helper()
	var out struct {
		Queue   string `json:"queue"`
		Dropped *int64 `json:"dropped"`
	}
	b.do(t, "POST", "/api/v1/ephemeral/reset", map[string]string{"queue": queue}).want(t, 200, &out)
	if out.Queue != queue || out.Dropped == nil {
		t.Fatalf("reset %s: answer %+v", queue, out)
	}
	return *out.Dropped
}

type deleted struct {
	Queue    string `json:"queue"`
	Deleted  bool   `json:"deleted"`
	Declared bool   `json:"declared"`
}

func (b *broker) delete(t testing.TB, queue string) deleted {
	t.Helper()
	var out deleted
	r := b.do(t, "DELETE", "/api/v1/ephemeral/queue/"+url.PathEscape(queue), nil).want(t, 200, &out)
	requireKeys(t, r.Body, "queue", "deleted", "declared")
	return out
}

type health struct {
	Status      string `json:"status"`
	Store       string `json:"store"`
	Incarnation string `json:"incarnation"`
	Version     string `json:"version"`
}

func (b *broker) health(t testing.TB) health {
	t.Helper()
	var h health
	r := b.do(t, "GET", "/health", nil).want(t, 200, &h)
	requireKeys(t, r.Body, "status", "store", "incarnation", "version")
	return h
}

// asyncPop runs a pop in the background on its own connection; the
// channel yields the answer.
type popResult struct {
	resp popResp
	took time.Duration
	err  error
}

func (b *broker) asyncPop(q popq) <-chan popResult {
	ch := make(chan popResult, 1)
	c := newClient()
	target := b.url("/api/v1/ephemeral/pop?" + q.encode())
	go func() {
		defer c.CloseIdleConnections()
		start := time.Now()
		resp, err := c.Get(target)
		if err != nil {
			ch <- popResult{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		var out popResp
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("pop: status %d: %s", resp.StatusCode, body)
		}
		if err == nil {
			err = json.Unmarshal(body, &out)
		}
		if err == nil && out.Messages == nil {
			err = fmt.Errorf("pop: messages is not an array: %s", body)
		}
		ch <- popResult{resp: out, took: time.Since(start), err: err}
	}()
	return ch
}

func waitPop(t testing.TB, ch <-chan popResult, d time.Duration) popResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("background pop: %v", r.err)
		}
		return r
	case <-time.After(d):
		t.Fatalf("background pop: no answer within %v", d)
	}
	return popResult{}
}

// countConns counts the connections a client opens (keep-alive checks).
func countConns(ctx context.Context, n *int, mu *sync.Mutex) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				mu.Lock()
				*n++
				mu.Unlock()
			}
		},
	})
}

// ---------------------------------------------------------------------------
// Raw TCP

// rawConn is one TCP connection spoken to by hand.
type rawConn struct {
	t  testing.TB
	c  net.Conn
	br *bufio.Reader
}

func (b *broker) dial(t testing.TB) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", b.addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) send(s string) {
	r.t.Helper()
	_ = r.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// rawReply is one answer read off a raw connection.
type rawReply struct {
	status int
	proto  string
	header http.Header
	body   []byte
	close  bool // the answer says Connection: close
}

func (r rawReply) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// read reads one answer (an interim 100 Continue too) within d.
func (r *rawConn) readWithin(d time.Duration) (rawReply, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return rawReply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return rawReply{}, err
	}
	return rawReply{status: resp.StatusCode, proto: resp.Proto, header: resp.Header, body: body, close: resp.Close}, nil
}

func (r *rawConn) read() rawReply {
	r.t.Helper()
	rr, err := r.readWithin(15 * time.Second)
	if err != nil {
		r.t.Fatalf("reading an answer: %v", err)
	}
	return rr
}

// expectEOF requires the server to close the connection (EOF or reset)
// with nothing more sent, within d.
func (r *rawConn) expectEOF(d time.Duration) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	n, err := r.br.Read(buf)
	if n > 0 {
		r.t.Fatalf("expected the connection closed, got more bytes: %q", buf[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatalf("expected the connection closed within %v; it stayed open", d)
	}
	if err == nil {
		r.t.Fatalf("expected the connection closed")
	}
}

// expectNothing requires no bytes to arrive for d (and the connection to
// stay open).
func (r *rawConn) expectNothing(d time.Duration) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	_, err := r.br.Peek(1)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		r.t.Fatalf("expected nothing for %v; got %v (buffered %d bytes)", d, err, r.br.Buffered())
	}
}

// httpReq builds an HTTP/1.1 request text with a Content-Length body (when
// body is not empty or the method is POST) and extra header lines.
func httpReq(method, target, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: test\r\n", method, target)
	for _, h := range headers {
		b.WriteString(h)
		b.WriteString("\r\n")
	}
	if body != "" || method == "POST" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

func (r rawReply) want(t testing.TB, status int, out any) rawReply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	r.checkType(t)
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("decoding %s: %v", r.body, err)
		}
	}
	return r
}

func (r rawReply) wantErr(t testing.TB, status int, code string) errBody {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.status, status, code, r.body)
	}
	r.checkType(t)
	return checkErrBody(t, r.body, code)
}

// checkType requires every final answer to be JSON, with the status line
// of HTTP/1.1 (the broker's own version, to HTTP/1.0 clients too).
func (r rawReply) checkType(t testing.TB) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json (%s)", ct, r)
	}
	if r.proto != "HTTP/1.1" {
		t.Errorf("status line version %q, want HTTP/1.1", r.proto)
	}
}

// otherIncarnation returns an incarnation that is not inc (same length).
func otherIncarnation(inc string) string {
	if inc == "" {
		return "000000000000"
	}
	c := byte('0')
	if inc[0] == '0' {
		c = '1'
	}
	return string(c) + inc[1:]
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
