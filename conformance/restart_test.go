package conformance

import (
	"reflect"
	"testing"
)

// TestRestart, on each store: after a clean exit (SIGTERM) and after a
// crash (SIGKILL), declared queues come back as configured and empty,
// implicit queues do not come back, drop counters are zero, and acks of
// ids minted before answer stale (docs/contract.md, Survival, two tiers,
// ack; D6, D9, D16).
func TestRestart(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, st storeKind) {
		b := startBrokerOn(t, st, nil)
		inc1 := b.health(t).Incarnation

		// decl: stored as sent, in force clamped to the ceilings (lease
		// 3600 by default).
		b.configure(t, "decl", `{"maxLength":50,"leaseSeconds":999999,"windowBuffer":{"ms":10,"count":5}}`)
		wantDecl := defaultOptions
		wantDecl.MaxLength, wantDecl.LeaseSeconds, wantDecl.WindowBuffer = 50, 3600, &window{10, 5}
		// decl2: configure replaces the declaration whole (D9).
		b.configure(t, "decl2", `{"maxLength":5}`)
		b.configure(t, "decl2", `{"retryLimit":7}`)
		wantDecl2 := defaultOptions
		wantDecl2.RetryLimit = 7
		// decl3 gets a bounds drop, to see the counters zeroed.
		b.configure(t, "decl3", `{"maxLength":1,"policy":"dropOldest"}`)
		wantDecl3 := defaultOptions
		wantDecl3.MaxLength, wantDecl3.Policy = 1, "dropOldest"
		b.push(t, "decl3", "", "1", "2")
		// impl: configuring an implicit queue keeps its contents.
		b.push(t, "impl", "", "1", "2")
		b.push(t, "promoted", "", "1")
		b.configure(t, "promoted", `{"ttlSeconds":60}`)
		wantPromoted := defaultOptions
		wantPromoted.TTLSeconds = 60

		b.push(t, "decl", "p", "1", "2", "3")
		held := b.pop(t, popq{"queue": "decl", "group": "g"})
		heldImpl := b.pop(t, popq{"queue": "impl", "group": "g"})
		if len(held.Messages) != 1 || len(heldImpl.Messages) != 1 {
			t.Fatalf("pops before the restart: %+v %+v", held, heldImpl)
		}

		before := map[string]queueRow{
			"decl":     {Queue: "decl", Tier: "declared", Depth: 3, Bytes: 3, Partitions: 1, Groups: 1, Options: wantDecl},
			"decl2":    {Queue: "decl2", Tier: "declared", Options: wantDecl2},
			"decl3":    {Queue: "decl3", Tier: "declared", Depth: 1, Bytes: 1, Partitions: 1, Drops: drops{Bounds: 1}, Options: wantDecl3},
			"impl":     {Queue: "impl", Tier: "implicit", Depth: 2, Bytes: 2, Partitions: 1, Groups: 1, Options: defaultOptions},
			"promoted": {Queue: "promoted", Tier: "declared", Depth: 1, Bytes: 1, Partitions: 1, Options: wantPromoted},
		}
		checkListing(t, b, before)

		// A clean exit.
		b.restart(t)
		h := b.health(t)
		if h.Incarnation == inc1 || h.Store != "ok" {
			t.Fatalf("after the restart: %+v; want store ok and a new incarnation (was %s)", h, inc1)
		}
		empty := func(name string, o options) queueRow {
			return queueRow{Queue: name, Tier: "declared", Options: o}
		}
		after := map[string]queueRow{
			"decl":     empty("decl", wantDecl),
			"decl2":    empty("decl2", wantDecl2),
			"decl3":    empty("decl3", wantDecl3),
			"promoted": empty("promoted", wantPromoted),
		}
		checkListing(t, b, after)
		// Nothing is held: the footprint is the declared queues' own
		// charges, with no partition, group or payload (docs/engine.md,
		// "What the budgets count").
		var declared int64
		for name := range after {
			declared += queueCharge(name)
		}
		if l := b.queues(t); l.CellBytes != declared {
			t.Fatalf("cellBytes %d after a restart, want %d (the charges of %d empty declared queues)", l.CellBytes, declared, len(after))
		}
		b.do(t, "GET", depthPath("impl", ""), nil).wantErr(t, 404, "ephemeral_queue_not_found")
		d := b.depth(t, "decl", "")
		if d.Tier != "declared" || d.Pending != 0 || d.Bytes != 0 || len(d.Partitions) != 0 || len(d.Groups) != 0 {
			t.Fatalf("depth of decl after the restart: %+v; want declared and empty", d)
		}
		// Acks from before the restart are stale, on a declared queue and
		// on one that is gone.
		if got := b.ackAll(t, "decl", "g", "completed", held); !equalStrings(got, []string{"stale"}) {
			t.Fatalf("ack after the restart: %v, want stale", got)
		}
		if got := b.ackAll(t, "impl", "g", "failed", heldImpl); !equalStrings(got, []string{"stale"}) {
			t.Fatalf("ack on a vanished implicit queue: %v, want stale", got)
		}
		if p := b.pop(t, popq{"queue": "decl", "group": "g", "batch": "10"}); len(p.Messages) != 0 {
			t.Fatalf("messages survived the restart: %v", p.payloads())
		}
		// The restored declaration is in force: decl3 drops oldest at 1.
		b.push(t, "decl3", "", "10", "20")
		if r := b.row(t, "decl3"); r.Depth != 1 || r.Drops != (drops{Bounds: 1}) {
			t.Fatalf("decl3 after the restart: %+v", r)
		}

		// A crash: what was declared and deleted before it holds.
		if got := b.delete(t, "decl2"); got != (deleted{"decl2", true, true}) {
			t.Fatalf("delete decl2: %+v", got)
		}
		b.configure(t, "decl4", "")
		b.push(t, "decl", "p", "9")
		held = b.pop(t, popq{"queue": "decl", "group": "g"})
		b.kill(t)
		b.start(t)
		checkListing(t, b, map[string]queueRow{
			"decl":     empty("decl", wantDecl),
			"decl3":    empty("decl3", wantDecl3),
			"decl4":    empty("decl4", defaultOptions),
			"promoted": empty("promoted", wantPromoted),
		})
		if got := b.ackAll(t, "decl", "g", "completed", held); !equalStrings(got, []string{"stale"}) {
			t.Fatalf("ack after the crash: %v, want stale", got)
		}
	})
}

// checkListing requires the listing to be exactly want (by name).
func checkListing(t *testing.T, b *broker, want map[string]queueRow) {
	t.Helper()
	l := b.queues(t)
	got := map[string]queueRow{}
	for _, q := range l.Queues {
		got[q.Queue] = q
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listing:\n got %+v\nwant %+v", got, want)
	}
}
