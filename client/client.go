package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/wire"
)

const apiPrefix = "/api/v1/ephemeral"

// Client speaks to one broker, or to several with failover. It is safe for
// concurrent use; build it with [New] and end it with [Client.Close].
type Client struct {
	urls    []string
	cur     atomic.Int64 // index into urls of the broker in use
	eps     []endpoint   // one per URL, same order
	http    *http.Client // WithHTTPClient's, nil when not given
	noLinks bool         // WithHTTPOnly
	token   string
	src     *tokenSource // WithTokenFunc's, nil without
	headers http.Header
	timeout time.Duration
	buf     BufferOptions
	onFlush func(*FlushError)

	ctx    context.Context // cancelled by Close: stops Consume loops and flushers
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	buffers map[bufferKey]*pushBuffer
	slots   chan struct{} // one token per buffered message held, bounds memory
	wg      sync.WaitGroup

	flushRetries atomic.Int64 // refusals a flush waited out (for tests and stats)

	// head: the constant headers (constantHeaders); tlsClient: net/http
	// for https:// URLs without WithHTTPClient (made at the first). Both
	// for endpointFor, which also makes cell members' endpoints.
	head      []byte
	tlsClient *http.Client
	cell      cellState // owner routing (owner.go)
}

// Option configures a [Client].
type Option func(*Client)

// WithURLs adds brokers tried in turn when the one in use cannot be
// reached (a connection that cannot be dialled).
func WithURLs(urls ...string) Option {
	return func(c *Client) { c.urls = append(c.urls, urls...) }
}

// WithToken sends "Authorization: Bearer token" on every request.
func WithToken(token string) Option { return func(c *Client) { c.token, c.src = token, nil } }

// WithTokenFunc takes the bearer token from f, for credentials that rotate
// (short-lived JWTs): f is called for the first request, and again only
// when the token it returned nears its end (a JWT's exp, read without
// verifying it, less a quarter of its lifetime at most 30 s; a token
// without a readable exp, every minute), never once per request. A link
// (docs/link.md) carries a token's identity until its exp: before then
// the client sends it a fresh token from f in a token frame, so that a
// link, and the pops parked on it, outlive any one token. An error from f
// fails the call that needed the token (nothing was sent) unless the token
// in use has not expired yet, which then serves on. f must be safe to call
// from any goroutine; ctx is the call's, or a 10 s bound when a link
// refreshes its token. It replaces WithToken.
func WithTokenFunc(f func(ctx context.Context) (string, error)) Option {
	return func(c *Client) { c.token, c.src = "", newTokenSource(f) }
}

// WithHeader sends a header on every request.
func WithHeader(key, value string) Option {
	return func(c *Client) { c.headers.Add(key, value) }
}

// WithHTTPClient makes every call go through hc (net/http) instead of the
// client's own HTTP/1.1 transport: for a proxy from the environment, a
// custom dialer or TLS setup, or a RoundTripper that instruments calls. It
// costs what net/http costs (two to three times the client CPU per call,
// and tens of allocations; docs/sdk-transport.md) and gives up pipelining and
// Request's single write: Request's push and pop go one after the other.
// https:// URLs use net/http in any case (with hc when given).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithHTTPOnly keeps the client on HTTP/1.1: it never upgrades a connection
// to a link (docs/link.md), as it does by default. For a path to the
// broker through something that mangles upgraded connections without
// refusing them; a refused upgrade falls back to HTTP by itself.
func WithHTTPOnly() Option { return func(c *Client) { c.noLinks = true } }

// WithTimeout bounds each request that is not a waiting pop (default 30 s;
// 0 is no bound); a waiting pop is bounded by its own timeout plus this.
// The bound is a deadline on the connection, not a timer per call: a call
// that passes it fails with a timeout error and its connection is closed,
// failing the calls pipelined behind it too.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithBuffer sets how buffered pushes batch, bound memory and retry.
// Zero fields keep their defaults.
func WithBuffer(b BufferOptions) Option {
	return func(c *Client) {
		if b.MessageCount > 0 {
			c.buf.MessageCount = b.MessageCount
		}
		if b.Time > 0 {
			c.buf.Time = b.Time
		}
		if b.MaxPending > 0 {
			c.buf.MaxPending = b.MaxPending
		}
		if b.RetryTimeout != 0 {
			c.buf.RetryTimeout = b.RetryTimeout
		}
		if b.MaxBackoff > 0 {
			c.buf.MaxBackoff = b.MaxBackoff
		}
	}
}

// WithFlushErrorHandler calls f (on the flusher's goroutine) for each flush
// that finally failed, in addition to reporting it to the next buffered
// push, Flush or Close.
func WithFlushErrorHandler(f func(*FlushError)) Option { return func(c *Client) { c.onFlush = f } }

// New builds a client for the broker at url (e.g. "http://localhost:6632");
// WithURLs adds more. The URL may carry a path prefix, for a broker behind
// a proxy. An http:// broker is reached through the client's own HTTP/1.1
// transport (pipelined keep-alive connections, docs/sdk-transport.md); an
// https:// one through net/http, which does the TLS.
func New(url string, opts ...Option) (*Client, error) {
	c := &Client{
		urls:    []string{url},
		headers: http.Header{},
		timeout: 30 * time.Second,
		buf:     defaultBuffer,
		buffers: map[bufferKey]*pushBuffer{},
	}
	for _, o := range opts {
		o(c)
	}
	head, err := c.constantHeaders()
	if err != nil {
		return nil, err
	}
	c.head = head
	for i, s := range c.urls {
		u, err := parseBase(s)
		if err != nil {
			return nil, err
		}
		c.urls[i] = strings.TrimRight(u.String(), "/")
		c.eps = append(c.eps, c.endpointFor(u))
	}
	c.slots = make(chan struct{}, c.buf.MaxPending)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// endpointFor makes the endpoint of broker URL u (a configured URL, or a
// cell member's public URL) with the client's options.
func (c *Client) endpointFor(u *url.URL) endpoint {
	h := append([]byte("Host: "+u.Host+"\r\n"), c.head...)
	if c.http != nil || u.Scheme == "https" {
		hc := c.http
		if hc == nil {
			if c.tlsClient == nil {
				c.tlsClient = defaultHTTPClient()
			}
			hc = c.tlsClient
		}
		var ep endpoint = &httpEndpoint{hc: hc, base: strings.TrimRight(u.String(), "/"), token: c.token, headers: c.headers}
		if c.http == nil && !c.noLinks {
			ep = newLinkEndpoint(u, h, ep, c.src)
		}
		return ep
	}
	var ep endpoint = newPool(u, h)
	if !c.noLinks {
		ep = newLinkEndpoint(u, h, ep, c.src)
	}
	return ep
}

// defaultHTTPClient is net/http as the client used it before its own
// transport: keep-alive, up to 256 idle connections per broker, no
// compression, no overall timeout (each call has its own).
func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = 90 * time.Second
	tr.DisableCompression = true
	return &http.Client{Transport: tr}
}

// constantHeaders renders the headers every request carries (identity and
// WithHeader's) once, for the own transport.
func (c *Client) constantHeaders() ([]byte, error) {
	var b []byte
	add := func(k, v string) error {
		if strings.ContainsAny(k, "\r\n: ") || k == "" || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("queen: header %q: a name or value that cannot be sent", k)
		}
		b = append(b, k...)
		b = append(b, ": "...)
		b = append(b, v...)
		b = append(b, "\r\n"...)
		return nil
	}
	if c.token != "" {
		if err := add("Authorization", "Bearer "+c.token); err != nil {
			return nil, err
		}
	}
	keys := make([]string, 0, len(c.headers))
	for k := range c.headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range c.headers[k] {
			if err := add(k, v); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

func parseBase(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("queen: broker URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("queen: broker URL %q: want http(s)://host[:port]", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	return u, nil
}

// URL returns the broker URL in use.
func (c *Client) URL() string { return c.urls[int(c.cur.Load())%len(c.urls)] }

// newCall starts a call to route (under /api/v1/ephemeral) bounded by
// timeout; the caller appends the query to cl.target and the body to
// cl.body.
func newCall(method, route string, timeout time.Duration) *call {
	return newCallUnder(apiPrefix, method, route, timeout)
}

// newCallUnder is newCall for a route under prefix.
func newCallUnder(prefix, method, route string, timeout time.Duration) *call {
	cl := getCall(method, route)
	cl.prefix = prefix
	cl.target = append(cl.target[:0], prefix...)
	cl.target = append(cl.target, route...)
	cl.timeout = timeout
	return cl
}

// jsonBody marshals body into cl.
func (cl *call) jsonBody(body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("queen: encoding the %s body: %w", cl.route, err)
	}
	cl.body = append(cl.body[:0], b...)
	cl.hasBody = true
	return nil
}

// exchange runs cl and decodes its 2xx answer into out (when not nil). depth
// says the route is the depth read, the one route whose 404 is a code of
// its own. A call refused by the cell is sent again (roundTripCell).
func (c *Client) exchange(ctx context.Context, cl *call, depth bool, out any) error {
	err := c.roundTripCell(ctx, cl)
	if err == nil {
		err = c.answer(cl, depth, out)
	}
	release(cl, err)
	return err
}

// roundTripCell is roundTrip, sending cl again while the broker answers it
// with a cell refusal (cellretry.go), within WithTimeout and ctx. When it
// gives up it answers the last refusal as an *Error (joined with ctx's
// error when ctx ended); cl is then the caller's to release.
func (c *Client) roundTripCell(ctx context.Context, cl *call) error {
	start := time.Now()
	err := c.roundTrip(ctx, cl)
	if err != nil || cl.ans.status != 503 {
		return err // the common path: no retry state at all
	}
	r := newCellRetry(start, c.timeout)
	for {
		e := cellRefusal(cl)
		if e == nil {
			return nil // another 503: answer reports it
		}
		r.refreshView(ctx, c)
		if err := r.again(ctx, e); err != nil {
			return err
		}
		left := r.left()
		if left < 0 {
			// The wait overran the bound (a goroutine descheduled past
			// the reserve on a loaded machine): a send now would take a
			// whole WithTimeout more.
			return e
		}
		if left > 0 && (cl.timeout == 0 || left < cl.timeout) {
			cl.timeout = left // the retries stay within the first send's bound
		}
		if err := c.roundTrip(ctx, cl); err != nil || cl.ans.status != 503 {
			return err
		}
	}
}

// answer turns cl's answer into an *Error (non-2xx) or decodes it into out.
func (c *Client) answer(cl *call, depth bool, out any) error {
	if cl.ans.status < 200 || cl.ans.status > 299 {
		own404 := ""
		if depth {
			own404 = CodeQueueNotFound
		}
		return apiError(cl.ans, cl.resp, cl.method, cl.prefix+cl.route, own404)
	}
	if out != nil {
		if err := json.Unmarshal(cl.resp, out); err != nil {
			return fmt.Errorf("queen: %s %s: decoding the answer: %w", cl.method, cl.route, err)
		}
	}
	return nil
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// apiError decodes a refusal. own404 is the code a 404 of this route
// carries when the route itself answered it (the depth read's, a grant
// read's); "" for the routes that never answer 404.
func apiError(a answer, data []byte, method, path string, own404 string) *Error {
	e := &Error{Status: a.status, Method: method, Path: path, Attempts: 1}
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(data, &body) == nil {
		e.Code, e.Message = body.Code, body.Error
	} else {
		e.Message = strings.TrimSpace(string(data[:min(len(data), 512)]))
	}
	if e.Status == http.StatusNotFound && (own404 == "" || e.Code != own404) {
		// The one 404 of the family is the depth read's (and a grant
		// read's on the system routes); any other means the broker or a
		// proxy predates the routes.
		e.Code = CodeUnsupported
	}
	if ra := a.retryAfter; ra != "" {
		if s, err := strconv.Atoi(strings.TrimSpace(ra)); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(0, time.Until(t))
		}
	}
	return e
}

// Configure declares queue with opts (clamped by the broker to its
// ceilings) and answers the stored declaration. The declaration survives
// restarts; the contents never do.
func (c *Client) Configure(ctx context.Context, queue string, opts QueueOptions) (*ConfigureResult, error) {
	var out ConfigureResult
	cl := newCall(http.MethodPost, "/configure", c.timeout)
	cl.safe = true // it replaces the declaration: twice is once
	if err := cl.jsonBody(struct {
		Queue   string       `json:"queue"`
		Options QueueOptions `json:"options"`
	}{queue, opts}); err != nil {
		putCall(cl)
		return nil, err
	}
	if err := c.exchange(ctx, cl, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Payloads turns a slice of any type into what [Client.Push] takes, so a
// []Event is pushed as client.Payloads(events...) without a loop. Each
// element is marshalled to JSON by Push (a json.RawMessage is sent as is).
func Payloads[T any](items ...T) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

// encodePayloads marshals payloads for the buffer, which keeps them until
// a batch leaves.
func encodePayloads(payloads []any) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(payloads))
	for i, p := range payloads {
		if raw, ok := p.(json.RawMessage); ok {
			if _, err := appendRaw(nil, i, raw); err != nil {
				return nil, err
			}
			if bytes.ContainsAny(raw, " \t\r\n") {
				raw, _ = appendRaw(nil, i, raw)
			}
			out[i] = raw
			continue
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("queen: encoding payload %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}

// Push appends payloads (each marshalled to JSON; a json.RawMessage is sent
// as is; [Payloads] makes them from a slice of any type) to queue, wrapped
// as {payload}. The push is all or nothing; the
// queue is created implicitly when it does not exist.
//
// With opts.Buffered, the messages are queued in the client and sent in
// batches (see [BufferOptions]); Push then blocks while the client already
// holds MaxPending buffered messages, until room is made or ctx ends, and
// answers how many messages the buffer accepted. A buffered push first
// reports (and forgets) any flush of the same queue and partition that
// finally failed, accepting nothing in that call.
//
// A push refused by the cell (CodeOwnerMoved, CodeForwardFailed: nothing
// was appended, the push being all or nothing) is sent again after a
// backoff (or the Retry-After the broker sent), within WithTimeout and
// ctx; the last refusal is returned when they end first. A push whose
// answer was lost is never sent again (docs/sdk-transport.md).
func (c *Client) Push(ctx context.Context, queue string, payloads []any, opts PushOptions) (*PushResult, error) {
	if opts.Buffered {
		msgs, err := encodePayloads(payloads)
		if err != nil {
			return nil, err
		}
		return c.pushBuffered(ctx, queue, opts.Partition, msgs)
	}
	cl, err := c.pushCall(queue, opts.Partition, payloads)
	if err != nil {
		return nil, err
	}
	return c.push(ctx, cl, true)
}

// pushCall makes the call of an unbuffered push of payloads.
func (c *Client) pushCall(queue, partition string, payloads []any) (*call, error) {
	cl := newCall(http.MethodPost, "/push", c.timeout)
	cl.queue = queue
	cl.hasBody = true
	cl.body = appendPushHead(cl.body[:0], queue, partition)
	for i, p := range payloads {
		cl.body = appendMessageOpen(cl.body, i)
		var err error
		if cl.body, err = appendPayload(cl.body, i, p); err != nil {
			putCall(cl)
			return nil, err
		}
		cl.body = append(cl.body, '}')
	}
	cl.body = appendPushTail(cl.body)
	if c.isClosed() {
		putCall(cl)
		return nil, ErrClosed
	}
	return cl, nil
}

// pushNow sends msgs (already JSON) at once: the buffer's flushes, which
// retry a cell refusal (as any 429 or 503) by their own rule, so it is
// not retried here.
func (c *Client) pushNow(ctx context.Context, queue, partition string, msgs []json.RawMessage) (*PushResult, error) {
	cl := newCall(http.MethodPost, "/push", c.timeout)
	cl.queue = queue
	cl.hasBody = true
	cl.body = appendPushHead(cl.body[:0], queue, partition)
	for i, m := range msgs {
		cl.body = appendMessageOpen(cl.body, i)
		cl.body = append(cl.body, m...)
		cl.body = append(cl.body, '}')
	}
	cl.body = appendPushTail(cl.body)
	return c.push(ctx, cl, false)
}

// push sends the push cl; with cell, a cell refusal is sent again
// (roundTripCell).
func (c *Client) push(ctx context.Context, cl *call, cell bool) (*PushResult, error) {
	n, err := c.pushed(ctx, cl, cell)
	if err != nil {
		return nil, err
	}
	return &PushResult{Pushed: n}, nil
}

// pushed is push answering the count alone (a Reply, which has no use for
// a PushResult of its own).
func (c *Client) pushed(ctx context.Context, cl *call, cell bool) (int, error) {
	var err error
	if cell {
		err = c.roundTripCell(ctx, cl)
	} else {
		err = c.roundTrip(ctx, cl)
	}
	var n int
	if err == nil {
		if err = c.answer(cl, false, nil); err == nil {
			n, err = decodePushed(cl.resp)
		}
	}
	release(cl, err)
	return n, err
}

// popCall builds the pop of queue with opts. The call parks when
// opts.Wait, so it takes a connection of its own.
func (c *Client) popCall(queue string, opts PopOptions) *call {
	timeout := c.timeout
	if opts.Wait {
		if opts.Timeout > 0 {
			timeout += opts.Timeout
		} else {
			timeout = 0 // the broker's default, unknown here: ctx bounds it
		}
	}
	cl := newCall(http.MethodGet, "/pop", timeout)
	cl.queue = queue
	cl.exclusive = opts.Wait
	t := appendQuery(cl.target, true, "queue", queue)
	if opts.Partition != "" {
		t = appendQuery(t, false, "partition", opts.Partition)
	}
	if opts.Group != "" {
		t = appendQuery(t, false, "group", opts.Group)
	}
	if opts.Batch > 0 {
		t = append(t, "&batch="...)
		t = strconv.AppendInt(t, int64(opts.Batch), 10)
	}
	if opts.Wait {
		t = append(t, "&wait=true"...)
	}
	if opts.Timeout > 0 {
		t = append(t, "&timeout="...)
		t = strconv.AppendInt(t, max(1, opts.Timeout.Milliseconds()), 10)
	}
	if opts.AutoAck {
		t = append(t, "&autoAck=true"...)
	}
	cl.target = t
	return cl
}

// Pop takes up to opts.Batch messages from queue. With opts.Wait it parks
// until a message arrives or the timeout passes; an empty result is not an
// error. Without AutoAck each message is leased and must be acked with the
// same group, or it is redelivered when the lease expires.
//
// A pop refused by the cell (CodeOwnerMoved, CodeForwardFailed: nothing was
// taken) is sent again after a backoff, a waiting pop with what is left of
// its Timeout, until that Timeout (WithTimeout for a pop that does not
// wait or leaves the timeout to the broker) or ctx ends; the last refusal
// is then returned.
func (c *Client) Pop(ctx context.Context, queue string, opts PopOptions) (*PopResult, error) {
	start := time.Now()
	var r cellRetry
	for {
		cl := c.popCall(queue, opts)
		err := c.roundTrip(ctx, cl)
		if err == nil && cl.ans.status == 503 {
			if e := cellRefusal(cl); e != nil {
				putCall(cl)
				if r.attempts == 0 {
					budget := c.timeout
					if opts.Wait && opts.Timeout > 0 {
						budget = opts.Timeout
					}
					r = newCellRetry(start, budget)
				}
				r.refreshView(ctx, c)
				if err := r.again(ctx, e); err != nil {
					return nil, err
				}
				if opts.Wait && opts.Timeout > 0 {
					// The wait is the caller's, not each send's.
					if opts.Timeout = r.left(); opts.Timeout < time.Millisecond {
						return nil, e
					}
				}
				continue
			}
		}
		var out *PopResult
		if err == nil {
			out, err = c.popAnswer(cl, queue)
		}
		release(cl, err)
		return out, err
	}
}

func (c *Client) popAnswer(cl *call, queue string) (*PopResult, error) {
	out := new(PopResult)
	if err := c.popAnswerInto(cl, queue, out); err != nil {
		return nil, err
	}
	return out, nil
}

// popAnswerInto is popAnswer into out (a Request's, on its stack).
func (c *Client) popAnswerInto(cl *call, queue string, out *PopResult) error {
	if err := c.answer(cl, false, nil); err != nil {
		return err
	}
	if err := decodePop(cl.resp, queue, out); err != nil {
		return fmt.Errorf("queen: %s %s: decoding the answer: %w", cl.method, cl.route, err)
	}
	return nil
}

// Ack settles messages (only their ID is used) for opts.Group with
// opts.Status, answering one outcome per id. Ids minted by a broker
// incarnation that is gone answer OutcomeStale, not an error.
//
// An ack refused by the cell (CodeOwnerMoved, CodeForwardFailed: nothing
// was settled) is sent again after a backoff, within WithTimeout and ctx.
// After an ownership move its ids answer OutcomeStale wherever they land:
// the move dropped their leases, and the retry learns that rather than an
// error.
func (c *Client) Ack(ctx context.Context, queue string, messages []Message, opts AckOptions) (*AckResult, error) {
	return c.ack(ctx, queue, len(messages), func(i int) string { return messages[i].ID }, opts)
}

// AckIDs settles messages by id, for ids kept apart from the messages they
// came with (a log, a queue of work items, another process): the same
// request and answer as Ack.
func (c *Client) AckIDs(ctx context.Context, queue string, ids []string, opts AckOptions) (*AckResult, error) {
	return c.ack(ctx, queue, len(ids), func(i int) string { return ids[i] }, opts)
}

// ack sends the ack of n messages, the i-th's id given by id(i).
func (c *Client) ack(ctx context.Context, queue string, n int, id func(int) string, opts AckOptions) (*AckResult, error) {
	cl := newCall(http.MethodPost, "/ack", c.timeout)
	cl.queue = queue
	cl.hasBody = true
	b := append(cl.body[:0], `{"queue":`...)
	b = wire.AppendString(b, queue)
	if opts.Group != "" {
		b = append(b, `,"group":`...)
		b = wire.AppendString(b, opts.Group)
	}
	b = append(b, `,"acks":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = wire.AppendString(b, id(i))
		if opts.Status != "" {
			b = append(b, `,"status":`...)
			b = wire.AppendString(b, opts.Status)
		}
		b = append(b, '}')
	}
	cl.body = append(b, "]}"...)
	var out AckResult
	if err := c.exchange(ctx, cl, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reset drops every message of queue, voids every lease and rewinds every
// cursor; the declaration stays. A queue that is not there reports 0.
func (c *Client) Reset(ctx context.Context, queue string) (*ResetResult, error) {
	var out ResetResult
	cl := newCall(http.MethodPost, "/reset", c.timeout)
	cl.hasBody = true
	cl.body = append(wire.AppendString(append(cl.body[:0], `{"queue":`...), queue), '}')
	if err := c.exchange(ctx, cl, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes queue's contents, cursors and declaration. A queue that is
// not there answers Deleted false, not an error.
func (c *Client) Delete(ctx context.Context, queue string) (*DeleteResult, error) {
	var out DeleteResult
	cl := newCall(http.MethodDelete, "/queue/"+url.PathEscape(queue), c.timeout)
	if err := c.exchange(ctx, cl, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Queues lists every queue of the tenant on this broker, with its gauges
// and the options in force.
func (c *Client) Queues(ctx context.Context) (*QueuesResult, error) {
	var out QueuesResult
	cl := newCall(http.MethodGet, "/queues", c.timeout)
	cl.safe = true
	if err := c.exchange(ctx, cl, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Depth reads one queue per partition and per group. A queue that does not
// exist is an *Error with CodeQueueNotFound (404).
func (c *Client) Depth(ctx context.Context, queue string, opts DepthOptions) (*DepthResult, error) {
	var out DepthResult
	cl := newCall(http.MethodGet, "/queues/"+url.PathEscape(queue)+"/depth", c.timeout)
	cl.queue = queue // a member answers the depth of the queues it owns
	cl.safe = true
	if opts.Group != "" {
		cl.target = appendQuery(cl.target, true, "group", opts.Group)
	}
	if err := c.exchange(ctx, cl, true, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close flushes every buffered push (waiting for them until ctx ends),
// stops the client's Consume loops (without waiting for them to return)
// and flushers, and closes its connections (those carrying a call once it
// is answered). It reports every flush that failed. Calls made after Close
// began answer ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.Flush(ctx)
	c.cancel()
	c.mu.Lock()
	for _, b := range c.buffers {
		b.stop()
	}
	c.mu.Unlock()
	c.wg.Wait()
	// Flushers stopped by the cancel report what they could not deliver.
	err = errors.Join(err, c.takeFlushErrors())
	for _, ep := range c.eps {
		ep.closeIdle()
	}
	c.closeMembers()
	return err
}
