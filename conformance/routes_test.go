package conformance

import (
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestRoutes walks every route of the family once, on each store, and
// checks every field of every answer (docs/routes.md; D3, D5, D6, D9,
// D10).
func TestRoutes(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, st storeKind) {
		b := startBrokerOn(t, st, nil)
		inc := b.health(t).Incarnation

		// configure: 201, the options echoed byte for byte (spacing and
		// key order as sent).
		const opts = `{ "policy" : "reject",  "maxLength":100 }`
		b.configure(t, "orders", opts)

		// push: 201 {"pushed": n}; payloads are any JSON, kept verbatim.
		payloads := []string{`{"a" : 1}`, `[1, 2 ,3]`, `"s\u00e9"`, `null`, `12.50e1`}
		b.push(t, "orders", "p1", payloads...)
		b.push(t, "orders", "", `{"default":true}`) // no partition: Default
		// An empty messages array is 201 {"pushed": 0}, not a 400.
		var pushed map[string]int
		b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"orders","messages":[]}`).want(t, 201, &pushed)
		if !reflect.DeepEqual(pushed, map[string]int{"pushed": 0}) {
			t.Fatalf("empty push: %v, want {pushed: 0}", pushed)
		}

		var p1Bytes int64
		for _, p := range payloads {
			p1Bytes += int64(len(p))
		}
		defBytes := int64(len(`{"default":true}`))
		total := p1Bytes + defBytes

		// The listing: every gauge, and the options in force. The row's
		// bytes are payload bytes; cellBytes is the footprint, payload plus
		// the charges of the queue, its two partitions and their rings
		// (docs/engine.md, "What the budgets count").
		l := b.queues(t)
		wantOpts := defaultOptions
		wantOpts.MaxLength = 100
		wantRow := queueRow{Queue: "orders", Tier: "declared", Depth: 6, Bytes: total, Partitions: 2, Groups: 0, Options: wantOpts}
		footprint := total + queueCharge("orders") +
			partitionCharge("p1") + ringCharge(len(payloads)) + partitionCharge("Default") + ringCharge(1)
		if l.Count != 1 || !reflect.DeepEqual(l.Queues, []queueRow{wantRow}) || l.CellBytes != footprint {
			t.Fatalf("listing %+v\nwant one row %+v and cellBytes %d", l, wantRow, footprint)
		}

		// The depth read without a group.
		d := b.depth(t, "orders", "")
		wantD := depthResp{Queue: "orders", Group: nil, Tier: "declared", Pending: 6, PartitionsPending: 2, Bytes: total,
			Partitions: []partDepth{{"Default", 1, defBytes}, {"p1", 5, p1Bytes}}, Groups: []groupDepth{}}
		if !reflect.DeepEqual(d, wantD) {
			t.Fatalf("depth %+v\nwant %+v", d, wantD)
		}

		// pop: FIFO within the partition, payloads verbatim, attempts 0,
		// ids e:<incarnation>:<partition>:<seq> (D6).
		p := b.pop(t, popq{"queue": "orders", "partition": "p1", "group": "g", "batch": "10"})
		if !equalStrings(p.payloads(), payloads) {
			t.Fatalf("popped payloads %q, want %q verbatim and in order", p.payloads(), payloads)
		}
		idRE := regexp.MustCompile(`^e:` + regexp.QuoteMeta(inc) + `:p1:[0-9]+$`)
		seen := map[string]bool{}
		for _, m := range p.Messages {
			if m.Partition != "p1" || m.Attempts != 0 || !idRE.MatchString(m.ID) || seen[m.ID] {
				t.Fatalf("popped message %+v: want partition p1, attempts 0, a fresh id e:%s:p1:<seq>", m, inc)
			}
			seen[m.ID] = true
		}

		// ack: one result per id, in order.
		if got := b.ackAll(t, "orders", "g", "completed", p); !equalStrings(got, []string{"acked", "acked", "acked", "acked", "acked"}) {
			t.Fatalf("ack outcomes %v", got)
		}

		// The depth read for group g: p1 is settled for it; Default has
		// not been read by it, so its message is pending for g (D5). The
		// bytes still count the consumed messages (reclaimable, D5).
		d = b.depth(t, "orders", "g")
		g := "g"
		wantD = depthResp{Queue: "orders", Group: &g, Tier: "declared", Pending: 1, PartitionsPending: 1, Bytes: total,
			Partitions: []partDepth{{"Default", 1, defBytes}, {"p1", 0, p1Bytes}},
			Groups:     []groupDepth{{"g", 1, 0}}}
		if !reflect.DeepEqual(d, wantD) {
			t.Fatalf("depth ?group=g %+v\nwant %+v", d, wantD)
		}
		// Without the group: p1's messages are below the reclaim point.
		d = b.depth(t, "orders", "")
		wantD.Group, wantD.Groups = nil, []groupDepth{{"g", 1, 0}}
		if !reflect.DeepEqual(d, wantD) {
			t.Fatalf("depth %+v\nwant %+v", d, wantD)
		}
		if r := b.row(t, "orders"); r.Depth != 1 || r.Bytes != total || r.Groups != 1 {
			t.Fatalf("listing row %+v: want depth 1, bytes %d, groups 1", r, total)
		}

		// reset: every message held is dropped (consumed ones too); the
		// declaration and the groups stay.
		if n := b.reset(t, "orders"); n != 6 {
			t.Fatalf("reset dropped %d, want 6", n)
		}
		d = b.depth(t, "orders", "")
		if d.Pending != 0 || d.Bytes != 0 || d.Tier != "declared" || !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 0, 0}}) {
			t.Fatalf("depth after reset %+v", d)
		}
		if r := b.row(t, "orders"); r.Tier != "declared" || r.Depth != 0 || r.Bytes != 0 || r.Drops != (drops{}) || r.Options != wantOpts {
			t.Fatalf("listing row after reset %+v", r)
		}

		// delete: the contents and the declaration.
		if got := b.delete(t, "orders"); got != (deleted{"orders", true, true}) {
			t.Fatalf("delete %+v, want deleted and declared", got)
		}
		var empty listing
		b.do(t, "GET", "/api/v1/ephemeral/queues", nil).want(t, 200, &empty)
		if empty.Count != 0 || len(empty.Queues) != 0 || empty.Queues == nil || empty.CellBytes != 0 {
			t.Fatalf("listing after delete %+v: want no queue, cellBytes 0", empty)
		}
		b.do(t, "GET", depthPath("orders", ""), nil).wantErr(t, 404, "ephemeral_queue_not_found")
		if got := b.delete(t, "orders"); got != (deleted{"orders", false, false}) {
			t.Fatalf("second delete %+v, want deleted false, declared false", got)
		}

		// An implicit queue, named with a slash, a space and a non-ASCII
		// letter: the :queue path segment is percent-decoded.
		name := "inbox/1 é"
		b.push(t, name, "", `"reply"`)
		r := b.row(t, name)
		if r.Tier != "implicit" || r.Depth != 1 || r.Options != defaultOptions {
			t.Fatalf("implicit queue row %+v", r)
		}
		d = b.depth(t, name, "")
		if d.Queue != name || d.Tier != "implicit" || d.Pending != 1 {
			t.Fatalf("depth of %q: %+v", name, d)
		}
		if got := b.delete(t, name); got != (deleted{name, true, false}) {
			t.Fatalf("delete of the implicit queue %+v, want deleted true, declared false", got)
		}
		if l := b.queues(t); l.Count != 0 || l.CellBytes != 0 {
			t.Fatalf("listing after deleting the implicit queue: %v, cellBytes %d; want none and 0", l.names(), l.CellBytes)
		}
	})
}

// TestHealth: GET /health is 200 with status, store, incarnation and
// version (D16), on each store; the incarnation is at least 48 random bits
// in hex (D6) and is the one in the ids.
func TestHealth(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, st storeKind) {
		b := startBrokerOn(t, st, nil)
		h := b.health(t)
		// The harness builds without -ldflags, so the version is what the
		// binary read from its build info (cmd/queen/version.go): "dev"
		// only where the toolchain recorded nothing. Whatever it is,
		// `queen --version` says the same.
		out, err := exec.Command(brokerBin(t), "--version").Output()
		if err != nil {
			t.Fatalf("queen --version: %v", err)
		}
		first, _, _ := strings.Cut(string(out), "\n")
		if h.Status != "ok" || h.Store != "ok" || h.Version == "" || "queen "+h.Version != first {
			t.Fatalf("health %+v: want status ok, store ok, and the version of %q", h, first)
		}
		if !regexp.MustCompile(`^[0-9a-f]{12,}$`).MatchString(h.Incarnation) {
			t.Fatalf("incarnation %q: want at least 48 bits of hex", h.Incarnation)
		}
		b.push(t, "h", "", "1")
		p := b.pop(t, popq{"queue": "h"})
		if len(p.Messages) != 1 || !strings.HasPrefix(p.Messages[0].ID, "e:"+h.Incarnation+":Default:") {
			t.Fatalf("popped %+v: want one id minted by incarnation %s", p, h.Incarnation)
		}
		// Only GET.
		b.do(t, "POST", "/health", "{}").wantErr(t, 405, "method_not_allowed")
	})
}

// TestUnknownRoutes: routes outside the eight are our own choice, since
// docs/routes.md allows a 404 on this family only for the depth read (and a
// 404 means an old broker): an unknown path is 404 "not_found", a known
// path with another method is 405 "method_not_allowed". Both are the
// family's refusal shape.
func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/", 404, "not_found"},
		{"GET", "/nope", 404, "not_found"},
		{"GET", "/api/v1/ephemeral/nope", 404, "not_found"},
		{"GET", "/api/v1/ephemeral/queues/q/depth/more", 404, "not_found"},
		{"GET", "/api/v1/ephemeral/queues/q", 404, "not_found"},
		{"GET", "/api/v1/ephemeral/queues/depth", 404, "not_found"}, // no :queue segment at all
		// An empty :queue segment is the route with a bad name (D10): 400.
		{"DELETE", "/api/v1/ephemeral/queue/", 400, "ephemeral_bad_request"},
		{"GET", "/api/v1/ephemeral/queues//depth", 400, "ephemeral_bad_request"},
		{"PUT", "/api/v1/ephemeral/push", 405, "method_not_allowed"},
		{"GET", "/api/v1/ephemeral/push", 405, "method_not_allowed"},
		{"POST", "/api/v1/ephemeral/pop", 405, "method_not_allowed"},
		{"GET", "/api/v1/ephemeral/ack", 405, "method_not_allowed"},
		{"GET", "/api/v1/ephemeral/configure", 405, "method_not_allowed"},
		{"GET", "/api/v1/ephemeral/reset", 405, "method_not_allowed"},
		{"GET", "/api/v1/ephemeral/queue/q", 405, "method_not_allowed"},
		{"POST", "/api/v1/ephemeral/queues", 405, "method_not_allowed"},
		{"DELETE", "/api/v1/ephemeral/queues/q/depth", 405, "method_not_allowed"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			b.do(t, c.method, c.path, nil).wantErr(t, c.status, c.code)
		})
	}
}

// TestNotFoundOnlyOnDepth: no route but the depth read answers 404 for a
// queue that is not there (docs/routes.md, reset and delete).
func TestNotFoundOnlyOnDepth(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.do(t, "GET", depthPath("ghost", ""), nil).wantErr(t, 404, "ephemeral_queue_not_found")
	b.do(t, "GET", depthPath("ghost", "g"), nil).wantErr(t, 404, "ephemeral_queue_not_found")
	if n := b.reset(t, "ghost"); n != 0 {
		t.Fatalf("reset of a missing queue dropped %d, want 0", n)
	}
	if got := b.delete(t, "ghost"); got != (deleted{"ghost", false, false}) {
		t.Fatalf("delete of a missing queue %+v", got)
	}
	// An ack naming a queue that is not there: a well-formed id of ours
	// is unknown, another incarnation's is stale, garbage is unknown.
	inc := b.health(t).Incarnation
	got := b.ack(t, "ghost-ack", "g",
		ackItem{ID: "e:" + inc + ":Default:0"},
		ackItem{ID: "e:" + otherIncarnation(inc) + ":Default:0"},
		ackItem{ID: "not-an-id"})
	if !equalStrings(got, []string{"unknown", "stale", "unknown"}) {
		t.Fatalf("ack outcomes on a missing queue %v, want unknown, stale, unknown", got)
	}
	// A pop creates the queue implicitly and answers an empty batch.
	p := b.pop(t, popq{"queue": "ghost-pop"})
	if len(p.Messages) != 0 {
		t.Fatalf("pop of a new queue: %+v", p)
	}
	if r := b.row(t, "ghost-pop"); r.Tier != "implicit" || r.Depth != 0 {
		t.Fatalf("the queue a pop created: %+v", r)
	}
	if d := b.depth(t, "ghost-pop", ""); d.Tier != "implicit" || d.Pending != 0 {
		t.Fatalf("depth of the queue a pop created: %+v", d)
	}
	// A depth read for a group that does not exist answers as for a new
	// group (D5), not 404.
	b.push(t, "ghost-pop", "", "1", "2")
	d := b.depth(t, "ghost-pop", "nobody")
	if d.Group == nil || *d.Group != "nobody" || d.Pending != 2 {
		t.Fatalf("depth for a group that does not exist: %+v; want group nobody, pending 2", d)
	}
}
