package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/queenmq/ephemeral/client"
)

// brokerSDK drives the broker through the Go SDK (package client) rather
// than the raw client, as a user of the SDK would (-client sdk): requesters
// call Request, which mints a fresh inbox per call; responders are Serve
// loops (a waiting autoAck pop of up to a batch, the replies to a batch
// sent with the next pop), as nats.go's responders are its queue
// subscriptions. The tool's CPU per round trip (cpu.client) is then the
// SDK's cost; the same run with -client raw shows the raw client's.
//
// Two clients, as two services would have: one shared by every requester
// and one shared by every responder, so the SDK's own connection pooling
// (not one client per goroutine) is what is measured.
type brokerSDK struct {
	requesters, responders *client.Client
	queues                 []string        // the request queues (-services), one by default
	nResponders            int             // -w, to share the queues out
	reply                  json.RawMessage // Size bytes, the answer of every request
}

func newBrokerSDK(cfg *Config) (*brokerSDK, error) {
	url := "http://" + cfg.Addr
	var opts []client.Option
	if cfg.Token != "" {
		opts = append(opts, client.WithToken(cfg.Token))
	}
	if cfg.Client == ClientSDKHTTP {
		opts = append(opts, client.WithHTTPOnly())
	}
	req, err := client.New(url, opts...)
	if err != nil {
		return nil, err
	}
	resp, err := client.New(url, opts...)
	if err != nil {
		_ = req.Close(context.Background())
		return nil, err
	}
	b := &brokerSDK{requesters: req, responders: resp, nResponders: cfg.Responders, reply: stamp(nil, cfg.Size, 0)}
	b.queues = []string{cfg.NS + "-requests"}
	if cfg.Services > 1 {
		b.queues = b.queues[:0]
		for i := range cfg.Services {
			b.queues = append(b.queues, fmt.Sprintf("%s-requests-%d", cfg.NS, i))
		}
	}
	// A read that reaches the broker through the SDK: an unreachable broker
	// fails here rather than in the first round trip.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := req.Depth(ctx, b.queues[0], client.DepthOptions{}); err != nil && client.CodeOf(err) != client.CodeQueueNotFound {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *brokerSDK) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.requesters.Close(ctx)
	_ = b.responders.Close(ctx)
}

type sdkRequester struct {
	b     *brokerSDK
	queue string
	ctx   context.Context
}

// rrRequester: the SDK's Request always uses a fresh inbox (Config.check
// refuses -client sdk -inbox requester). Requester id asks queue id mod
// -services.
func (b *brokerSDK) rrRequester(id int, _ bool) (requester, error) {
	return &sdkRequester{b: b, queue: b.queues[id%len(b.queues)], ctx: context.Background()}, nil
}

func (r *sdkRequester) roundTrip(payload []byte) error {
	m, err := r.b.requesters.Request(r.ctx, r.queue, json.RawMessage(payload), client.RequestOptions{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if len(m.Payload) == 0 {
		return errors.New("a reply without a payload")
	}
	return nil
}

func (r *sdkRequester) close() {}

// rrServe serves responder id's share of the request queues (servedBy), a
// Serve loop each.
func (b *brokerSDK) rrServe(ctx context.Context, id, batch int, ready func()) error {
	// The first pop parks on the queue; requests pushed before it waits in
	// the queue, so the responder is ready at once.
	ready()
	var mine []string
	for _, j := range servedBy(id, b.nResponders, len(b.queues)) {
		mine = append(mine, b.queues[j])
	}
	errs := make(chan error, len(mine))
	for _, q := range mine {
		go func() {
			errs <- b.responders.Serve(ctx, q, client.ServeOptions{Batch: batch, Wait: time.Second}, func(context.Context, client.Message) (any, error) {
				return b.reply, nil
			})
		}()
	}
	var first error
	for range mine {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// servedBy is the request queues responder id of n serves: with at least
// as many queues as responders every queue j with j mod n = id, so each
// queue has one responder; else queue id mod queues, several responders
// sharing one.
func servedBy(id, n, queues int) []int {
	if queues < n {
		return []int{id % queues}
	}
	var mine []int
	for j := id; j < queues; j += n {
		mine = append(mine, j)
	}
	return mine
}
