package bench

import (
	"context"
	"encoding/json"
	"errors"
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
	queue                  string
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
	b := &brokerSDK{requesters: req, responders: resp, queue: cfg.NS + "-requests", reply: stamp(nil, cfg.Size, 0)}
	// A read that reaches the broker through the SDK: an unreachable broker
	// fails here rather than in the first round trip.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := req.Depth(ctx, b.queue, client.DepthOptions{}); err != nil && client.CodeOf(err) != client.CodeQueueNotFound {
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
	b   *brokerSDK
	ctx context.Context
}

// rrRequester: the SDK's Request always uses a fresh inbox (Config.check
// refuses -client sdk -inbox requester).
func (b *brokerSDK) rrRequester(int, bool) (requester, error) {
	return &sdkRequester{b: b, ctx: context.Background()}, nil
}

func (r *sdkRequester) roundTrip(payload []byte) error {
	m, err := r.b.requesters.Request(r.ctx, r.b.queue, json.RawMessage(payload), client.RequestOptions{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if len(m.Payload) == 0 {
		return errors.New("a reply without a payload")
	}
	return nil
}

func (r *sdkRequester) close() {}

func (b *brokerSDK) rrServe(ctx context.Context, _, batch int, ready func()) error {
	// The first pop parks on the queue; requests pushed before it waits in
	// the queue, so the responder is ready at once.
	ready()
	return b.responders.Serve(ctx, b.queue, client.ServeOptions{Batch: batch, Wait: time.Second}, func(context.Context, client.Message) (any, error) {
		return b.reply, nil
	})
}
