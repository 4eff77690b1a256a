package client_test

// These examples need a broker on localhost:6632, so they have no Output
// comment: go test compiles them and does not run them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/queenmq/ephemeral/client"
)

// The whole surface in one program: the specification's example 35.
func Example() {
	ctx := context.Background()
	queen, err := client.New("http://localhost:6632")
	if err != nil {
		log.Fatal(err)
	}
	defer queen.Close(ctx)

	if _, err := queen.Configure(ctx, "presence", client.QueueOptions{MaxLength: 1000, Policy: client.PolicyDropOldest, TTLSeconds: 30}); err != nil {
		log.Fatal(err)
	}
	res, err := queen.Push(ctx, "presence", []any{
		map[string]any{"user": "alice", "typing": true},
		map[string]any{"user": "bob", "typing": true},
	}, client.PushOptions{Partition: "room-7"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed", res.Pushed)

	popped, err := queen.Pop(ctx, "presence", client.PopOptions{Partition: "room-7", Group: "widget", Batch: 10, Wait: true, Timeout: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	acked, err := queen.Ack(ctx, "presence", popped.Messages, client.AckOptions{Group: "widget"})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range acked.Results {
		fmt.Println(r.Outcome)
	}
}

// Buffered pushes batch client-side and block the producer when the buffer
// is full; Close flushes what is left and reports what could not be sent.
func ExampleClient_Push_buffered() {
	ctx := context.Background()
	queen, err := client.New("http://localhost:6632",
		client.WithBuffer(client.BufferOptions{MessageCount: 500, Time: 50 * time.Millisecond, MaxPending: 20000}))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 100000 {
		if _, err := queen.Push(ctx, "ticks", []any{i}, client.PushOptions{Buffered: true}); err != nil {
			log.Fatal(err) // a flush that finally failed
		}
	}
	if err := queen.Close(ctx); err != nil {
		log.Fatal(err)
	}
}

// Refusals carry the specification's code.
func ExampleError() {
	ctx := context.Background()
	queen, _ := client.New("http://localhost:6632")
	_, err := queen.Push(ctx, "bounded", []any{"x"}, client.PushOptions{})
	switch {
	case errors.Is(err, client.ErrQueueFull):
		fmt.Println("backpressure: retry later")
	case errors.Is(err, client.ErrUnsupported):
		fmt.Println("the broker predates ephemeral queues")
	case client.CodeOf(err) != "":
		fmt.Println("refused:", client.CodeOf(err))
	}
}

// A request/reply pair: the requester mints an inbox nobody declared and
// parks on it; the responder answers with Reply.
func ExampleClient_Request() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	queen, _ := client.New("http://localhost:6632")
	defer queen.Close(ctx)

	go queen.Consume(ctx, "greeter", client.ConsumeOptions{Concurrency: 8}, func(ctx context.Context, m client.Message) error {
		return queen.Reply(ctx, m, "hello")
	})
	reply, err := queen.Request(ctx, "greeter", map[string]string{"name": "alice"}, client.RequestOptions{Timeout: 5 * time.Second})
	if errors.Is(err, client.ErrRequestTimeout) {
		fmt.Println("nobody answered")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply.Payload))
}

// A consume loop with bounded concurrency: nil acks completed, an error
// acks failed (redelivered with attempts+1).
func ExampleClient_Consume() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	queen, _ := client.New("http://localhost:6632", client.WithURLs("http://localhost:6633"))
	err := queen.Consume(ctx, "jobs", client.ConsumeOptions{Group: "workers", Concurrency: 16}, func(ctx context.Context, m client.Message) error {
		var job struct{ ID int }
		if err := m.Decode(&job); err != nil {
			return err
		}
		fmt.Println("job", job.ID, "attempt", m.Attempts)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The responder's side of request/reply as one loop: four Serve loops
// share the requests of "greeter"; each answers a batch and sends the
// replies with its next pop. An error (or a request without replyTo) goes
// to OnError and sends no reply.
func ExampleClient_Serve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	queen, _ := client.New("http://localhost:6632")
	defer queen.Close(ctx)

	for range 4 {
		go queen.Serve(ctx, "greeter", client.ServeOptions{OnError: func(err error) { log.Print(err) }}, func(ctx context.Context, m client.Message) (any, error) {
			env, err := client.ParseRequest(m)
			if err != nil {
				return nil, err
			}
			var who struct{ Name string }
			if err := json.Unmarshal(env.Payload, &who); err != nil {
				return nil, err
			}
			return map[string]string{"greeting": "hello, " + who.Name}, nil
		})
	}
	reply, err := queen.Request(ctx, "greeter", map[string]string{"name": "alice"}, client.RequestOptions{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(reply.Payload))
}
