// Command 35-ephemeral-basics is "the whole surface in one program"
// (docs/contract.md, docs/routes.md) written with the Go SDK: six verbs and two
// status reads against a broker at QUEEN_URL (default
// http://localhost:6632) with nothing else set up. It prints:
//
//	pushed 2
//	<the listing, as JSON>
//	<the depth read, as JSON>
//	popped alice, bob
//	outcomes acked, acked
//	the audit group saw 2
//	reset dropped 2
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/queenmq/ephemeral/client"
)

const (
	queue = "presence"
	room  = "room-7"
)

type presence struct {
	User   string `json:"user"`
	Typing bool   `json:"typing"`
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

	// configure: declare the queue and its bounds. Optional, because a push or
	// a pop that names an unknown queue creates it. These options are durable;
	// the contents never are.
	_, err = queen.Configure(ctx, queue, client.QueueOptions{
		MaxLength:    1000,
		MaxBytes:     1024 * 1024,
		Policy:       client.PolicyDropOldest,
		TTLSeconds:   30,
		LeaseSeconds: 15,
		RetryLimit:   3,
	})
	check(err)

	// push: one queue per request, all or nothing, answering {pushed}.
	pushed, err := queen.Push(ctx, queue, []any{
		presence{User: "alice", Typing: true},
		presence{User: "bob", Typing: true},
	}, client.PushOptions{Partition: room})
	check(err)
	fmt.Println("pushed", pushed.Pushed)

	// queues and depth: gauges read out of the broker's own memory.
	queues, err := queen.Queues(ctx)
	check(err)
	printJSON(queues)
	depth, err := queen.Depth(ctx, queue, client.DepthOptions{})
	check(err)
	printJSON(depth)

	// pop: the group is the consumption semantics; wait is a real long poll.
	popped, err := queen.Pop(ctx, queue, client.PopOptions{Partition: room, Group: "widget", Batch: 10, Wait: true, Timeout: 2 * time.Second})
	check(err)
	users := make([]string, len(popped.Messages))
	for i, m := range popped.Messages {
		var p presence
		check(m.Decode(&p))
		users[i] = p.User
	}
	fmt.Println("popped", strings.Join(users, ", "))

	// ack: with the same group the pop used, because cursors are per group.
	acked, err := queen.Ack(ctx, queue, popped.Messages, client.AckOptions{Group: "widget"})
	check(err)
	outcomes := make([]string, len(acked.Results))
	for i, r := range acked.Results {
		outcomes[i] = r.Outcome
	}
	fmt.Println("outcomes", strings.Join(outcomes, ", "))

	// A second group over the same ring receives everything the first one
	// consumed. Fan-out is another group name and nothing else.
	audit, err := queen.Pop(ctx, queue, client.PopOptions{Partition: room, Group: "audit", Batch: 10})
	check(err)
	fmt.Println("the audit group saw", len(audit.Messages))

	// reset: drop every message, void every lease, rewind every cursor.
	reset, err := queen.Reset(ctx, queue)
	check(err)
	fmt.Println("reset dropped", reset.Dropped)

	// delete: the contents, the cursors, and the declaration.
	_, err = queen.Delete(ctx, queue)
	check(err)

	check(queen.Close(ctx))
}

func printJSON(v any) {
	b, err := json.Marshal(v)
	check(err)
	fmt.Println(string(b))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
