package conformance

// The JS SDK's owner routing (clients/js/lib/cellview.js, docs/sdk-transport-js.md
// "Owner routing") through a real cell: three broker binaries on one
// throwaway PostgreSQL, and a Node script (testdata/cell_js_owner.mjs)
// given member A's URL only.

import (
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

type jsOwnerVerbs struct {
	Queue                 string
	Push, Pop, Ack, After jsOutcome
}

// TestCellJSSDKOwnerRouting: the client learns the three members from A's
// view read; the push, waiting pop, ack and pop of two queues owned by A
// and two owned by B are served where they are sent: no member relays
// anything (queen_ephemeral_relayed_total flat on every member), and B
// serves its queues itself. Member C publishes a URL nobody listens on
// (QUEEN_CELL_PUBLIC_URL on a closed port): its queue's calls go through A,
// which relays them (A's relayed count rises by 4), and every call
// succeeds.
func TestCellJSSDKOwnerRouting(t *testing.T) {
	node := jsNode(t)
	t.Parallel()
	script, err := filepath.Abs(filepath.Join("testdata", "cell_js_owner.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	c := newSteadyTestCell(t)
	closed := "http://127.0.0.1:" + strconv.Itoa(brokertest.Port(t))
	a, b := c.start(advertise(t), nil), c.start(advertise(t), nil)
	cc := c.start(advertise(t), map[string]string{"QUEEN_CELL_PUBLIC_URL": closed})
	all := ids(a, b, cc)
	c.waitLive(all...)
	owned := []string{
		queueOwnedBy(t, "jsownA", a.id, all...), queueOwnedBy(t, "jsownA2", a.id, all...),
		queueOwnedBy(t, "jsownB", b.id, all...), queueOwnedBy(t, "jsownB2", b.id, all...),
	}
	far := queueOwnedBy(t, "jsfar", cc.id, all...)
	cfg, err := json.Marshal(map[string]any{"a": a.url(""), "owned": owned, "far": far})
	if err != nil {
		t.Fatal(err)
	}
	relayed := func() []float64 {
		var out []float64
		for _, m := range []*member{a, b, cc} {
			s, _ := m.scrape(t)
			out = append(out, s["queen_ephemeral_relayed_total"])
		}
		return out
	}

	cmd, stdin, sc, stderr := startJSScript(t, node, script, cfg)
	var before, afterOwned, afterFar []float64
	var owns, fars []jsOwnerVerbs
	for sc.Scan() {
		var ev struct {
			Event   string
			Members []string
			Owned   []jsOwnerVerbs
			Far     jsOwnerVerbs
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("node wrote %q: %v", sc.Text(), err)
		}
		switch ev.Event {
		case "view":
			want := slices.Clone(all)
			slices.Sort(want)
			if !slices.Equal(ev.Members, want) {
				t.Fatalf("the client's view: %v, want %v", ev.Members, want)
			}
			before = relayed()
		case "owned":
			afterOwned = relayed()
			owns = ev.Owned
		case "result":
			afterFar = relayed()
			fars = []jsOwnerVerbs{ev.Far}
		default:
			t.Fatalf("node wrote %s", sc.Text())
		}
		if ev.Event != "result" {
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cmd.Wait(); err != nil || fars == nil {
		t.Fatalf("node: %v\nstderr: %s", err, stderr.Tail(4000))
	}
	for _, r := range append(owns, fars...) {
		var push client.PushResult
		r.Push.value(t, r.Queue+": push", &push)
		var pop client.PopResult
		r.Pop.value(t, r.Queue+": waiting pop", &pop)
		var ack client.AckResult
		r.Ack.value(t, r.Queue+": ack", &ack)
		var after client.PopResult
		r.After.value(t, r.Queue+": pop after the ack", &after)
		if push.Pushed != 1 || len(pop.Messages) != 1 || string(pop.Messages[0].Payload) != `{"to":"`+r.Queue+`"}` ||
			len(ack.Results) != 1 || ack.Results[0].Outcome != client.OutcomeAcked || len(after.Messages) != 0 {
			t.Fatalf("%s: push %s, pop %s, ack %s, after %s", r.Queue, r.Push.Value, r.Pop.Value, r.Ack.Value, r.After.Value)
		}
	}
	if len(owns) != len(owned) {
		t.Fatalf("%d owned queues reported, want %d", len(owns), len(owned))
	}
	if !slices.Equal(before, afterOwned) {
		t.Fatalf("relayed counts (A, B, C) went from %v to %v over the calls of queues owned by A and B: the SDK sent them to a member that does not own them", before, afterOwned)
	}
	if want := []float64{afterOwned[0] + 4, afterOwned[1], afterOwned[2]}; !slices.Equal(afterFar, want) {
		t.Fatalf("relayed counts (A, B, C) after the unreachable member's queue: %v, want %v (its four calls relayed by A)", afterFar, want)
	}
	held := func(m *member, q string) bool {
		r, err := m.rawDo("GET", "/api/v1/ephemeral/queues/"+q+"/depth", "")
		return err == nil && r.Status == 200
	}
	for i, q := range owned {
		owner := []*member{a, a, b, b}[i]
		if !held(owner, q) {
			t.Fatalf("%s: not held by its owner %s", q, owner.id)
		}
	}
	t.Logf("relayed (A, B, C): %v before, %v after the owned queues, %v after C's", before, afterOwned, afterFar)
}
