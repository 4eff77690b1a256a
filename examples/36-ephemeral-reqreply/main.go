// Command 36-ephemeral-reqreply is the request/reply pair
// (docs/contract.md, "Tiers") written with the Go SDK, against a broker at
// QUEEN_URL (default http://localhost:6632) with nothing else set up.
//
// A responder consumes the queue "greeter". The requester mints an inbox
// name nobody declared, sends it with the request as {replyTo, payload},
// and parks a pop on the inbox until the answer arrives; the reply's push
// creates the inbox, and the broker collects it when it goes quiet. It
// prints:
//
//	reply hello, alice
//	reply hello, bob
//	5 concurrent replies
//	no reply from nobody: timed out
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/queenmq/ephemeral/client"
)

type greeting struct {
	Name string `json:"name"`
}

type answer struct {
	Greeting string `json:"greeting"`
}

func main() {
	log.SetFlags(0)
	url := os.Getenv("QUEEN_URL")
	if url == "" {
		url = "http://localhost:6632"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queen, err := client.New(url)
	if err != nil {
		log.Fatal(err)
	}

	// The responder: a consume loop that answers each request to the inbox it
	// names.
	respCtx, stopResponder := context.WithCancel(ctx)
	responder := make(chan error, 1)
	go func() {
		responder <- queen.Consume(respCtx, "greeter", client.ConsumeOptions{Group: "greeters", Concurrency: 4, Wait: time.Second},
			func(ctx context.Context, m client.Message) error {
				env, err := client.ParseRequest(m)
				if err != nil {
					return err
				}
				var g greeting
				if err := (client.Message{Payload: env.Payload}).Decode(&g); err != nil {
					return err
				}
				return queen.Reply(ctx, m, answer{Greeting: "hello, " + g.Name})
			})
	}()

	// The requester: each Request mints an inbox, pushes {replyTo, payload}
	// and parks on the inbox.
	for _, name := range []string{"alice", "bob"} {
		reply, err := queen.Request(ctx, "greeter", greeting{Name: name}, client.RequestOptions{Timeout: 5 * time.Second})
		if err != nil {
			log.Fatal(err)
		}
		var a answer
		if err := reply.Decode(&a); err != nil {
			log.Fatal(err)
		}
		fmt.Println("reply", a.Greeting)
	}

	// Requests in flight at once, each on an inbox of its own.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("user-", i)
			reply, err := queen.Request(ctx, "greeter", greeting{Name: name}, client.RequestOptions{Timeout: 5 * time.Second})
			var a answer
			if err == nil && reply.Decode(&a) == nil && a.Greeting == "hello, "+name {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println(ok, "concurrent replies")

	// Nobody consumes "nobody": the request's timeout is the failure path
	// (the same one that survives a broker restart).
	_, err = queen.Request(ctx, "nobody", greeting{Name: "carol"}, client.RequestOptions{Timeout: 300 * time.Millisecond})
	if errors.Is(err, client.ErrRequestTimeout) {
		fmt.Println("no reply from nobody: timed out")
	} else {
		log.Fatalf("request to nobody: %v", err)
	}

	stopResponder()
	if err := <-responder; err != nil {
		log.Fatal(err)
	}
	if err := queen.Close(ctx); err != nil {
		log.Fatal(err)
	}
}
