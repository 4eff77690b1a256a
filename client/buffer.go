package client

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// BufferOptions configure buffered pushes ([WithBuffer]).
//
// Messages are buffered per (queue, partition) and sent, in order, by one
// flusher goroutine per buffer, which lives until [Client.Close]: a batch leaves when MessageCount messages are waiting
// or the oldest has waited Time. The client holds at most MaxPending
// buffered messages in all (queued or in flight); a buffered push blocks
// while it is full, which is the backpressure a slow consumer exerts on a
// producer through a queue whose policy is reject.
//
// A batch refused with a 429 or a 503, or lost to a transport error, is
// retried with exponential backoff (from 10 ms to MaxBackoff, with jitter),
// waiting Retry-After when the broker sends one; a queue_full refusal also
// halves the batch, so a batch larger than the queue's maxLength still gets
// in. A batch that still fails after RetryTimeout, or at once on any other
// refusal, is dropped from the buffer and reported as a *FlushError. A
// transport error after the broker appended a batch makes the retry append
// it again: buffered delivery is at-least-once.
//
// The 503s of a cell's membership change (CodeOwnerMoved,
// CodeForwardFailed) are refusals like the others: the push is all or
// nothing, so a refused batch was appended nowhere and is sent again whole,
// while the part of a batch the broker already accepted (201) is never
// sent again. A buffer therefore drains through a membership change with
// every message appended once, in order, as long as the change settles
// within RetryTimeout (a member timeout, 5 s by default, is what a dead
// owner takes to be replaced). What the move itself drops from the old
// owner's memory is the class's loss contract, not the buffer's.
type BufferOptions struct {
	// MessageCount is the batch size (default 100, at most 10,000).
	MessageCount int
	// Time is how long the oldest buffered message may wait (default 100 ms).
	Time time.Duration
	// MaxPending bounds the messages the client buffers (default 10,000).
	MaxPending int
	// RetryTimeout is how long a batch is retried (default 30 s); negative
	// retries until Close gives up.
	RetryTimeout time.Duration
	// MaxBackoff caps the wait between retries (default 1 s).
	MaxBackoff time.Duration
}

var defaultBuffer = BufferOptions{
	MessageCount: 100,
	Time:         100 * time.Millisecond,
	MaxPending:   10000,
	RetryTimeout: 30 * time.Second,
	MaxBackoff:   time.Second,
}

type bufferKey struct{ queue, partition string }

type pushBuffer struct {
	c   *Client
	key bufferKey

	wake chan struct{} // capacity 1: something changed

	mu       sync.Mutex
	msgs     []json.RawMessage
	oldest   time.Time // when the oldest of msgs was queued
	sending  int
	flushReq int
	stopping bool
	empty    chan struct{} // closed while msgs is empty and nothing is in flight
	errs     []error
}

func (c *Client) buffer(k bufferKey) (*pushBuffer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	b := c.buffers[k]
	if b == nil {
		b = &pushBuffer{c: c, key: k, wake: make(chan struct{}, 1), empty: make(chan struct{})}
		close(b.empty)
		c.buffers[k] = b
		c.wg.Add(1)
		go b.run()
	}
	return b, nil
}

func (c *Client) pushBuffered(ctx context.Context, queue, partition string, msgs []json.RawMessage) (*PushResult, error) {
	b, err := c.buffer(bufferKey{queue, partition})
	if err != nil {
		return nil, err
	}
	if err := b.takeErrors(); err != nil {
		return &PushResult{}, err
	}
	for i, m := range msgs {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return &PushResult{Pushed: i}, ctx.Err()
		case <-c.ctx.Done():
			return &PushResult{Pushed: i}, ErrClosed
		}
		if !b.add(m) {
			<-c.slots
			return &PushResult{Pushed: i}, ErrClosed
		}
	}
	return &PushResult{Pushed: len(msgs)}, nil
}

func (b *pushBuffer) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *pushBuffer) add(m json.RawMessage) bool {
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return false
	}
	if len(b.msgs) == 0 {
		b.oldest = time.Now()
		if b.sending == 0 {
			b.empty = make(chan struct{})
		}
	}
	b.msgs = append(b.msgs, m)
	wake := len(b.msgs) == 1 || len(b.msgs) >= b.c.buf.MessageCount
	b.mu.Unlock()
	if wake {
		b.signal()
	}
	return true
}

func (b *pushBuffer) stop() {
	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	b.signal()
}

func (b *pushBuffer) takeErrors() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := errors.Join(b.errs...)
	b.errs = nil
	return err
}

func (c *Client) takeFlushErrors() error {
	c.mu.Lock()
	bufs := make([]*pushBuffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	var errs []error
	for _, b := range bufs {
		if err := b.takeErrors(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// release gives back n buffer slots.
func (c *Client) release(n int) {
	for range n {
		<-c.slots
	}
}

// fail records a flush that gave up (b.mu held).
func (b *pushBuffer) fail(fe *FlushError) {
	b.errs = append(b.errs, fe)
	if f := b.c.onFlush; f != nil {
		go f(fe)
	}
}

func (b *pushBuffer) run() {
	defer b.c.wg.Done()
	cfg := b.c.buf
	batchMax := min(cfg.MessageCount, 10000)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b.mu.Lock()
		n := len(b.msgs)
		if n == 0 && b.stopping {
			b.mu.Unlock()
			return
		}
		if n > 0 && b.c.ctx.Err() != nil {
			// Close gave up waiting: report what is left. Not only once
			// stop has been called: Close cancels the client's context
			// first, and a batch begun in between would be sent after
			// Close gave up, though reported as not delivered.
			b.fail(&FlushError{Queue: b.key.queue, Partition: b.key.partition, Messages: n, Err: ErrClosed})
			b.msgs = nil
			close(b.empty)
			b.mu.Unlock()
			b.c.release(n)
			return
		}
		if n == 0 {
			b.mu.Unlock()
			<-b.wake
			continue
		}
		age := time.Since(b.oldest)
		if n < batchMax && b.flushReq == 0 && !b.stopping && age < cfg.Time {
			b.mu.Unlock()
			timer.Reset(cfg.Time - age)
			select {
			case <-b.wake:
			case <-timer.C:
			}
			timer.Stop()
			continue
		}
		k := min(n, batchMax)
		batch := append([]json.RawMessage(nil), b.msgs[:k]...)
		rest := copy(b.msgs, b.msgs[k:])
		clear(b.msgs[rest:])
		b.msgs = b.msgs[:rest]
		if rest > 0 {
			b.oldest = time.Now()
		}
		b.sending = k
		b.mu.Unlock()

		undelivered, err := b.send(batch)

		b.mu.Lock()
		b.sending = 0
		if err != nil {
			b.fail(&FlushError{Queue: b.key.queue, Partition: b.key.partition, Messages: undelivered, Err: err})
		}
		if len(b.msgs) == 0 {
			close(b.empty)
		}
		b.mu.Unlock()
		b.c.release(k)
	}
}

func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Temporary()
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// send delivers batch in order, answering how many messages were not
// delivered when it gives up.
func (b *pushBuffer) send(batch []json.RawMessage) (int, error) {
	cfg := b.c.buf
	ctx := b.c.ctx
	var deadline time.Time
	if cfg.RetryTimeout > 0 {
		deadline = time.Now().Add(cfg.RetryTimeout)
	}
	backoff := 10 * time.Millisecond
	size := len(batch)
	for len(batch) > 0 {
		k := min(size, len(batch))
		_, err := b.c.pushNow(ctx, b.key.queue, b.key.partition, batch[:k])
		if err == nil {
			batch = batch[k:]
			backoff = 10 * time.Millisecond
			continue
		}
		if ctx.Err() != nil {
			return len(batch), errors.Join(ErrClosed, err)
		}
		if !retryable(err) {
			return len(batch), err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		var e *Error
		if errors.As(err, &e) {
			if isCellCode(e.Code) {
				b.c.refreshView(ctx) // ownership moved: route the retry by the new view
			}
			if e.RetryAfter > 0 {
				wait = e.RetryAfter
			}
			if e.Code == CodeQueueFull && size > 1 {
				size = max(1, size/2)
			}
		}
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			return len(batch), err
		}
		b.c.flushRetries.Add(1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return len(batch), errors.Join(ErrClosed, err)
		}
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
	return 0, nil
}

// Flush sends every buffered message now and waits until each buffer that
// held messages has drained (or ctx ends), reporting the flushes that
// finally failed since they were last reported.
func (c *Client) Flush(ctx context.Context) error {
	c.mu.Lock()
	bufs := make([]*pushBuffer, 0, len(c.buffers))
	for _, b := range c.buffers {
		bufs = append(bufs, b)
	}
	c.mu.Unlock()
	waits := make([]chan struct{}, len(bufs))
	for i, b := range bufs {
		b.mu.Lock()
		b.flushReq++
		waits[i] = b.empty
		b.mu.Unlock()
		b.signal()
	}
	var ctxErr error
	for _, ch := range waits {
		select {
		case <-ch:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		if ctxErr != nil {
			break
		}
	}
	for _, b := range bufs {
		b.mu.Lock()
		b.flushReq--
		b.mu.Unlock()
	}
	return errors.Join(ctxErr, c.takeFlushErrors())
}
