package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire/httpline"
)

// A call on a link (link.go): the call is its own stream's link.Caller, so
// starting one allocates nothing; the Mux's reader fills its answer and
// wakes the caller through c.done.

// startOn starts c on m as a new stream. A Mux that has ended is a call
// never sent: the transport's retry rule sends it again.
func (c *call) startOn(m *link.Mux) error {
	c.state.Store(callWaiting)
	id, err := m.Start(c, c.method, c.target, c.body)
	if err != nil {
		return &connError{err: fmt.Errorf("the link ended before the call was sent: %w", err), retry: true, unsent: true}
	}
	c.stream = id
	return nil
}

// awaitOn waits for c's stream: its answer, its end, ctx or c's timeout.
// A caller that stops waiting cancels the stream (a parked pop is let go);
// the call then may have been served if its frame was written.
func (c *call) awaitOn(ctx context.Context, m *link.Mux) error {
	var timeout <-chan time.Time
	if c.timeout > 0 {
		if c.timer == nil {
			c.timer = time.NewTimer(c.timeout)
		} else {
			c.timer.Reset(c.timeout)
		}
		defer c.timer.Stop()
		timeout = c.timer.C
	}
	var cause error
	select {
	case <-c.done:
		if c.busy {
			time.Sleep(busyPause) // then the transport sends it again
		}
		return c.err
	case <-ctx.Done():
		cause = ctx.Err()
	case <-timeout:
		cause = errLinkTimeout
	}
	if !m.Cancel(c.stream) {
		<-c.done // the answer won the race
		return c.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// As a timed-out HTTP call: never repeated, the broker may be slow.
	return &connError{err: cause, maybeApplied: m.Written(c.stream)}
}

var errLinkTimeout = errors.New("no answer within the call's timeout (i/o timeout)")

// abandonOn lets go of a started call nobody will wait for (a Request's
// pop behind a refused push): its stream is cancelled, or its answer,
// already on its way, is drained.
func (c *call) abandonOn(m *link.Mux) {
	if !m.Cancel(c.stream) {
		<-c.done
	}
	c.ans, c.resp = answer{}, c.resp[:0]
}

// Answered takes the stream's answer (link.Caller), on the Mux's reader.
func (c *call) Answered(p []byte) {
	var err error
	c.ans, c.resp, err = parseAnswer(p, c.resp)
	if err != nil {
		err = &connError{err: err, maybeApplied: true}
	}
	c.err = err
	c.done <- struct{}{}
}

// Ended takes the stream's end without an answer (link.Caller).
func (c *call) Ended(err error) {
	var se *link.StreamError
	switch {
	case errors.As(err, &se) && se.Busy:
		c.busy = true
		c.err = &connError{err: err, retry: true, unsent: true}
	case errors.As(err, &se) && !se.Served:
		c.err = &connError{err: err, retry: true, unsent: true}
	default:
		// Written, and its answer lost: a safe call is sent again, any
		// other may have been applied (the one rule, docs/link.md).
		c.err = &connError{err: err, retry: c.safe, maybeApplied: !c.safe}
	}
	c.done <- struct{}{}
}

// parseAnswer reads an answer frame's payload: the HTTP/1.1 answer the
// route would have written, framed by Content-Length. The body is copied
// into body[:0].
func parseAnswer(p []byte, body []byte) (answer, []byte, error) {
	var a answer
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 || len(p) < 12 || !bytes.HasPrefix(p, []byte("HTTP/1.")) || p[8] != ' ' {
		return a, body[:0], fmt.Errorf("%w: an answer frame without an HTTP head", errFraming)
	}
	for _, b := range p[9:12] {
		if b < '0' || b > '9' {
			return a, body[:0], fmt.Errorf("%w: status line %q", errFraming, p[:min(len(p), 32)])
		}
		a.status = a.status*10 + int(b-'0')
	}
	length := -1
	head := p[:end+2]
	for {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			break
		}
		h := httpline.TrimCRLF(head[:i+1])
		head = head[i+1:]
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			continue // the status line
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case httpline.EqualFold(name, "content-length"):
			n, ok := httpline.ParseLength(value)
			if !ok {
				return a, body[:0], fmt.Errorf("%w: Content-Length %q", errFraming, value)
			}
			length = n
		case httpline.EqualFold(name, "retry-after"):
			a.retryAfter = string(value)
		}
	}
	rest := p[end+4:]
	if length >= 0 && length != len(rest) {
		return a, body[:0], fmt.Errorf("%w: Content-Length %d, %d bytes in the frame", errFraming, length, len(rest))
	}
	return a, append(body[:0], rest...), nil
}
