package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Responder answers one request of [Client.Serve]: the request's payload
// is m's envelope payload (ParseRequest), and what it answers is pushed to
// the request's inbox (marshalled as a push payload; a json.RawMessage is
// sent as is). An error sends no reply: the requester's Request times out.
type Responder func(ctx context.Context, m Message) (reply any, err error)

// ServeOptions are the options of [Client.Serve].
type ServeOptions struct {
	// Partition restricts the loop to one partition; empty is every one.
	Partition string
	// Batch is the most requests one pop takes (default 16).
	Batch int
	// Wait is each long poll's timeout (default 10 s).
	Wait time.Duration
	// OnError, when set, receives what the loop survives: a request that
	// carries no replyTo, a responder's error or panic, a reply the broker
	// refused or that may not have arrived (never sent twice), and a pop
	// refused with a 429 or 503 or lost with its connection (retried with
	// backoff). A reply refused by the cell (CodeOwnerMoved,
	// CodeForwardFailed: not delivered) is sent again with backoff, and
	// reported only when that ends without delivering it. Calls are made
	// one at a time, not always from Serve's goroutine.
	OnError func(error)
}

// Serve answers the requests [Client.Request] pushes to queue, until ctx
// is cancelled or the client is closed (it then returns nil, after sending
// the replies already made); it returns an error when a pop is refused for
// good (a 4xx other than 429). A pop refused with a 429 or a 503 (the
// cell's owner_moved and ephemeral_forward_failed included) is sent again
// after a backoff, or the Retry-After the broker sent.
//
// It is the responder's side of request/reply, in one loop on one
// goroutine: it pops up to opts.Batch requests (a waiting pop with
// autoAck: a request is delivered at most once, like a NATS request), runs
// r on each in turn and pushes each reply to its request's inbox. The
// replies of a batch and the next waiting pop leave together, in one write
// on one connection, and their answers are read in order, so a batch costs
// the broker one read and the responder one write. Run several Serve loops
// (goroutines) on a queue for concurrency; the broker shares the requests
// among them. [Client.Pop] with [Client.Reply] does the same one call at a
// time.
func (c *Client) Serve(ctx context.Context, queue string, opts ServeOptions, r Responder) error {
	batch := opts.Batch
	if batch <= 0 {
		batch = 16
	}
	wait := opts.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	var errMu sync.Mutex
	onErr := func(err error) {
		if opts.OnError != nil {
			errMu.Lock()
			defer errMu.Unlock()
			opts.OnError(err)
		}
	}
	s := &server{c: c, ctx: ctx, onErr: onErr}
	s.answered = s.onAnswer  // one method value for the loop, not a closure per batch
	defer s.resending.Wait() // after the last replies are sent (defers run last first)

	var replies []*call // the last batch's, sent with the next pop
	defer func() {
		// The replies made before the loop stopped still go, without a pop.
		if len(replies) > 0 {
			sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
			defer scancel()
			s.sendReplies(sctx, replies, nil)
		}
	}()
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		pop := c.popCall(queue, PopOptions{Partition: opts.Partition, Batch: batch, Wait: true, Timeout: wait, AutoAck: true})
		err := s.sendReplies(ctx, replies, pop)
		replies = replies[:0]
		var res *PopResult
		if err == nil {
			if pop.ans.status == 0 {
				// Left unread behind a "Connection: close": it never
				// reached the broker, pop again.
				putCall(pop)
				continue
			}
			res, err = c.popAnswer(pop, queue)
		}
		putCall(pop)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && isCellCode(e.Code) {
				c.refreshView(ctx) // ownership moved: the next pop goes by the new view
			}
			if stop, err := waitOutRefusal(ctx, err, &backoff, onErr); stop {
				return err
			}
			continue
		}
		backoff = 10 * time.Millisecond
		for _, m := range res.Messages {
			if cl, err := c.replyCall(ctx, m, r); err != nil {
				onErr(err)
			} else {
				replies = append(replies, cl)
			}
		}
	}
	return nil
}

// replyCall runs r on request m and builds the push of its reply.
func (c *Client) replyCall(ctx context.Context, m Message, r Responder) (*call, error) {
	env, err := parseRequest(m, false) // m comes from the broker: valid JSON
	if err != nil {
		return nil, fmt.Errorf("queen: serving %s: %w", m.ID, err)
	}
	reply, err := runResponder(ctx, r, m)
	if err != nil {
		return nil, fmt.Errorf("queen: serving %s: %w", m.ID, err)
	}
	cl := newCall(http.MethodPost, "/push", c.timeout)
	cl.queue = env.ReplyTo
	cl.hasBody = true
	b := appendPushHead(cl.body[:0], env.ReplyTo, "")
	b = appendMessageOpen(b, 0)
	if b, err = appendPayload(b, 0, reply); err != nil {
		putCall(cl)
		return nil, err
	}
	cl.body = appendPushTail(append(b, '}'))
	return cl, nil
}

func runResponder(ctx context.Context, r Responder, m Message) (reply any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("queen: responder panicked: %v", p)
		}
	}()
	return r(ctx, m)
}

// server is one Serve loop's state shared with the goroutines that
// resend its replies.
type server struct {
	c     *Client
	ctx   context.Context // Serve's: ends when it stops
	onErr func(error)
	// resending counts the replies being sent again after a cell refusal.
	resending sync.WaitGroup
	// pop is the pop of the batch being sent (nil when none), answered
	// is onAnswer: both for the batch's answered hook.
	pop      *call
	answered func(*call)
}

// onAnswer is called with each call of a batch as soon as its answer is
// read: a reply refused by the cell is sent again at once (resend).
func (s *server) onAnswer(cl *call) {
	if cl != s.pop {
		if e := cellRefusal(cl); e != nil {
			s.resend(cl, e)
		}
	}
}

// sendReplies sends replies and then pop (when not nil) together, reports
// each reply that was refused or may not have arrived, and recycles the
// replies. A reply refused by the cell is sent again by a goroutine of its
// own, started as soon as its answer is read (resend), not after the pop
// behind it. It answers the error that keeps pop from having an answer.
func (s *server) sendReplies(ctx context.Context, replies []*call, pop *call) error {
	c := s.c
	c.watchCell() // a client that only serves learns the cell too
	if len(replies) > 0 && c.cell.view.Load() != nil {
		replies = s.sendElsewhere(ctx, replies, pop)
	}
	calls := replies
	if pop != nil {
		calls = append(calls, pop)
	}
	if len(calls) == 0 {
		return nil
	}
	method, route := http.MethodPost, "/push"
	if pop != nil {
		method, route = pop.method, pop.route
	}
	s.pop = pop
	err := c.authorize(ctx, calls...)
	if err == nil {
		send := func(ep endpoint) error { return ep.batch(ctx, calls, s.answered) }
		done := false
		if to := c.owner(calls[len(calls)-1].queue); to != nil {
			done, err = c.onOwner(ctx, to, method, apiPrefix, route, send)
		}
		if !done {
			err = c.failoverCell(ctx, method, apiPrefix, route, send)
		}
	}
	s.pop = nil
	for _, cl := range replies {
		s.report(cl, err)
		putCall(cl)
	}
	return err
}

// report reports reply cl's outcome, err being its batch's.
func (s *server) report(cl *call, err error) {
	switch {
	case cl.ans.status != 0:
		if cellRefusal(cl) != nil {
			break // being sent again (answered)
		}
		if aerr := s.c.answer(cl, false, nil); aerr != nil {
			s.onErr(aerr)
		}
	case err != nil:
		s.onErr(fmt.Errorf("queen: a reply may not have arrived (it is not sent again): %w", err))
	default:
		s.onErr(fmt.Errorf("queen: a reply was not read by the broker, which closed the connection before it"))
	}
}

// sendElsewhere sends the replies whose inbox is owned by another member
// than the batch's (the pop's queue's owner, or the last reply's without
// a pop), in one batch per owner, and answers the others. A requester of
// this SDK mints inboxes of its request queue's owner (inboxFor), so this
// is for the requesters that do not, or a view that changed between the
// request and its reply.
func (s *server) sendElsewhere(ctx context.Context, replies []*call, pop *call) []*call {
	c := s.c
	last := pop
	if last == nil {
		last = replies[len(replies)-1]
	}
	to := c.owner(last.queue)
	kept := replies[:0]
	var other []*call
	for _, cl := range replies {
		if c.owner(cl.queue) == to {
			kept = append(kept, cl)
		} else {
			other = append(other, cl)
		}
	}
	for len(other) > 0 {
		// The replies of other[0]'s owner first, then the rest.
		m, n := c.owner(other[0].queue), 0
		for i, cl := range other {
			if c.owner(cl.queue) == m {
				other[n], other[i] = other[i], other[n]
				n++
			}
		}
		group := other[:n]
		other = other[n:]
		err := c.authorize(ctx, group...)
		if err == nil {
			send := func(ep endpoint) error { return ep.batch(ctx, group, s.answered) }
			done := false
			if m != nil {
				done, err = c.onOwner(ctx, m, http.MethodPost, apiPrefix, "/push", send)
			}
			if !done {
				err = c.failoverCell(ctx, http.MethodPost, apiPrefix, "/push", send)
			}
		}
		for _, cl := range group {
			s.report(cl, err)
			putCall(cl)
		}
	}
	return kept
}

// resend sends again, after a backoff, a copy of reply cl that the cell
// refused (e): a push that was not applied. It goes on when Serve stops
// (the reply was made), bounded by WithTimeout from now.
func (s *server) resend(cl *call, e *Error) {
	c := s.c
	cp := newCall(cl.method, cl.route, c.timeout)
	cp.target = append(cp.target[:0], cl.target...)
	cp.body = append(cp.body[:0], cl.body...)
	cp.hasBody = cl.hasBody
	cp.queue = cl.queue
	s.resending.Add(1)
	go func() {
		defer s.resending.Done()
		ctx := context.WithoutCancel(s.ctx)
		if c.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.timeout)
			defer cancel()
		}
		r := newCellRetry(time.Now(), c.timeout)
		c.refreshView(ctx)
		if err := r.again(ctx, e); err != nil {
			putCall(cp)
			s.onErr(fmt.Errorf("queen: a reply refused by the cell was not delivered: %w", err))
			return
		}
		if _, err := c.push(ctx, cp, true); err != nil {
			s.onErr(fmt.Errorf("queen: a reply refused by the cell was sent again: %w", err))
		}
	}()
}
