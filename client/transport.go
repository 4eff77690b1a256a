package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The transport (docs/sdk-transport.md, "Go client").
//
// Each broker URL is an endpoint. An http:// URL is served by a pool of
// our own HTTP/1.1 connections (pool.go): short calls are pipelined on a
// few shared connections (shared.go), a waiting pop and a Request's
// push-and-pop take a connection of their own for their duration. An
// https:// URL, or any URL when WithHTTPClient was given, is served by
// net/http (nethttp.go).
//
// The retry rule. A call is sent again, on another connection, only when
// it provably never reached the broker, or when it is safe to repeat:
//   - the connection could not be dialled: the next URL is tried (failover);
//   - the call was never written (its connection had failed, or an earlier
//     answer on it said "Connection: close", after which a server does not
//     read the requests pipelined behind it): it is sent again;
//   - the connection failed before any byte of the call's answer arrived
//     and the call is safe to repeat (the listing, the depth read,
//     configure, which replaces the declaration with the same one): it is
//     sent again.
//
// Anything else, a push, a pop, an ack, a reset or a delete whose answer
// did not arrive, is reported as an error and never silently repeated: the
// broker may have applied it. A call is sent at most maxAttempts times per
// URL (maxResends when it was never read).

// endpoint is one broker URL's transport.
type endpoint interface {
	// do sends c and waits for its answer (c.ans, c.resp).
	do(ctx context.Context, c *call) error
	// pair sends push and pop together and reads both answers; when push
	// is refused (non-2xx) pop is left unread and its connection closed.
	pair(ctx context.Context, push, pop *call) error
	// batch sends calls together and reads every answer in order; a call
	// left unread (behind a "Connection: close") keeps a zero status.
	// answered, when not nil, is called with each call as soon as its
	// answer is read, before the answers behind it (Serve: a reply is
	// retried while the pop behind it is parked).
	batch(ctx context.Context, calls []*call, answered func(*call)) error
	// closeIdle closes the connections nothing is using.
	closeIdle()
}

// maxAttempts bounds the sends of a call that may be repeated because it
// is safe to; maxResends those of a call that was never read by the
// broker (pipelined behind a "Connection: close"), which many calls
// queued on connections a server closes after each answer can need.
const (
	maxAttempts = 3
	maxResends  = 16
)

// call is one request and, once answered, its answer. Calls are pooled
// (getCall, putCall): target, body and resp keep their capacity, so a warm
// client allocates no buffer per call. A call is owned by the goroutine
// that made it, except while a shared connection holds it: then the
// connection's reader fills the answer and hands it back through done,
// or, when the caller gave up (state callAbandoned), recycles it.
type call struct {
	method string
	prefix string // apiPrefix, or systemPrefix for the system routes
	route  string // for messages: "/push"
	// queue: the queue whose owner serves the call (push, pop, ack, the
	// depth read: owner.go routes it); "" for the others.
	queue   string
	target  []byte // prefix + route + query, escaped
	body    []byte
	hasBody bool
	// safe: repeating the call changes nothing (the retry rule).
	safe bool
	// exclusive: the call may park (a waiting pop): never on a shared
	// pipeline, where it would hold up the calls behind it.
	exclusive bool
	// timeout bounds the answer's arrival; 0 is none.
	timeout  time.Duration
	deadline time.Time // from timeout, set when the call is sent

	ans  answer
	resp []byte
	err  error

	done  chan struct{} // capacity 1
	state atomic.Int32

	// On a link (linkcall.go): the call's stream, its timer (kept with
	// the pooled call), and a "busy" refusal to pause on.
	stream uint64
	timer  *time.Timer
	busy   bool

	// tok: the token source's token for this call (tokensource.go), nil
	// without a source.
	tok *bearer
}

const (
	callWaiting int32 = iota
	callDone
	callAbandoned
)

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall(method, route string) *call {
	c := callPool.Get().(*call)
	c.method, c.route = method, route
	return c
}

// putCall recycles c; buffers that grew past 1 MiB are dropped so one large
// listing does not pin memory in the pool.
func putCall(c *call) {
	if cap(c.resp) > 1<<20 {
		c.resp = nil
	}
	if cap(c.body) > 1<<20 {
		c.body = nil
	}
	c.target, c.body, c.resp = c.target[:0], c.body[:0], c.resp[:0]
	c.hasBody, c.safe, c.exclusive = false, false, false
	c.queue = ""
	c.timeout, c.deadline = 0, time.Time{}
	c.ans, c.err = answer{}, nil
	c.busy, c.tok = false, nil
	c.state.Store(callWaiting)
	callPool.Put(c)
}

// complete hands c's outcome to its caller, or recycles c when the caller
// gave up on it. Only a shared connection's reader calls it.
func complete(c *call, err error) {
	c.err = err
	if c.state.CompareAndSwap(callWaiting, callDone) {
		c.done <- struct{}{}
		return
	}
	putCall(c)
}

// await waits for a call handed to a shared connection.
func await(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return abandonedError{ctx.Err()}
		}
		<-c.done // the answer won the race
		return c.err
	}
}

// abandonedError: the caller stopped waiting (its ctx ended) while a
// shared connection still holds the call; the connection's reader will
// recycle it, so the caller must not.
type abandonedError struct{ err error }

func (e abandonedError) Error() string { return e.err.Error() }
func (e abandonedError) Unwrap() error { return e.err }

// connError is a transport failure of one call.
type connError struct {
	err error
	// dial: no connection could be made (the next URL is tried).
	dial bool
	// retry: the call provably did not reach the broker, or it is safe
	// to repeat and none of its answer had arrived.
	retry bool
	// unsent: the broker never read the call (a kind of retry).
	unsent bool
	// maybeApplied: the request was written and its answer is missing or
	// torn: the broker may have applied it.
	maybeApplied bool
}

func (e *connError) Error() string {
	if e.maybeApplied {
		return "the connection failed before the answer was read (the broker may have applied the call): " + e.err.Error()
	}
	return e.err.Error()
}

func (e *connError) Unwrap() error { return e.err }

// errServerClosed fails the calls pipelined behind an answer that said
// "Connection: close": the server did not read them.
var errServerClosed = errors.New("the broker closed the connection after an earlier answer")

// ioFailure classifies the failure of call c on a connection: started says
// whether any byte of its answer had arrived.
// A timeout is never retried: the broker may only be slow, and a retry
// would double the wait.
func ioFailure(c *call, err error, started bool) *connError {
	return &connError{err: err, retry: !started && c.safe && !isTimeout(err), maybeApplied: !c.safe || started}
}

// roundTrip sends cl to its queue's owner in a cell (owner.go), or to the
// broker in use, failing over to the next URL when one cannot be dialled,
// and retrying by the retry rule. On success cl.ans and cl.resp hold the
// answer. The caller releases cl with release(cl, err).
func (c *Client) roundTrip(ctx context.Context, cl *call) error {
	// A call whose context has ended sends nothing: handed to a pipelined
	// connection, it would be written while its caller is told it failed.
	if err := ctx.Err(); err != nil {
		return err
	}
	c.watchCell()
	if err := c.authorize(ctx, cl); err != nil {
		return err
	}
	if m := c.owner(cl.queue); m != nil {
		if done, err := c.onOwner(ctx, m, cl.method, cl.prefix, cl.route, func(ep endpoint) error { return ep.do(ctx, cl) }); done {
			return err
		}
	}
	return c.failoverCell(ctx, cl.method, cl.prefix, cl.route, func(ep endpoint) error { return ep.do(ctx, cl) })
}

// failover runs send against each URL in turn from the one in use; method,
// prefix and route name the call in its errors.
func (c *Client) failover(ctx context.Context, method, prefix, route string, send func(endpoint) error) error {
	n := int64(len(c.eps))
	start := c.cur.Load()
	var lastErr error
	for i := int64(0); i < n; i++ {
		idx := (start + i) % n
		for attempt := 1; ; attempt++ {
			err := send(c.eps[idx])
			if err == nil {
				if idx != start {
					c.cur.CompareAndSwap(start, idx)
				}
				return nil
			}
			lastErr = fmt.Errorf("queen: %s %s: %w", method, c.urls[idx]+prefix+route, err)
			if ctx.Err() != nil {
				return lastErr
			}
			var ce *connError
			if !errors.As(err, &ce) {
				return lastErr
			}
			if ce.dial {
				break // the next URL
			}
			limit := maxAttempts
			if ce.unsent {
				limit = maxResends
			}
			if !ce.retry || attempt >= limit {
				return lastErr
			}
		}
	}
	return lastErr
}

// release recycles cl unless a shared connection still holds it.
func release(cl *call, err error) {
	if err != nil && isAbandoned(err) {
		return
	}
	putCall(cl)
}

// isAbandoned is apart from release so that its errors.As target is
// allocated only on the error path.
func isAbandoned(err error) bool {
	var ab abandonedError
	return errors.As(err, &ab)
}
