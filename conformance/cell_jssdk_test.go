package conformance

// The JS SDK (clients/js) through a real cell: three broker binaries on one
// throwaway PostgreSQL (the harness of cell_test.go), and a Node script
// (testdata/cell_js.mjs) using the SDK against them. The script reports
// every outcome as JSON on stdout; this test asserts it.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// jsNode answers node's path, or skips t (fails it with
// QUEEN_TEST_REQUIRE_NODE=1) when node is absent or older than 20.3, which
// queen-mq needs (AbortSignal.any): the rule of examples/examples_test.go.
func jsNode(t *testing.T) string {
	t.Helper()
	node, why := findNode()
	if why != "" {
		if os.Getenv("QUEEN_TEST_REQUIRE_NODE") == "1" {
			t.Fatal(why)
		}
		t.Skip(why + " (QUEEN_TEST_REQUIRE_NODE=1 makes this a failure)")
	}
	return node
}

// findNode answers node's path, or why there is none that queen-mq can
// run on.
func findNode() (node, why string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "node is not on PATH"
	}
	if out, err := exec.Command(node, "-e", "process.stdout.write(typeof AbortSignal.any)").Output(); err != nil || string(out) != "function" {
		return "", "node is older than 20.3"
	}
	return node, ""
}

// startJSScript starts node on script with QUEEN_CELL_JS=cfg, for 60 s at
// most: the process (to Wait for), its stdin, a scanner of its stdout's
// lines (one JSON object each) and its stderr.
func startJSScript(t *testing.T, node, script string, cfg []byte) (*exec.Cmd, io.Writer, *bufio.Scanner, *brokertest.LockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "QUEEN_CELL_JS="+string(cfg))
	stderr := &brokertest.LockedBuffer{}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return cmd, stdin, sc, stderr
}

// jsOutcome is one call's outcome as the script reports it: its value, or
// the error it threw.
type jsOutcome struct {
	Value json.RawMessage `json:"value"`
	Error *jsError        `json:"error"`
}

type jsError struct {
	Name     string `json:"name"`
	Message  string `json:"message"`
	Status   int    `json:"status"`
	Code     string `json:"code"`
	Attempts int    `json:"attempts"`
	Sent     bool   `json:"sent"` // a ConnectionError's: the call may have been applied
	Dial     bool   `json:"dial"` // a ConnectionError's: the connection was never established
}

// value fails t when o is an error, else decodes its value into v.
func (o jsOutcome) value(t *testing.T, what string, v any) {
	t.Helper()
	if o.Error != nil {
		t.Fatalf("%s: %+v", what, *o.Error)
	}
	if err := json.Unmarshal(o.Value, v); err != nil {
		t.Fatalf("%s: %v in %s", what, err, o.Value)
	}
}

type jsResult struct {
	Relay []struct {
		Queue                 string
		Push, Pop, Ack, After jsOutcome
	}
	Waiting struct {
		Push, Pop          jsOutcome
		PushedMs, PoppedMs int
	}
	Reqreply struct {
		Replies []jsOutcome
		Errors  []jsError
	}
	Kill struct {
		K1, K2, N                     int
		Flushed, Drained              jsOutcome
		FlushErrors                   []jsError
		BufErrors                     []json.RawMessage
		FlushRetries                  int
		Plain, Refused                jsOutcome
		PlainMs                       int
		Popped                        []int
		Acks                          map[string]int
		PopError                      *jsError
		PlainPopped                   json.RawMessage
		LaterPush, LaterPop, LaterAck jsOutcome
		Reply                         jsOutcome
		ResponderErrors               []jsError
	}
}

// TestCellJSSDK: the JS SDK pointed at members of a real cell of three.
// (1) For a queue owned by each member: a push through A, a pop through B,
// an ack through C (acked), nothing left. (2) A waiting pop through B
// answered by a push through C (queue owned by A: both relayed). (3)
// request() through A with the responder (consume + reply) on B, the
// service queue owned by C: each request's push and the responder's pops
// are relayed. (4) The kill -9 of C, owner of two queues: a push through A
// with the default timeout issued right after it is accepted with no
// caller-visible error (the SDK retried the refusals), as are a waiting
// pop through B, its ack, and a request() through A to a service owned by
// C whose responder on B was parked on C; a push through a
// client with a 300 ms timeout shows the refusal (503, a cell code, several
// sends) and appends nothing, and buffered pushes (batches of 10, every
// 10 ms) drain through the membership change: checkDrainedThroughKill.
//
// Run twice, on a cell of its own each: with the SDK's owner routing off
// (every call relayed by the member it was sent to) and on (each queue's
// calls sent to its owner, learnt from the view read: the kill -9 of an
// owner under owner routing, its queues served again, nothing delivered
// twice, acks of its ids stale, and no caller seeing another error).
func TestCellJSSDK(t *testing.T) {
	node := jsNode(t)
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("testdata", "cell_js.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, routing := range []bool{false, true} {
		name := "relayed"
		if routing {
			name = "ownerRouting"
		}
		t.Run(name, func(t *testing.T) { cellJSSDK(t, node, script, routing) })
	}
}

func cellJSSDK(t *testing.T, node, script string, routing bool) {
	c := newTestCell(t)
	a, b, cc := c.start(advertise(t), nil), c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b, cc)
	c.waitLive(all...)
	relay := []string{queueOwnedBy(t, "jsrelay", a.id, all...), queueOwnedBy(t, "jsrelay", b.id, all...), queueOwnedBy(t, "jsrelay", cc.id, all...)}
	cfg, err := json.Marshal(map[string]any{
		"a": a.url(""), "b": b.url(""), "c": cc.url(""),
		"relay":        relay,
		"waiting":      queueOwnedBy(t, "jswait", a.id, all...),
		"svc":          queueOwnedBy(t, "jssvc", cc.id, all...),
		"dead":         queueOwnedBy(t, "jsdead", cc.id, all...),
		"plain":        queueOwnedBy(t, "jsplain", cc.id, all...),
		"later":        queueOwnedBy(t, "jslater", cc.id, all...),
		"svc2":         queueOwnedBy(t, "jssvc2", cc.id, all...),
		"k1":           100,
		"n":            500,
		"ownerRouting": routing,
	})
	if err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	cmd, stdin, sc, stderr := startJSScript(t, node, script, cfg)
	var res jsResult
	var got, killed bool
	for sc.Scan() {
		var ev struct{ Event string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("node wrote %q: %v", sc.Text(), err)
		}
		switch ev.Event {
		case "kill":
			cc.kill(t)
			killed = true
			if _, err := io.WriteString(stdin, "killed\n"); err != nil {
				t.Fatal(err)
			}
		case "result":
			if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
				t.Fatalf("result: %v in %s", err, sc.Text())
			}
			got = true
		default:
			t.Fatalf("node wrote %s", sc.Text())
		}
	}
	if err := cmd.Wait(); err != nil || !got || !killed {
		t.Fatalf("node: %v (result %v, kill asked %v)\n%s", err, got, killed, stderr.Tail(4000))
	}
	t.Logf("node ran %v", time.Since(started).Round(time.Millisecond))

	// (1) Push, pop, ack on three members.
	if len(res.Relay) != 3 {
		t.Fatalf("relay: %d queues reported", len(res.Relay))
	}
	for i, r := range res.Relay {
		what := "queue owned by " + "ABC"[i:i+1] + " (" + r.Queue + ")"
		var push client.PushResult
		r.Push.value(t, what+": push through A", &push)
		if push.Pushed != 1 {
			t.Fatalf("%s: push through A answered %s", what, r.Push.Value)
		}
		var pop client.PopResult
		r.Pop.value(t, what+": pop through B", &pop)
		if len(pop.Messages) != 1 || string(pop.Messages[0].Payload) != `{"relayed":"`+r.Queue+`"}` {
			t.Fatalf("%s: pop through B answered %s", what, r.Pop.Value)
		}
		var ack client.AckResult
		r.Ack.value(t, what+": ack through C", &ack)
		if len(ack.Results) != 1 || ack.Results[0].ID != pop.Messages[0].ID || ack.Results[0].Outcome != client.OutcomeAcked {
			t.Fatalf("%s: ack through C answered %s", what, r.Ack.Value)
		}
		var after client.PopResult
		r.After.value(t, what+": pop after the ack", &after)
		if len(after.Messages) != 0 {
			t.Fatalf("%s: after the ack a pop answered %s", what, r.After.Value)
		}
	}

	// (2) The waiting pop through B, parked when the push through C came.
	var wpush client.PushResult
	res.Waiting.Push.value(t, "push through C to the parked pop", &wpush)
	var wpop client.PopResult
	res.Waiting.Pop.value(t, "waiting pop through B", &wpop)
	if wpush.Pushed != 1 || len(wpop.Messages) != 1 || string(wpop.Messages[0].Payload) != `"woken"` {
		t.Fatalf("waiting pop: push %s, pop %s", res.Waiting.Push.Value, res.Waiting.Pop.Value)
	}
	if res.Waiting.PushedMs < 300 || res.Waiting.PoppedMs > 3000 {
		t.Fatalf("waiting pop: pushed at %d ms, popped at %d ms; want it parked 300 ms and woken by the push, not its 5 s timeout", res.Waiting.PushedMs, res.Waiting.PoppedMs)
	}

	// (3) Request/reply.
	if len(res.Reqreply.Replies) != 5 || len(res.Reqreply.Errors) != 0 {
		t.Fatalf("request/reply: %d replies, responder errors %+v", len(res.Reqreply.Replies), res.Reqreply.Errors)
	}
	for i, r := range res.Reqreply.Replies {
		var reply struct{ Echo *int }
		r.value(t, "request "+string(rune('0'+i)), &reply)
		if reply.Echo == nil || *reply.Echo != i {
			t.Fatalf("request %d: reply %s", i, r.Value)
		}
	}

	// (4) Through the kill.
	k := res.Kill
	var plain client.PushResult
	k.Plain.value(t, "push through A right after the kill", &plain)
	if plain.Pushed != 1 {
		t.Fatalf("push right after the kill answered %s", k.Plain.Value)
	}
	if k.PlainMs > 5000 {
		t.Fatalf("push right after the kill accepted only after %d ms", k.PlainMs)
	}
	e := k.Refused.Error
	if e == nil || e.Name != "QueenError" || e.Status != 503 || (e.Code != "ephemeral_forward_failed" && e.Code != "owner_moved") || e.Attempts < 2 {
		t.Fatalf("push with a 300 ms timeout right after the kill: %+v %s; want a QueenError 503 ephemeral_forward_failed or owner_moved after several sends", e, k.Refused.Value)
	}
	if got := string(k.PlainPopped); got != `["plain"]` {
		t.Fatalf("the plain pushes' queue holds %s after the move, want only the accepted push", got)
	}
	var lpush client.PushResult
	k.LaterPush.value(t, "push to wake the pop issued after the kill", &lpush)
	var lpop client.PopResult
	k.LaterPop.value(t, "waiting pop through B issued right after the kill", &lpop)
	if lpush.Pushed != 1 || len(lpop.Messages) != 1 || string(lpop.Messages[0].Payload) != `"later"` {
		t.Fatalf("waiting pop through the kill: push %s, pop %s", k.LaterPush.Value, k.LaterPop.Value)
	}
	var lack client.AckResult
	k.LaterAck.value(t, "ack through A after the move", &lack)
	if len(lack.Results) != 1 || lack.Results[0].Outcome != client.OutcomeAcked {
		t.Fatalf("ack after the move: %s", k.LaterAck.Value)
	}
	var reply struct{ Echo string }
	k.Reply.value(t, "request() through A issued right after the kill", &reply)
	if reply.Echo != "through" {
		t.Fatalf("request through the kill: reply %s", k.Reply.Value)
	}
	for _, e := range k.ResponderErrors {
		// The responder's loop goes on after its parked pop died with C
		// (a lost answer) or a refusal outlived its 1 s wait; anything
		// else is a failure.
		if e.Name != "ConnectionError" && (e.Status != 503 || (e.Code != "ephemeral_forward_failed" && e.Code != "owner_moved")) {
			t.Fatalf("the responder through the kill reported %+v", e)
		}
	}
	if k.Flushed.Error != nil || k.Drained.Error != nil || len(k.FlushErrors) != 0 || len(k.BufErrors) != 0 {
		t.Fatalf("buffered pushes: flush before the kill %+v, after %+v, flush errors %+v, push errors %s", k.Flushed.Error, k.Drained.Error, k.FlushErrors, k.BufErrors)
	}
	if k.PopError != nil {
		t.Fatalf("popping after the move: %+v", *k.PopError)
	}
	if k.FlushRetries == 0 {
		t.Fatal("the buffer retried no batch: the kill did not happen under it")
	}
	l := checkDrainedThroughKill(t, k.Popped, k.K1, k.K2, k.N)
	if !maps.Equal(k.Acks, map[string]int{"acked": len(k.Popped)}) {
		t.Fatalf("acks after the move: %v, want %d acked", k.Acks, len(k.Popped))
	}
	t.Logf("kill: responder errors %+v", k.ResponderErrors)
	t.Logf("kill: plain push accepted after %d ms; the 300 ms one refused %d %s after %d sends; buffered: %d flushed before, %d handed before the kill done, %d in all, lost 0..%d, %d popped once from the new owner, %d batch retries",
		k.PlainMs, e.Status, e.Code, e.Attempts, k.K1, k.K2, k.N, l-1, len(k.Popped), k.FlushRetries)
}
