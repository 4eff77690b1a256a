package client

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/queenmq/ephemeral/cell/rendezvous"
	"github.com/queenmq/ephemeral/wire"
)

// RequestEnvelope is what [Client.Request] pushes: the payload and the
// inbox the answer goes to.
type RequestEnvelope struct {
	ReplyTo string          `json:"replyTo"`
	Payload json.RawMessage `json:"payload"`
}

// RequestOptions are the options of [Client.Request].
type RequestOptions struct {
	// Timeout bounds the wait for the reply (default 30 s).
	Timeout time.Duration
	// Partition is the partition of queue the request is pushed to.
	Partition string
}

// NewInbox mints a queue name nobody declared, for one reply. The queue is
// created implicitly by the reply that names it and collected by the broker
// when it goes quiet.
func NewInbox() string {
	// As "inbox-" + strings.ToLower(rand.Text()): 128 random bits in
	// lowercase base32, made in one allocation (a Request mints one each).
	var b inboxName
	b.mint()
	return string(b[:])
}

// inboxName is an inbox's name, minted on the stack.
type inboxName [len("inbox-") + 26]byte

func (b *inboxName) mint() {
	var key [16]byte
	rand.Read(key[:])
	copy(b[:], "inbox-")
	inboxEncoding.Encode(b[len("inbox-"):], key[:])
}

// inboxFor mints the inbox of a Request to queue. In a cell (owner.go) it
// mints until the inbox has the queue's owner for its owner too (at most
// inboxTries names; with N members one in N does), so that the request's
// push and its inbox's pop still leave together on one link, and the
// responder's reply is pushed to the member it popped the request from:
// the whole round trip is served by one member, relaying nothing.
func (c *Client) inboxFor(queue string) string {
	var b inboxName
	b.mint()
	v := c.cell.view.Load()
	if v == nil || len(v.seeds) < 2 {
		return string(b[:])
	}
	want := rendezvous.Owner(rendezvous.Key(v.tenant, queue), v.seeds)
	for i := 1; i < inboxTries; i++ {
		// The name is hashed in place; it becomes a string once, below.
		if rendezvous.Owner(rendezvous.Key(v.tenant, unsafe.String(&b[0], len(b))), v.seeds) == want {
			break
		}
		b.mint()
	}
	return string(b[:])
}

var inboxEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Request pushes {replyTo, payload} to queue, replyTo being a fresh inbox
// ([NewInbox]), and parks a pop on that inbox until the reply arrives: it
// answers the reply, or ErrRequestTimeout when none came within the timeout.
// A responder answers with [Client.Reply].
//
// The push and the inbox's pop leave together, in one write on a
// connection of the request's own, and their answers are read in order: a
// request costs one round trip to the broker plus the responder's time.
// When the push is refused the pop is already parked on the broker, so that
// connection is closed (which removes the pop) and the push's refusal is
// answered.
//
// A push refused by the cell (CodeOwnerMoved, CodeForwardFailed: the
// request was not delivered) is sent again after a backoff, with a fresh
// inbox (no pop left behind on the old one can take the reply); an inbox
// pop refused by the cell is parked again after a backoff (the request was
// delivered, it is not sent again). Both within the timeout and ctx; the
// last refusal is answered when they end first.
func (c *Client) Request(ctx context.Context, queue string, payload any, opts RequestOptions) (*Message, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	start := time.Now()
	deadline := start.Add(timeout)
	r := newCellRetry(start, timeout)
	for {
		msg, refused, err := c.request(ctx, queue, payload, opts.Partition, deadline)
		if refused == nil {
			return msg, err
		}
		r.refreshView(ctx, c)
		if err := r.again(ctx, refused.err); err != nil {
			return nil, err
		}
		if !refused.delivered {
			continue // the request was not delivered: push it again
		}
		// Delivered: park on its inbox again for what is left (Pop
		// retries its own cell refusals).
		for {
			left := time.Until(deadline)
			if left < time.Millisecond {
				return nil, ErrRequestTimeout
			}
			res, err := c.Pop(ctx, refused.inbox, PopOptions{Batch: 1, Wait: true, Timeout: left, AutoAck: true})
			if err != nil {
				return nil, err
			}
			if len(res.Messages) > 0 {
				return &res.Messages[0], nil
			}
		}
	}
}

// requestRefused is a cell refusal of a request's push or of the first
// park on its inbox.
type requestRefused struct {
	err   *Error
	inbox string
	// delivered: the push was applied, the inbox pop was refused.
	delivered bool
}

// request is one push of a request with a fresh inbox and the parks on
// that inbox; a cell refusal of the push or of the first park is answered
// as refused, for Request to retry.
func (c *Client) request(ctx context.Context, queue string, payload any, partition string, deadline time.Time) (msg *Message, refused *requestRefused, err error) {
	inbox := c.inboxFor(queue)
	push := newCall(http.MethodPost, "/push", c.timeout)
	push.queue = queue
	push.hasBody = true
	b := appendPushHead(push.body[:0], queue, partition)
	b = append(b, `{"payload":{"replyTo":`...)
	b = wire.AppendString(b, inbox)
	b = append(b, `,"payload":`...)
	b, err = appendPayload(b, 0, payload)
	push.body = b
	if err != nil {
		putCall(push)
		return nil, nil, err
	}
	push.body = appendPushTail(append(push.body, "}}"...))
	left := time.Until(deadline)
	if left < time.Millisecond {
		putCall(push)
		return nil, nil, ErrRequestTimeout
	}
	if left < push.timeout {
		// The request's timeout bounds its push too: a broker that never
		// answers it must not hold the caller for the client's call
		// timeout (30 s by default) past the timeout it asked for.
		push.timeout = left
	}
	pop := c.popCall(inbox, PopOptions{Batch: 1, Wait: true, Timeout: left, AutoAck: true})
	err = c.sendRequest(ctx, push, pop)
	if err == nil {
		if e := cellRefusal(push); e != nil {
			putCall(push)
			putCall(pop)
			return nil, &requestRefused{err: e, inbox: inbox}, nil
		}
		err = c.answer(push, false, nil)
	}
	release(push, err)
	if err != nil {
		release(pop, err)
		return nil, nil, err
	}
	var first PopResult // the common answer, decoded without a PopResult of its own
	res := &first
	if pop.ans.status != 0 {
		if e := cellRefusal(pop); e != nil {
			putCall(pop)
			return nil, &requestRefused{err: e, inbox: inbox, delivered: true}, nil
		}
		err = c.popAnswerInto(pop, inbox, &first)
	} // else the push's answer closed the connection before the pop was read: pop again
	putCall(pop)
	if err != nil {
		return nil, nil, err
	}
	for len(res.Messages) == 0 {
		left := time.Until(deadline)
		if left < time.Millisecond {
			return nil, nil, ErrRequestTimeout
		}
		if res, err = c.Pop(ctx, inbox, PopOptions{Batch: 1, Wait: true, Timeout: left, AutoAck: true}); err != nil {
			return nil, nil, err
		}
	}
	return &res.Messages[0], nil, nil
}

// sendRequest sends a request's push and its inbox's pop together, on
// their owner in a cell (owner.go) or on the broker in use. When their
// owners differ (inboxFor found no inbox of the queue's owner, or one of
// them is passed over) the push goes alone to its owner and pop is left
// unsent (a zero status), for request to pop the inbox on its own owner.
func (c *Client) sendRequest(ctx context.Context, push, pop *call) error {
	c.watchCell()
	if err := c.authorize(ctx, push, pop); err != nil {
		return err
	}
	pair := func(ep endpoint) error { return ep.pair(ctx, push, pop) }
	to := c.owner(push.queue)
	if to != c.owner(pop.queue) {
		return c.roundTrip(ctx, push)
	}
	if to != nil {
		if done, err := c.onOwner(ctx, to, push.method, push.prefix, push.route, pair); done {
			return err
		}
	}
	return c.failoverCell(ctx, push.method, push.prefix, push.route, pair)
}

// ParseRequest decodes a message pushed by [Client.Request]. The
// envelope's Payload shares m.Payload's bytes.
func ParseRequest(m Message) (RequestEnvelope, error) {
	return parseRequest(m, true)
}

// parseRequest is ParseRequest; validate=false skips checking that the
// payload is valid JSON, for a message just read from a pop answer (the
// broker validated every payload it stores).
func parseRequest(m Message, validate bool) (RequestEnvelope, error) {
	env, ok := parseEnvelope(m.Payload, validate)
	if !ok {
		var err error
		if env, err = unmarshalEnvelope(m.Payload); err != nil {
			return env, err
		}
	}
	if env.ReplyTo == "" {
		return env, errors.New("queen: the message carries no replyTo")
	}
	return env, nil
}

// unmarshalEnvelope decodes an envelope with encoding/json, apart from
// parseRequest so that the envelope it decodes into, which escapes, is
// allocated only on this rare path.
func unmarshalEnvelope(data []byte) (RequestEnvelope, error) {
	var env RequestEnvelope
	err := json.Unmarshal(data, &env)
	return env, err
}

// parseEnvelope reads {"replyTo": ..., "payload": ...} by hand: a responder
// reads one per request, and encoding/json's reflection (and the stack it
// grows in a fresh goroutine) cost a quarter of a responder's CPU. It
// answers false, for encoding/json to decide, on anything but valid JSON
// whose keys match exactly (encoding/json also matches keys ignoring case).
func parseEnvelope(data []byte, validate bool) (env RequestEnvelope, ok bool) {
	if validate && !json.Valid(data) {
		return env, false
	}
	_, err := eachKey(data, 0, func(key []byte, at int) (int, error) {
		switch {
		case string(key) == "replyTo":
			if at >= len(data) || data[at] != '"' {
				return 0, errAnswer
			}
			end, escaped := stringEnd(data, at)
			if end < 0 || escaped || !utf8.Valid(data[at+1:end]) {
				return 0, errAnswer // encoding/json unescapes and repairs
			}
			env.ReplyTo = string(data[at+1 : end])
			return end + 1, nil
		case string(key) == "payload":
			end, err := skipValue(data, at)
			if err != nil {
				return 0, err
			}
			env.Payload = json.RawMessage(data[at:end:end])
			return end, nil
		case strings.EqualFold(string(key), "replyTo") || strings.EqualFold(string(key), "payload"):
			return 0, errAnswer
		}
		return skipValue(data, at)
	})
	return env, err == nil
}

// Reply pushes payload to the inbox named by request, a message pushed by
// [Client.Request].
func (c *Client) Reply(ctx context.Context, request Message, payload any) error {
	env, err := ParseRequest(request)
	if err != nil {
		return err
	}
	// As Push(ctx, env.ReplyTo, []any{payload}, PushOptions{}), without
	// the result a reply has no use for.
	one := [1]any{payload}
	cl, err := c.pushCall(env.ReplyTo, "", one[:])
	if err != nil {
		return err
	}
	_, err = c.pushed(ctx, cl, true)
	return err
}
