package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Cell refusals (docs/sdk-transport.md, "Cell refusals").
//
// In a cell of several brokers a push, pop or ack that lands on a member
// that does not own the queue is relayed to the owner. Two answers come
// from that relay and not from the queue: 503 owner_moved (the member the
// relay reached no longer owns the queue, and the request was not served)
// and 503 ephemeral_forward_failed (the owner could not be reached). Both
// are answers: the broker says the request was not applied (a push is all
// or nothing, and neither was appended anywhere), so sending it again
// cannot duplicate anything, and the transport's rule (never repeat a call
// whose answer was lost) is not in play. The client sends such a call
// again after an exponential backoff with jitter (10 ms doubling to 1 s),
// or after Retry-After when the broker sends one (the broker sends 1 s on
// forward_failed), each wait capped by what the call's own bound (WithTimeout for a
// short call, the wait of a waiting pop, the timeout of a Request) and its
// context's deadline leave. When nothing is left of either, the last
// refusal is returned as is: its code says what happened. The cell is meant to be invisible to clients (the spec: nothing
// for a client to configure), and a membership change settles within a
// heartbeat or a member timeout, which is what this waits out.

const (
	cellBackoffMin = 10 * time.Millisecond
	cellBackoffMax = time.Second
	// cellReserve is the least time a send after a wait must have before
	// the call's bound or ctx's deadline: one sent with less would likely
	// be cut short, and a push cut short is reported as "may have been
	// applied" instead of the refusal that proves it was not.
	cellReserve = 50 * time.Millisecond
)

// isCellCode reports whether code is one of the two refusals a relay
// answers for a request it did not apply.
func isCellCode(code string) bool { return code == CodeOwnerMoved || code == CodeForwardFailed }

// cellRefusal answers the *Error of cl's answer when it is a 503 with one
// of the cell's codes, else nil. It decodes only a 503's body.
func cellRefusal(cl *call) *Error {
	if cl.ans.status != 503 {
		return nil
	}
	if e := apiError(cl.ans, cl.resp, cl.method, cl.prefix+cl.route, ""); isCellCode(e.Code) {
		return e
	}
	return nil
}

// cellRetry paces the retries of one call refused by the cell. Its zero
// value is not ready: build it with newCellRetry when the call starts.
type cellRetry struct {
	deadline time.Time // the call's own bound; zero: ctx's alone
	backoff  time.Duration
	attempts int // sends so far
}

// newCellRetry starts the retries of a call sent first at start and
// bounded by budget from then (0 or less: no bound but the context's).
func newCellRetry(start time.Time, budget time.Duration) cellRetry {
	r := cellRetry{backoff: cellBackoffMin, attempts: 1}
	if budget > 0 {
		r.deadline = start.Add(budget)
	}
	return r
}

// left is the time left of the call's bound (0 when it has none).
func (r *cellRetry) left() time.Duration {
	if r.deadline.IsZero() {
		return 0
	}
	return time.Until(r.deadline)
}

// again is called with the refusal e of the last send. It waits out the
// backoff (or e's Retry-After) and answers nil: send again. The wait is
// capped by what the call's bound and ctx's deadline leave, less
// cellReserve for the send: a Retry-After longer than that (the broker's is
// 1 s, the least the header can say, which a short call may not have) ends
// in one more send at the end of the bound rather than in none. It answers
// the error to return when nothing is left: e itself (with Attempts set)
// when the bound or ctx's deadline is within cellReserve, e joined with
// ctx's error when ctx ended during the wait. Nothing is in flight while it
// waits, so a cancellation here never leaves a call that may have been
// applied.
func (r *cellRetry) again(ctx context.Context, e *Error) error {
	e.Attempts = r.attempts
	wait := r.next(ctx, e)
	if wait <= 0 {
		return e
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		r.attempts++
		return nil
	case <-ctx.Done():
		return &cellStopped{e, ctx.Err()}
	}
}

// next is the wait before the send after refusal e, and doubles the
// backoff: half the backoff to all of it (jitter), or e's Retry-After,
// capped by what the call's bound and ctx's deadline leave less
// cellReserve. At or below 0 nothing is left to wait for a send.
func (r *cellRetry) next(ctx context.Context, e *Error) time.Duration {
	wait := r.backoff/2 + rand.N(r.backoff/2+1)
	if e.RetryAfter > 0 {
		wait = e.RetryAfter
	}
	r.backoff = min(2*r.backoff, cellBackoffMax)
	if !r.deadline.IsZero() {
		wait = min(wait, time.Until(r.deadline)-cellReserve)
	}
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(d)-cellReserve)
	}
	return wait
}

// refreshView is c.refreshView, the view read after a cell refusal, within
// what the call's bound leaves less cellReserve: a view read held by a
// member that is paused or dying must not carry the call past its bound
// (refreshBound alone is longer than the default WithTimeout leaves after
// a slow first send).
func (r *cellRetry) refreshView(ctx context.Context, c *Client) {
	if end, ok := r.refreshEnd(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	c.refreshView(ctx)
}

// refreshEnd is when a view read after a refusal must have ended: cellReserve
// before the call's bound, so that a send is still possible; false when the
// call has no bound but its context's.
func (r *cellRetry) refreshEnd() (time.Time, bool) {
	if r.deadline.IsZero() {
		return time.Time{}, false
	}
	return r.deadline.Add(-cellReserve), true
}

// cellStopped is a cell refusal whose retries the caller's context ended:
// it matches both (errors.Is with the context's error, errors.As and
// CodeOf with the refusal).
type cellStopped struct {
	refusal *Error
	ctxErr  error
}

func (s *cellStopped) Error() string {
	return fmt.Sprintf("%v (retries stopped: %v)", s.refusal, s.ctxErr)
}

func (s *cellStopped) Unwrap() []error { return []error{s.refusal, s.ctxErr} }

// pause is how long a loop (Consume, Serve) waits after err before it
// polls again: the broker's Retry-After when it sent one, else backoff with
// jitter.
func pause(backoff time.Duration, err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	return backoff/2 + rand.N(backoff/2+1)
}
