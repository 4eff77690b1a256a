package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const apiPrefix = "/api/v1/ephemeral"

// Client speaks to one broker, or to several with failover. It is safe for
// concurrent use; build it with [New] and end it with [Client.Close].
type Client struct {
	urls    []string
	cur     atomic.Int64 // index into urls of the broker in use
	http    *http.Client
	token   string
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
}

// Option configures a [Client].
type Option func(*Client)

// WithURLs adds brokers tried in turn when the one in use cannot be
// reached (a refused or failed connection).
func WithURLs(urls ...string) Option {
	return func(c *Client) { c.urls = append(c.urls, urls...) }
}

// WithToken sends "Authorization: Bearer token" on every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHeader sends a header on every request.
func WithHeader(key, value string) Option {
	return func(c *Client) { c.headers.Add(key, value) }
}

// WithHTTPClient replaces the HTTP client (the default keeps up to 256
// idle keep-alive connections per broker and has no overall timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithTimeout bounds each request that is not a waiting pop (default 30 s);
// a waiting pop is bounded by its own timeout plus this.
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
// a proxy.
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
	for i, u := range c.urls {
		p, err := parseBase(u)
		if err != nil {
			return nil, err
		}
		c.urls[i] = p
	}
	if c.http == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = 256
		tr.IdleConnTimeout = 90 * time.Second
		tr.DisableCompression = true
		c.http = &http.Client{Transport: tr}
	}
	c.slots = make(chan struct{}, c.buf.MaxPending)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

func parseBase(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("queen: broker URL %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("queen: broker URL %q: want http(s)://host[:port]", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// URL returns the broker URL in use.
func (c *Client) URL() string { return c.urls[int(c.cur.Load())%len(c.urls)] }

// call is one request. route is the path under /api/v1/ephemeral. depth
// says the route is the depth read, the one route whose 404 is a code of its
// own. out, when not nil, receives the decoded 2xx body.
func (c *Client) call(ctx context.Context, method, route string, query url.Values, body any, timeout time.Duration, depth bool, out any) error {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return fmt.Errorf("queen: encoding the %s body: %w", route, err)
		}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	path := apiPrefix + route
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	n := int64(len(c.urls))
	start := c.cur.Load()
	var lastErr error
	for i := int64(0); i < n; i++ {
		idx := (start + i) % n
		req, err := http.NewRequestWithContext(ctx, method, c.urls[idx]+path, bytes.NewReader(payload))
		if err != nil {
			return fmt.Errorf("queen: %w", err)
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Accept", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		for k, vs := range c.headers {
			req.Header[k] = append([]string(nil), vs...)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			lastErr = fmt.Errorf("queen: %s %s: %w", method, c.urls[idx]+apiPrefix+route, err)
			if ctx.Err() == nil && n > 1 && isDialError(err) {
				continue
			}
			return lastErr
		}
		if idx != start {
			c.cur.CompareAndSwap(start, idx)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("queen: %s %s: reading the answer: %w", method, route, err)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return apiError(resp, data, method, apiPrefix+route, depth)
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return fmt.Errorf("queen: %s %s: decoding the answer: %w", method, route, err)
			}
		}
		return nil
	}
	return lastErr
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func apiError(resp *http.Response, data []byte, method, path string, depth bool) *Error {
	e := &Error{Status: resp.StatusCode, Method: method, Path: path}
	var body struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(data, &body) == nil {
		e.Code, e.Message = body.Code, body.Error
	} else {
		e.Message = strings.TrimSpace(string(data[:min(len(data), 512)]))
	}
	if e.Status == http.StatusNotFound && (!depth || e.Code != CodeQueueNotFound) {
		// The one 404 of the family is the depth read's; any other means
		// the broker or a proxy predates the routes.
		e.Code = CodeUnsupported
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
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
	body := struct {
		Queue   string       `json:"queue"`
		Options QueueOptions `json:"options"`
	}{queue, opts}
	if err := c.call(ctx, http.MethodPost, "/configure", nil, body, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// wireMessage is one element of a push's messages.
type wireMessage struct {
	Payload json.RawMessage `json:"payload"`
}

func encodePayloads(payloads []any) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(payloads))
	for i, p := range payloads {
		if raw, ok := p.(json.RawMessage); ok {
			if !json.Valid(raw) {
				return nil, fmt.Errorf("queen: payload %d is not valid JSON", i)
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
// as is) to queue, wrapped as {payload}. The push is all or nothing; the
// queue is created implicitly when it does not exist.
//
// With opts.Buffered, the messages are queued in the client and sent in
// batches (see [BufferOptions]); Push then blocks while the client already
// holds MaxPending buffered messages, until room is made or ctx ends, and
// answers how many messages the buffer accepted. A buffered push first
// reports (and forgets) any flush of the same queue and partition that
// finally failed, accepting nothing in that call.
func (c *Client) Push(ctx context.Context, queue string, payloads []any, opts PushOptions) (*PushResult, error) {
	msgs, err := encodePayloads(payloads)
	if err != nil {
		return nil, err
	}
	if opts.Buffered {
		return c.pushBuffered(ctx, queue, opts.Partition, msgs)
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	return c.pushNow(ctx, queue, opts.Partition, msgs)
}

func (c *Client) pushNow(ctx context.Context, queue, partition string, msgs []json.RawMessage) (*PushResult, error) {
	wire := make([]wireMessage, len(msgs))
	for i, m := range msgs {
		wire[i].Payload = m
	}
	body := struct {
		Queue     string        `json:"queue"`
		Partition string        `json:"partition,omitempty"`
		Messages  []wireMessage `json:"messages"`
	}{queue, partition, wire}
	var out PushResult
	if err := c.call(ctx, http.MethodPost, "/push", nil, body, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pop takes up to opts.Batch messages from queue. With opts.Wait it parks
// until a message arrives or the timeout passes; an empty result is not an
// error. Without AutoAck each message is leased and must be acked with the
// same group, or it is redelivered when the lease expires.
func (c *Client) Pop(ctx context.Context, queue string, opts PopOptions) (*PopResult, error) {
	q := url.Values{"queue": {queue}}
	if opts.Partition != "" {
		q.Set("partition", opts.Partition)
	}
	if opts.Group != "" {
		q.Set("group", opts.Group)
	}
	if opts.Batch > 0 {
		q.Set("batch", strconv.Itoa(opts.Batch))
	}
	timeout := c.timeout
	if opts.Wait {
		q.Set("wait", "true")
		if opts.Timeout > 0 {
			timeout += opts.Timeout
		} else {
			timeout = 0 // the broker's default, unknown here: ctx bounds it
		}
	}
	if opts.Timeout > 0 {
		q.Set("timeout", strconv.FormatInt(max(1, opts.Timeout.Milliseconds()), 10))
	}
	if opts.AutoAck {
		q.Set("autoAck", "true")
	}
	var out PopResult
	if err := c.call(ctx, http.MethodGet, "/pop", q, nil, timeout, false, &out); err != nil {
		return nil, err
	}
	if out.Messages == nil {
		out.Messages = []Message{}
	}
	for i := range out.Messages {
		out.Messages[i].Queue = queue
	}
	return &out, nil
}

type ackItem struct {
	ID     string `json:"id"`
	Status string `json:"status,omitempty"`
}

// Ack settles messages (only their ID is used) for opts.Group with
// opts.Status, answering one outcome per id. Ids minted by a broker
// incarnation that is gone answer OutcomeStale, not an error.
func (c *Client) Ack(ctx context.Context, queue string, messages []Message, opts AckOptions) (*AckResult, error) {
	items := make([]ackItem, len(messages))
	for i, m := range messages {
		items[i] = ackItem{ID: m.ID, Status: opts.Status}
	}
	return c.ack(ctx, queue, opts.Group, items)
}

func (c *Client) ack(ctx context.Context, queue, group string, items []ackItem) (*AckResult, error) {
	body := struct {
		Queue string    `json:"queue"`
		Group string    `json:"group,omitempty"`
		Acks  []ackItem `json:"acks"`
	}{queue, group, items}
	var out AckResult
	if err := c.call(ctx, http.MethodPost, "/ack", nil, body, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reset drops every message of queue, voids every lease and rewinds every
// cursor; the declaration stays. A queue that is not there reports 0.
func (c *Client) Reset(ctx context.Context, queue string) (*ResetResult, error) {
	var out ResetResult
	body := struct {
		Queue string `json:"queue"`
	}{queue}
	if err := c.call(ctx, http.MethodPost, "/reset", nil, body, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Delete removes queue's contents, cursors and declaration. A queue that is
// not there answers Deleted false, not an error.
func (c *Client) Delete(ctx context.Context, queue string) (*DeleteResult, error) {
	var out DeleteResult
	if err := c.call(ctx, http.MethodDelete, "/queue/"+url.PathEscape(queue), nil, nil, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Queues lists every queue of the tenant on this broker, with its gauges
// and the options in force.
func (c *Client) Queues(ctx context.Context) (*QueuesResult, error) {
	var out QueuesResult
	if err := c.call(ctx, http.MethodGet, "/queues", nil, nil, c.timeout, false, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Depth reads one queue per partition and per group. A queue that does not
// exist is an *Error with CodeQueueNotFound (404).
func (c *Client) Depth(ctx context.Context, queue string, opts DepthOptions) (*DepthResult, error) {
	var q url.Values
	if opts.Group != "" {
		q = url.Values{"group": {opts.Group}}
	}
	var out DepthResult
	if err := c.call(ctx, http.MethodGet, "/queues/"+url.PathEscape(queue)+"/depth", q, nil, c.timeout, true, &out); err != nil {
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
// and flushers, and releases its idle connections. It reports every flush that failed. Calls made after Close
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
	c.http.CloseIdleConnections()
	return err
}
