package client

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Handler handles one message of [Client.Consume]: nil acks it completed,
// an error (or a panic) acks it failed, which redelivers it with attempts
// incremented until the queue's retryLimit.
type Handler func(ctx context.Context, m Message) error

// ConsumeOptions are the options of [Client.Consume].
type ConsumeOptions struct {
	// Group is the consumer group; empty is queue mode.
	Group string
	// Partition restricts the loop to one partition; empty is every one.
	Partition string
	// Concurrency is how many handlers run at once (default 1).
	Concurrency int
	// Batch is the most messages one pop takes (default Concurrency); a
	// pop never takes more than there are free handler slots.
	Batch int
	// Wait is each long poll's timeout (default 10 s).
	Wait time.Duration
	// OnError, when set, receives the errors the loop survives: a failed
	// ack (the message is then redelivered when its lease expires) or a
	// pop refused with a 429 or 503 or lost with its connection (retried
	// with backoff, or after the broker's Retry-After). A pop or an ack
	// refused by the cell (CodeOwnerMoved, CodeForwardFailed) is first
	// retried by Pop and Ack themselves, within the poll's Wait and
	// WithTimeout; it reaches OnError only when that ends first. It is
	// called from the loop's goroutine and from the handlers'.
	OnError func(error)
}

// Consume pops queue with long polls and runs h on each message, at most
// opts.Concurrency at once, acking completed or failed as h answers. It
// returns nil when ctx is cancelled or the client is closed, after the
// handlers in flight have returned and been acked; it returns an error
// when a pop is refused for good (a 4xx other than 429).
func (c *Client) Consume(ctx context.Context, queue string, opts ConsumeOptions, h Handler) error {
	conc := max(1, opts.Concurrency)
	batch := opts.Batch
	if batch <= 0 {
		batch = conc
	}
	wait := opts.Wait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()

	onErr := func(err error) {
		if opts.OnError != nil {
			opts.OnError(err)
		}
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	defer wg.Wait()
	backoff := 10 * time.Millisecond
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	fill:
		for free < min(conc, batch) {
			select {
			case sem <- struct{}{}:
				free++
			default:
				break fill
			}
		}
		res, err := c.Pop(ctx, queue, PopOptions{Partition: opts.Partition, Group: opts.Group, Batch: free, Wait: true, Timeout: wait})
		if err != nil {
			for range free {
				<-sem
			}
			if stop, err := waitOutRefusal(ctx, err, &backoff, onErr); stop {
				return err
			}
			continue
		}
		backoff = 10 * time.Millisecond
		for range free - len(res.Messages) {
			<-sem
		}
		for _, m := range res.Messages {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				status := StatusCompleted
				if err := runHandler(ctx, h, m); err != nil {
					status = StatusFailed
				}
				actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
				defer acancel()
				if _, err := c.Ack(actx, queue, []Message{m}, AckOptions{Group: opts.Group, Status: status}); err != nil {
					onErr(err)
				}
			}()
		}
	}
}

func runHandler(ctx context.Context, h Handler, m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("queen: handler panicked: %v", r)
		}
	}()
	return h(ctx, m)
}

// waitOutRefusal handles a loop's failed pop (Consume, Serve). It answers
// stop with what the loop returns: nil when ctx ended, the error when the
// pop was refused for good (a 4xx other than 429). Otherwise it reports
// the error to onErr, waits the backoff (or the refusal's Retry-After),
// doubles the backoff up to a second and answers !stop.
func waitOutRefusal(ctx context.Context, err error, backoff *time.Duration, onErr func(error)) (stop bool, ret error) {
	if ctx.Err() != nil {
		return true, nil
	}
	if !retryable(err) {
		return true, err
	}
	onErr(err)
	t := time.NewTimer(pause(*backoff, err))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return true, nil
	}
	*backoff = min(*backoff*2, time.Second)
	return false, nil
}
