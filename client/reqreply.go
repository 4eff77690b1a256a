package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"time"
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
func NewInbox() string { return "inbox-" + strings.ToLower(rand.Text()) }

// Request pushes {replyTo, payload} to queue, replyTo being a fresh inbox
// ([NewInbox]), and parks a pop on that inbox until the reply arrives: it
// answers the reply, or ErrRequestTimeout when none came within the timeout.
// A responder answers with [Client.Reply].
func (c *Client) Request(ctx context.Context, queue string, payload any, opts RequestOptions) (*Message, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	raw, err := encodePayloads([]any{payload})
	if err != nil {
		return nil, err
	}
	inbox := NewInbox()
	env := RequestEnvelope{ReplyTo: inbox, Payload: raw[0]}
	deadline := time.Now().Add(timeout)
	if _, err := c.Push(ctx, queue, []any{env}, PushOptions{Partition: opts.Partition}); err != nil {
		return nil, err
	}
	for {
		left := time.Until(deadline)
		if left < time.Millisecond {
			return nil, ErrRequestTimeout
		}
		res, err := c.Pop(ctx, inbox, PopOptions{Batch: 1, Wait: true, Timeout: left, AutoAck: true})
		if err != nil {
			return nil, err
		}
		if len(res.Messages) > 0 {
			return &res.Messages[0], nil
		}
	}
}

// ParseRequest decodes a message pushed by [Client.Request].
func ParseRequest(m Message) (RequestEnvelope, error) {
	var env RequestEnvelope
	if err := json.Unmarshal(m.Payload, &env); err != nil {
		return env, err
	}
	if env.ReplyTo == "" {
		return env, errors.New("queen: the message carries no replyTo")
	}
	return env, nil
}

// Reply pushes payload to the inbox named by request, a message pushed by
// [Client.Request].
func (c *Client) Reply(ctx context.Context, request Message, payload any) error {
	env, err := ParseRequest(request)
	if err != nil {
		return err
	}
	_, err = c.Push(ctx, env.ReplyTo, []any{payload}, PushOptions{})
	return err
}
