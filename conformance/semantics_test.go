package conformance

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestAckOutcomes: acked, redelivered and unknown as a live broker gives
// them, and stale for another incarnation's id (docs/routes.md, ack; D2). The stale
// outcome after a real restart is in TestRestart.
func TestAckOutcomes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	inc := b.health(t).Incarnation
	b.push(t, "acks", "p", "0", "1", "2")

	p := b.pop(t, popq{"queue": "acks", "partition": "p", "group": "g", "batch": "2"})
	if !equalStrings(p.payloads(), []string{"0", "1"}) {
		t.Fatalf("popped %v", p.payloads())
	}
	m0, m1 := p.Messages[0], p.Messages[1]
	got := b.ack(t, "acks", "g", ackItem{m0.ID, "completed"}, ackItem{m1.ID, "failed"})
	if !equalStrings(got, []string{"acked", "redelivered"}) {
		t.Fatalf("outcomes %v, want acked, redelivered", got)
	}
	// Acked already: there is no such lease any more.
	if got := b.ack(t, "acks", "g", ackItem{m0.ID, "completed"}); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("second ack of one id: %v, want unknown", got)
	}

	// The failed message comes back first, same id, attempts + 1 (D2).
	p = b.pop(t, popq{"queue": "acks", "partition": "p", "group": "g", "batch": "10"})
	if len(p.Messages) != 2 || p.Messages[0].ID != m1.ID || p.Messages[0].Attempts != 1 ||
		string(p.Messages[1].Payload) != "2" || p.Messages[1].Attempts != 0 {
		t.Fatalf("after a failed ack: %+v; want message 1 (attempts 1, same id) then 2 (attempts 0)", p.Messages)
	}
	m2 := p.Messages[1]
	// retry is failed's twin; a missing status is completed.
	got = b.ack(t, "acks", "g", ackItem{m1.ID, "retry"}, ackItem{ID: m2.ID})
	if !equalStrings(got, []string{"redelivered", "acked"}) {
		t.Fatalf("outcomes %v, want redelivered, acked", got)
	}
	p = b.pop(t, popq{"queue": "acks", "group": "g", "batch": "10"})
	if len(p.Messages) != 1 || p.Messages[0].ID != m1.ID || p.Messages[0].Attempts != 2 {
		t.Fatalf("after a retry ack: %+v; want message 1 with attempts 2", p.Messages)
	}

	// The lease is group g's: another group, or queue mode, has none.
	if got := b.ack(t, "acks", "other", ackItem{ID: m1.ID}); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("ack in another group: %v, want unknown", got)
	}
	if got := b.ack(t, "acks", "", ackItem{ID: m1.ID}); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("ack in queue mode: %v, want unknown", got)
	}
	// Another incarnation's id is stale, an id that is not ours unknown;
	// an error string is accepted and ignored. One call, one result each,
	// in order.
	stale := "e:" + otherIncarnation(inc) + ":p:0"
	body := fmt.Sprintf(`{"queue":"acks","group":"g","acks":[{"id":%q},{"id":"nonsense"},{"id":%q,"status":"completed","error":"handled"},{"id":"e:%s:p:999999"}]}`,
		stale, m1.ID, inc)
	var out ackResp
	b.do(t, "POST", "/api/v1/ephemeral/ack", body).want(t, 200, &out)
	want := []ackResult{{stale, "stale"}, {"nonsense", "unknown"}, {m1.ID, "acked"}, {"e:" + inc + ":p:999999", "unknown"}}
	if !reflect.DeepEqual(out.Results, want) {
		t.Fatalf("results %+v\nwant %+v", out.Results, want)
	}
	if d := b.depth(t, "acks", "g"); d.Pending != 0 || !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 0, 0}}) {
		t.Fatalf("depth %+v: want everything settled for g", d)
	}
}

// TestLeaseExpiry: an unacknowledged message redelivers when its lease
// expires, with attempts + 1 and the same id, and a waiting pop is woken by
// the expiry; an ack after the expiry is unknown (docs/contract.md; D1, D2, D13).
func TestLeaseExpiry(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "lease", `{"leaseSeconds":1}`)
	b.push(t, "lease", "p", `"a"`, `"b"`)

	t0 := time.Now()
	first := b.pop(t, popq{"queue": "lease", "group": "g"})
	if len(first.Messages) != 1 || string(first.Messages[0].Payload) != `"a"` {
		t.Fatalf("first pop %+v", first)
	}
	// The partition is leased to g: this pop parks until the lease ends.
	again := b.pop(t, popq{"queue": "lease", "group": "g", "wait": "true", "timeout": "5000"})
	took := time.Since(t0)
	if len(again.Messages) != 1 || again.Messages[0].ID != first.Messages[0].ID || again.Messages[0].Attempts != 1 {
		t.Fatalf("after the lease expired: %+v; want %s again with attempts 1", again.Messages, first.Messages[0].ID)
	}
	if took < 900*time.Millisecond || took > 4*time.Second {
		t.Fatalf("redelivered %v after the first pop; want about the 1 s lease", took)
	}
	if got := b.ackAll(t, "lease", "g", "completed", again); !equalStrings(got, []string{"acked"}) {
		t.Fatalf("ack of the redelivery: %v", got)
	}

	// An ack that arrives after its lease expired is unknown.
	second := b.pop(t, popq{"queue": "lease", "group": "g"})
	if len(second.Messages) != 1 || string(second.Messages[0].Payload) != `"b"` {
		t.Fatalf("pop %+v", second)
	}
	time.Sleep(1300 * time.Millisecond)
	if got := b.ackAll(t, "lease", "g", "completed", second); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("ack after the lease expired: %v, want unknown", got)
	}
	p := b.pop(t, popq{"queue": "lease", "group": "g"})
	if len(p.Messages) != 1 || p.Messages[0].ID != second.Messages[0].ID || p.Messages[0].Attempts != 1 {
		t.Fatalf("redelivery %+v", p.Messages)
	}
}

// TestRetryDrops: retryLimit N allows N deliveries; the failure that uses
// the last one answers acked, drops the message and counts it under retry,
// whether it came from an ack or a lease expiry (docs/contract.md; D2).
func TestRetryDrops(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "retry", `{"retryLimit":2,"leaseSeconds":1}`)
	b.push(t, "retry", "p", `"a"`, `"b"`)

	p := b.pop(t, popq{"queue": "retry", "group": "g"})
	if got := b.ackAll(t, "retry", "g", "failed", p); !equalStrings(got, []string{"redelivered"}) {
		t.Fatalf("first failure: %v", got)
	}
	p = b.pop(t, popq{"queue": "retry", "group": "g"})
	if len(p.Messages) != 1 || string(p.Messages[0].Payload) != `"a"` || p.Messages[0].Attempts != 1 {
		t.Fatalf("redelivery %+v", p.Messages)
	}
	if got := b.ackAll(t, "retry", "g", "failed", p); !equalStrings(got, []string{"acked"}) {
		t.Fatalf("the failure that uses the last attempt: %v, want acked", got)
	}
	p = b.pop(t, popq{"queue": "retry", "group": "g", "batch": "10"})
	if !equalStrings(p.payloads(), []string{`"b"`}) || p.Messages[0].Attempts != 0 {
		t.Fatalf("after the drop: %+v; want b only", p.Messages)
	}
	b.ackAll(t, "retry", "g", "completed", p)
	if r := b.row(t, "retry"); r.Drops != (drops{Retry: 1}) || r.Depth != 0 {
		t.Fatalf("row %+v: want drops {0 0 1}, depth 0", r)
	}

	// By lease expiry: two deliveries never acked.
	b.push(t, "retry", "p", `"c"`)
	p = b.pop(t, popq{"queue": "retry", "group": "g"})
	if !equalStrings(p.payloads(), []string{`"c"`}) {
		t.Fatalf("pop %+v", p)
	}
	p = b.pop(t, popq{"queue": "retry", "group": "g", "wait": "true", "timeout": "5000"})
	if !equalStrings(p.payloads(), []string{`"c"`}) || p.Messages[0].Attempts != 1 {
		t.Fatalf("redelivery after expiry %+v", p.Messages)
	}
	brokertest.Eventually(t, 5*time.Second, "the second expiry drops c under retry", func() bool {
		return b.row(t, "retry").Drops == drops{Retry: 2}
	})
	if p := b.pop(t, popq{"queue": "retry", "group": "g", "batch": "10"}); len(p.Messages) != 0 {
		t.Fatalf("a dropped message was delivered: %+v", p.Messages)
	}
	if d := b.depth(t, "retry", "g"); d.Pending != 0 || !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 0, 0}}) {
		t.Fatalf("depth %+v: retry drops are not skips", d)
	}
}

// TestTTL: ttlSeconds drops messages older than the limit, consumed or
// not; only pending ones count as ttl drops, and a group that never got one
// counts it as skipped (docs/contract.md, ttl; D5; docs/engine.md).
func TestTTL(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "ttl", `{"ttlSeconds":1}`)
	b.push(t, "ttl", "p", "1", "2")
	if p := b.pop(t, popq{"queue": "ttl", "group": "g", "autoAck": "true"}); !equalStrings(p.payloads(), []string{"1"}) {
		t.Fatalf("pop %+v", p)
	}
	brokertest.Eventually(t, 5*time.Second, "ttl frees both messages", func() bool {
		return b.depth(t, "ttl", "").Bytes == 0
	})
	if r := b.row(t, "ttl"); r.Drops != (drops{TTL: 1}) || r.Depth != 0 || r.Bytes != 0 {
		t.Fatalf("row %+v: want drops {0 1 0} (the consumed one is not a drop), depth 0, bytes 0", r)
	}
	if d := b.depth(t, "ttl", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 0, 1}}) || d.Pending != 0 {
		t.Fatalf("depth %+v: want g pending 0, skipped 1", d)
	}
	if p := b.pop(t, popq{"queue": "ttl", "group": "g", "batch": "10"}); len(p.Messages) != 0 {
		t.Fatalf("an expired message was delivered: %+v", p.Messages)
	}
	// A message freed while in flight leaves its lease: the ack is
	// unknown, and it counts as a ttl drop (it was pending).
	b.configure(t, "ttl2", `{"ttlSeconds":1}`)
	b.push(t, "ttl2", "p", `"late"`)
	inFlight := b.pop(t, popq{"queue": "ttl2", "group": "g"})
	brokertest.Eventually(t, 5*time.Second, "ttl frees the message in flight", func() bool {
		return b.depth(t, "ttl2", "").Bytes == 0
	})
	if got := b.ackAll(t, "ttl2", "g", "completed", inFlight); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("ack of a message ttl freed: %v, want unknown", got)
	}
	if r := b.row(t, "ttl2"); r.Drops != (drops{TTL: 1}) {
		t.Fatalf("row %+v: want drops {0 1 0}", r)
	}
	// A fresh message lives until its own ttl.
	b.push(t, "ttl", "p", "3")
	if p := b.pop(t, popq{"queue": "ttl", "group": "g", "autoAck": "true"}); !equalStrings(p.payloads(), []string{"3"}) {
		t.Fatalf("pop %+v", p)
	}
}

// TestTenantDefaultTTL: QUEEN_EPHEMERAL_TTL_S is the ttlSeconds of every
// queue that does not set one, implicit ones included (D8, D9).
func TestTenantDefaultTTL(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_TTL_S": "1"})
	b.push(t, "inbox", "", `"unread reply"`)
	b.configure(t, "declared", `{"maxLength":5}`)
	for _, q := range []string{"inbox", "declared"} {
		if r := b.row(t, q); r.Options.TTLSeconds != 1 {
			t.Fatalf("%s: ttlSeconds in force %d, want the tenant default 1", q, r.Options.TTLSeconds)
		}
	}
	brokertest.Eventually(t, 5*time.Second, "the unread reply expires", func() bool {
		r := b.row(t, "inbox")
		return r.Drops == drops{TTL: 1} && r.Depth == 0 && r.Bytes == 0
	})
}

// TestDropOldest: under dropOldest a push is admitted and the oldest
// messages are dropped and counted under bounds; a group that never got
// them counts them as skipped; a consumed message is freed first and is no
// drop (docs/contract.md, Bounds; D3, D5; docs/engine.md).
func TestDropOldest(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	t.Run("separate pushes", func(t *testing.T) {
		b.configure(t, "feed", `{"maxLength":3,"policy":"dropOldest"}`)
		b.pop(t, popq{"queue": "feed", "group": "g"}) // g exists from its first pop
		b.push(t, "feed", "p", "1", "2", "3")
		b.push(t, "feed", "p", "4", "5")
		if r := b.row(t, "feed"); r.Depth != 3 || r.Drops != (drops{Bounds: 2}) {
			t.Fatalf("row %+v: want depth 3, drops {2 0 0}", r)
		}
		if d := b.depth(t, "feed", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 3, 2}}) {
			t.Fatalf("groups %+v: want g pending 3, skipped 2", d.Groups)
		}
		if p := b.pop(t, popq{"queue": "feed", "group": "g", "batch": "10", "autoAck": "true"}); !equalStrings(p.payloads(), []string{"3", "4", "5"}) {
			t.Fatalf("popped %v, want 3 4 5", p.payloads())
		}
	})
	t.Run("one push over the bound, group on the partition", func(t *testing.T) {
		b.configure(t, "feed5", `{"maxLength":2,"policy":"dropOldest"}`)
		b.push(t, "feed5", "p", "0")
		b.pop(t, popq{"queue": "feed5", "partition": "p", "group": "g", "autoAck": "true"})
		b.push(t, "feed5", "p", "1", "2", "3", "4") // admitted: pushed 4
		if r := b.row(t, "feed5"); r.Depth != 2 || r.Drops != (drops{Bounds: 2}) {
			t.Fatalf("row %+v: want depth 2, drops {2 0 0}", r)
		}
		if d := b.depth(t, "feed5", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 2, 2}}) {
			t.Fatalf("groups %+v: want g pending 2, skipped 2", d.Groups)
		}
	})
	// g exists (it popped the queue) but has never read partition p: the
	// push's own oldest, dropped, were never delivered to it either.
	t.Run("one push over the bound keeps its newest", func(t *testing.T) {
		b.configure(t, "feed2", `{"maxLength":2,"policy":"dropOldest"}`)
		b.pop(t, popq{"queue": "feed2", "group": "g"})
		b.push(t, "feed2", "p", "1", "2", "3", "4", "5") // admitted: pushed 5
		if r := b.row(t, "feed2"); r.Depth != 2 || r.Drops != (drops{Bounds: 3}) {
			t.Fatalf("row %+v: want depth 2, drops {3 0 0}", r)
		}
		if d := b.depth(t, "feed2", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 2, 3}}) {
			t.Fatalf("groups %+v: want g pending 2, skipped 3", d.Groups)
		}
		if p := b.pop(t, popq{"queue": "feed2", "group": "g", "batch": "10"}); !equalStrings(p.payloads(), []string{"4", "5"}) {
			t.Fatalf("popped %v, want 4 5", p.payloads())
		}
	})
	t.Run("maxBytes", func(t *testing.T) {
		b.configure(t, "feed3", `{"maxBytes":10,"policy":"dropOldest"}`)
		b.pop(t, popq{"queue": "feed3", "group": "g"})
		b.push(t, "feed3", "p", `"ab"`, `"cd"`, `"ef"`) // 12 bytes into 10
		if r := b.row(t, "feed3"); r.Depth != 2 || r.Bytes != 8 || r.Drops != (drops{Bounds: 1}) {
			t.Fatalf("row %+v: want depth 2, bytes 8, drops {1 0 0}", r)
		}
		if d := b.depth(t, "feed3", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 2, 1}}) {
			t.Fatalf("groups %+v", d.Groups)
		}
		if p := b.pop(t, popq{"queue": "feed3", "group": "g", "batch": "10"}); !equalStrings(p.payloads(), []string{`"cd"`, `"ef"`}) {
			t.Fatalf("popped %v", p.payloads())
		}
	})
	t.Run("consumed messages go first and are no drop", func(t *testing.T) {
		b.configure(t, "feed4", `{"maxLength":2,"policy":"dropOldest"}`)
		b.push(t, "feed4", "p", "1", "2")
		if p := b.pop(t, popq{"queue": "feed4", "group": "g", "autoAck": "true"}); !equalStrings(p.payloads(), []string{"1"}) {
			t.Fatalf("popped %v", p.payloads())
		}
		b.push(t, "feed4", "p", "3") // frees the consumed 1
		if r := b.row(t, "feed4"); r.Drops != (drops{}) || r.Depth != 2 {
			t.Fatalf("row %+v: want no drop, depth 2", r)
		}
		b.push(t, "feed4", "p", "4") // drops the pending 2
		if r := b.row(t, "feed4"); r.Drops != (drops{Bounds: 1}) || r.Depth != 2 {
			t.Fatalf("row %+v: want drops {1 0 0}, depth 2", r)
		}
		if d := b.depth(t, "feed4", "g"); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 2, 1}}) {
			t.Fatalf("groups %+v: want g pending 2, skipped 1", d.Groups)
		}
		if p := b.pop(t, popq{"queue": "feed4", "group": "g", "batch": "10"}); !equalStrings(p.payloads(), []string{"3", "4"}) {
			t.Fatalf("popped %v, want 3 4", p.payloads())
		}
	})
}

// TestFanOut: every group receives everything, one ring, the same ids; a
// group created later reads what the others consumed (docs/contract.md; D3).
func TestFanOut(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.push(t, "fan", "p", "1", "2", "3")
	a := b.pop(t, popq{"queue": "fan", "group": "a", "batch": "10"})
	c := b.pop(t, popq{"queue": "fan", "group": "b", "batch": "10"})
	if !equalStrings(a.payloads(), []string{"1", "2", "3"}) || !equalStrings(a.ids(), c.ids()) || !equalStrings(c.payloads(), a.payloads()) {
		t.Fatalf("group a got %v %v, group b %v %v: want all three, same ids", a.payloads(), a.ids(), c.payloads(), c.ids())
	}
	if got := b.ackAll(t, "fan", "a", "completed", a); !equalStrings(got, []string{"acked", "acked", "acked"}) {
		t.Fatalf("ack a: %v", got)
	}
	if got := b.ackAll(t, "fan", "b", "completed", c); !equalStrings(got, []string{"acked", "acked", "acked"}) {
		t.Fatalf("ack b: %v", got)
	}
	late := b.pop(t, popq{"queue": "fan", "group": "late", "batch": "10", "autoAck": "true"})
	if !equalStrings(late.ids(), a.ids()) {
		t.Fatalf("a later group got %v, want the three consumed messages %v", late.payloads(), a.ids())
	}
	r := b.row(t, "fan")
	if r.Groups != 3 || r.Depth != 0 || r.Bytes != 3 {
		t.Fatalf("row %+v: want 3 groups, depth 0, bytes 3", r)
	}
	d := b.depth(t, "fan", "")
	if !reflect.DeepEqual(d.Groups, []groupDepth{{"a", 0, 0}, {"b", 0, 0}, {"late", 0, 0}}) {
		t.Fatalf("groups %+v", d.Groups)
	}
	b.push(t, "fan", "p", "4")
	for _, g := range []string{"a", "b", "late"} {
		if p := b.pop(t, popq{"queue": "fan", "group": g, "autoAck": "true"}); !equalStrings(p.payloads(), []string{"4"}) {
			t.Fatalf("group %s got %v after a new push, want 4", g, p.payloads())
		}
	}
}

// TestCompetingConsumers: consumers sharing a group share its messages:
// each is delivered to one of them, one lease per partition and group at a
// time (docs/contract.md; D1).
func TestCompetingConsumers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	t.Run("explicit ack across partitions", func(t *testing.T) {
		b.push(t, "work", "p1", `"p1-0"`, `"p1-1"`)
		b.push(t, "work", "p2", `"p2-0"`, `"p2-1"`)
		ca, cb := newClient(), newClient()
		defer ca.CloseIdleConnections()
		defer cb.CloseIdleConnections()
		q := popq{"queue": "work", "group": "g"}
		x := b.popWith(t, ca, q)
		y := b.popWith(t, cb, q)
		if len(x.Messages) != 1 || len(y.Messages) != 1 || x.Messages[0].Partition == y.Messages[0].Partition {
			t.Fatalf("consumer A got %v, B got %v: want one message each, from different partitions", x.Messages, y.Messages)
		}
		for _, m := range []popMsg{x.Messages[0], y.Messages[0]} {
			if string(m.Payload) != `"`+m.Partition+`-0"` {
				t.Fatalf("%+v: want the head of its partition", m)
			}
		}
		// Both partitions are leased to g: nothing for anybody in g.
		if z := b.popWith(t, ca, q); len(z.Messages) != 0 {
			t.Fatalf("a third pop got %+v while both partitions are leased", z.Messages)
		}
		// A's ack releases its partition; B takes its next message.
		if got := b.ackAll(t, "work", "g", "completed", x); !equalStrings(got, []string{"acked"}) {
			t.Fatalf("ack %v", got)
		}
		w := b.popWith(t, cb, q)
		if len(w.Messages) != 1 || string(w.Messages[0].Payload) != `"`+x.Messages[0].Partition+`-1"` {
			t.Fatalf("B got %+v, want %s-1", w.Messages, x.Messages[0].Partition)
		}
		b.ackAll(t, "work", "g", "completed", y)
		b.ackAll(t, "work", "g", "completed", w)
		last := b.popWith(t, ca, popq{"queue": "work", "group": "g", "batch": "10"})
		if !equalStrings(last.payloads(), []string{`"` + y.Messages[0].Partition + `-1"`}) {
			t.Fatalf("last pop %v", last.payloads())
		}
		b.ackAll(t, "work", "g", "completed", last)
		if d := b.depth(t, "work", "g"); d.Pending != 0 {
			t.Fatalf("pending %d after every message was acked once", d.Pending)
		}
	})
	t.Run("autoAck", func(t *testing.T) {
		b.pushN(t, "work2", "p", 0, 6)
		var got []string
		for i := 0; i < 3; i++ {
			p := b.pop(t, popq{"queue": "work2", "group": "g", "batch": "2", "autoAck": "true"})
			got = append(got, p.payloads()...)
		}
		if !equalStrings(got, []string{"0", "1", "2", "3", "4", "5"}) {
			t.Fatalf("three consumers got %v: want each message once, in order", got)
		}
	})
	t.Run("parked consumers", func(t *testing.T) {
		q := popq{"queue": "work3", "group": "g", "wait": "true", "timeout": "1500"}
		c1, c2 := b.asyncPop(q), b.asyncPop(q)
		time.Sleep(200 * time.Millisecond)
		b.push(t, "work3", "p", `"only"`)
		r1, r2 := waitPop(t, c1, 5*time.Second), waitPop(t, c2, 5*time.Second)
		n := len(r1.resp.Messages) + len(r2.resp.Messages)
		if n != 1 {
			t.Fatalf("two parked consumers of one group got %v and %v: want the message once", r1.resp.Messages, r2.resp.Messages)
		}
	})
}

// TestQueueMode: a pop with no group is one shared cursor, shown as
// __QUEUE_MODE__; it is a group like the others, with a lease (D1, D4).
func TestQueueMode(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.pushN(t, "qm", "p", 0, 4)
	x := b.pop(t, popq{"queue": "qm", "batch": "2"})
	if !equalStrings(x.payloads(), []string{"0", "1"}) {
		t.Fatalf("pop %v", x.payloads())
	}
	if y := b.pop(t, popq{"queue": "qm", "batch": "2"}); len(y.Messages) != 0 {
		t.Fatalf("a second queue-mode pop got %v while the partition is leased", y.payloads())
	}
	if got := b.ackAll(t, "qm", "", "completed", x); !equalStrings(got, []string{"acked", "acked"}) {
		t.Fatalf("ack without group: %v", got)
	}
	y := b.pop(t, popq{"queue": "qm", "batch": "10", "group": ""})
	if !equalStrings(y.payloads(), []string{"2", "3"}) {
		t.Fatalf("pop %v, want 2 3", y.payloads())
	}
	// The shown name addresses the same cursor (docs/engine.md).
	if got := b.ackAll(t, "qm", "__QUEUE_MODE__", "completed", y); !equalStrings(got, []string{"acked", "acked"}) {
		t.Fatalf("ack with group __QUEUE_MODE__: %v", got)
	}
	if d := b.depth(t, "qm", ""); !reflect.DeepEqual(d.Groups, []groupDepth{{"__QUEUE_MODE__", 0, 0}}) {
		t.Fatalf("groups %+v", d.Groups)
	}
	// A named group reads the same ring on its own cursor.
	if p := b.pop(t, popq{"queue": "qm", "group": "g", "batch": "10"}); !equalStrings(p.payloads(), []string{"0", "1", "2", "3"}) {
		t.Fatalf("named group got %v", p.payloads())
	}
}

// TestParkedPopWakes: a parked pop wakes on a failed ack and on a lease
// released by an ack, not only on a push (D13).
func TestParkedPopWakes(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	t.Run("failed ack", func(t *testing.T) {
		b.push(t, "wake", "p", `"m"`)
		p := b.pop(t, popq{"queue": "wake", "group": "g"})
		ch := b.asyncPop(popq{"queue": "wake", "group": "g", "wait": "true", "timeout": "5000"})
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		if got := b.ackAll(t, "wake", "g", "failed", p); !equalStrings(got, []string{"redelivered"}) {
			t.Fatalf("ack %v", got)
		}
		r := waitPop(t, ch, 5*time.Second)
		if len(r.resp.Messages) != 1 || r.resp.Messages[0].ID != p.Messages[0].ID || r.resp.Messages[0].Attempts != 1 {
			t.Fatalf("woken pop got %+v", r.resp.Messages)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("woken %v after the failed ack", d)
		}
	})
	t.Run("lease released", func(t *testing.T) {
		b.push(t, "wake2", "p", "1", "2")
		p := b.pop(t, popq{"queue": "wake2", "group": "g"})
		ch := b.asyncPop(popq{"queue": "wake2", "group": "g", "wait": "true", "timeout": "5000"})
		time.Sleep(200 * time.Millisecond)
		start := time.Now()
		b.ackAll(t, "wake2", "g", "completed", p)
		r := waitPop(t, ch, 5*time.Second)
		if !equalStrings(r.resp.payloads(), []string{"2"}) || time.Since(start) > 2*time.Second {
			t.Fatalf("woken pop got %v after %v", r.resp.payloads(), time.Since(start))
		}
	})
}

// parkRaw sends a pop on its own connection behind a GET /health, reads
// the health answer (so the pop has reached the broker) and returns the
// connection, on which the pop's answer will arrive.
func (b *broker) parkRaw(t testing.TB, q popq) *rawConn {
	t.Helper()
	r := b.dial(t)
	r.send(httpReq("GET", "/health", "") + httpReq("GET", "/api/v1/ephemeral/pop?"+q.encode(), ""))
	r.read().want(t, 200, nil)
	time.Sleep(50 * time.Millisecond)
	return r
}

func (r *rawConn) readPop(t testing.TB) popResp {
	t.Helper()
	var p popResp
	r.read().want(t, 200, &p)
	if p.Messages == nil {
		t.Fatalf("pop answer without a messages array")
	}
	return p
}

// TestWindowBuffer: a parked pop woken by its first message waits up to
// windowBuffer.ms more, or until count messages (at most its batch), never
// past its own timeout (D12; docs/engine.md).
func TestWindowBuffer(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	// The windows are long where the rule is "before the window ends", so
	// that a loaded machine's slowness is not mistaken for waiting it out.
	b.configure(t, "win", `{"windowBuffer":{"ms":30000,"count":3}}`)
	b.configure(t, "win2", `{"windowBuffer":{"ms":500,"count":5}}`)
	b.configure(t, "win3", `{"windowBuffer":{"ms":30000,"count":5}}`)
	if r := b.row(t, "win"); r.Options.WindowBuffer == nil || *r.Options.WindowBuffer != (window{30000, 3}) {
		t.Fatalf("windowBuffer in force %+v", r.Options.WindowBuffer)
	}

	t.Run("count reached", func(t *testing.T) {
		t.Parallel()
		// Answered when the count is reached: before the 30 s window (and
		// the 60 s pop timeout) would have answered it.
		r := b.parkRaw(t, popq{"queue": "win", "batch": "10", "wait": "true", "timeout": "60000", "autoAck": "true"})
		start := time.Now()
		b.push(t, "win", "p", "1")
		b.push(t, "win", "p", "2")
		b.push(t, "win", "p", "3")
		p := r.readPop(t)
		if !equalStrings(p.payloads(), []string{"1", "2", "3"}) || time.Since(start) >= 30*time.Second {
			t.Fatalf("got %v after %v: want 1 2 3 as soon as the third arrived, not at the 30 s window", p.payloads(), time.Since(start))
		}
		// count is at most the pop's batch.
		r = b.parkRaw(t, popq{"queue": "win", "batch": "2", "wait": "true", "timeout": "60000", "autoAck": "true"})
		start = time.Now()
		b.push(t, "win", "p", "4")
		b.push(t, "win", "p", "5")
		p = r.readPop(t)
		if !equalStrings(p.payloads(), []string{"4", "5"}) || time.Since(start) >= 30*time.Second {
			t.Fatalf("got %v after %v: want 4 5 once the batch is full, not at the 30 s window", p.payloads(), time.Since(start))
		}
	})
	t.Run("window ms", func(t *testing.T) {
		t.Parallel()
		// Answered at the 500 ms window's end: not before it, and before
		// the pop's 30 s timeout would have answered it.
		r := b.parkRaw(t, popq{"queue": "win2", "batch": "10", "wait": "true", "timeout": "30000"})
		start := time.Now()
		b.push(t, "win2", "p", "1")
		p := r.readPop(t)
		took := time.Since(start)
		if !equalStrings(p.payloads(), []string{"1"}) || took < 450*time.Millisecond || took >= 30*time.Second {
			t.Fatalf("got %v after %v: want 1 after the 500 ms window, not at the pop's 30 s timeout", p.payloads(), took)
		}
	})
	t.Run("bounded by the pop timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := b.parkRaw(t, popq{"queue": "win3", "batch": "10", "wait": "true", "timeout": "1000"})
		b.push(t, "win3", "p", "1")
		p := r.readPop(t)
		took := time.Since(start)
		// The pop's 1 s timeout, not the 30 s window.
		if !equalStrings(p.payloads(), []string{"1"}) || took < 800*time.Millisecond || took >= 30*time.Second {
			t.Fatalf("got %v after %v: want 1 at the pop's 1 s timeout, not the 30 s window", p.payloads(), took)
		}
	})
	t.Run("no window", func(t *testing.T) {
		t.Parallel()
		r := b.parkRaw(t, popq{"queue": "nowin", "batch": "10", "wait": "true", "timeout": "10000"})
		b.push(t, "nowin", "p", "1")
		b.push(t, "nowin", "p", "2")
		if p := r.readPop(t); !equalStrings(p.payloads(), []string{"1"}) {
			t.Fatalf("without a window the first message answers the pop: got %v", p.payloads())
		}
	})
}

// TestImplicitCollection: an implicit queue with nothing pending, no pop,
// no push and no parked pop is collected after
// QUEEN_EPHEMERAL_IMPLICIT_IDLE_S; one holding a pending message, one with
// a parked pop, and a declared one are not (docs/contract.md, Tiers; D8).
func TestImplicitCollection(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S": "1"})
	b.push(t, "idle-empty", "", "1")
	if p := b.pop(t, popq{"queue": "idle-empty", "autoAck": "true"}); len(p.Messages) != 1 {
		t.Fatalf("pop %+v", p)
	}
	b.push(t, "idle-full", "", "1")
	b.configure(t, "idle-declared", "")
	waiting := b.asyncPop(popq{"queue": "idle-waiting", "wait": "true", "timeout": "9000"})
	time.Sleep(100 * time.Millisecond)

	brokertest.Eventually(t, 8*time.Second, "idle-empty is collected", func() bool {
		_, ok := b.queues(t).find("idle-empty")
		return !ok
	})
	b.do(t, "GET", depthPath("idle-empty", ""), nil).wantErr(t, 404, "ephemeral_queue_not_found")
	time.Sleep(1500 * time.Millisecond) // over a second idle for the others too
	l := b.queues(t)
	if !equalStrings(l.names(), []string{"idle-declared", "idle-full", "idle-waiting"}) {
		t.Fatalf("listing %v: want idle-declared, idle-full, idle-waiting", l.names())
	}
	if r, _ := l.find("idle-full"); r.Tier != "implicit" || r.Depth != 1 {
		t.Fatalf("idle-full %+v", r)
	}
	// The parked pop times out; then nothing holds idle-waiting.
	if r := waitPop(t, waiting, 15*time.Second); len(r.resp.Messages) != 0 {
		t.Fatalf("parked pop %+v", r.resp)
	}
	brokertest.Eventually(t, 8*time.Second, "idle-waiting is collected once its pop left", func() bool {
		_, ok := b.queues(t).find("idle-waiting")
		return !ok
	})
	// The next push or pop that names it makes a new, empty queue.
	if p := b.pop(t, popq{"queue": "idle-empty"}); len(p.Messages) != 0 {
		t.Fatalf("a collected queue came back with %v", p.payloads())
	}
	if r := b.row(t, "idle-empty"); r.Tier != "implicit" || r.Depth != 0 || r.Bytes != 0 {
		t.Fatalf("re-created queue %+v", r)
	}
	if !equalStrings(b.queues(t).names(), []string{"idle-declared", "idle-empty", "idle-full"}) {
		t.Fatalf("listing %v", b.queues(t).names())
	}
}

// TestGroupIdle: a group that neither popped nor acked for
// QUEEN_EPHEMERAL_GROUP_IDLE_S is forgotten; a later pop with its name is a
// new group, starting at the oldest message held (D4).
func TestGroupIdle(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_GROUP_IDLE_S": "1"})
	b.push(t, "gi", "p", "1", "2")
	if p := b.pop(t, popq{"queue": "gi", "group": "g", "batch": "10", "autoAck": "true"}); len(p.Messages) != 2 {
		t.Fatalf("pop %+v", p)
	}
	if d := b.depth(t, "gi", ""); !reflect.DeepEqual(d.Groups, []groupDepth{{"g", 0, 0}}) {
		t.Fatalf("groups %+v", d.Groups)
	}
	brokertest.Eventually(t, 8*time.Second, "g is forgotten", func() bool {
		return len(b.depth(t, "gi", "").Groups) == 0
	})
	p := b.pop(t, popq{"queue": "gi", "group": "g", "batch": "10"})
	if !equalStrings(p.payloads(), []string{"1", "2"}) || p.Messages[0].Attempts != 0 {
		t.Fatalf("the new g got %+v: want 1 2 from the oldest held", p.Messages)
	}
}

// TestPopDefaults: batch 1, every partition, the broker's pop timeout
// (QUEEN_EPHEMERAL_POP_TIMEOUT_MS), wait false (docs/routes.md, pop; D11).
func TestPopDefaults(t *testing.T) {
	t.Parallel()
	// The broker's timeout is 5 s, so that "at once" (below) is told from
	// it with a loaded machine's margin (a pop answers in about a
	// millisecond); the upper bounds are the times the rules name, never a
	// guess at how fast the broker is.
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_POP_TIMEOUT_MS": "5000"})

	start := time.Now()
	if p := b.pop(t, popq{"queue": "empty", "wait": "true"}); len(p.Messages) != 0 {
		t.Fatalf("pop %+v", p)
	}
	if took := time.Since(start); took < 4900*time.Millisecond || took >= 30*time.Second {
		t.Fatalf("a waiting pop without timeout answered after %v; want the broker's 5 s, not the default 30 s", took)
	}
	for _, q := range []popq{{"queue": "empty"}, {"queue": "empty", "wait": "false"}, {"queue": "empty", "wait": "1", "timeout": "0"}} {
		start = time.Now()
		b.pop(t, q)
		if took := time.Since(start); took >= 5*time.Second {
			t.Fatalf("pop %v took %v; want an answer at once, not the 5 s timeout", q, took)
		}
	}
	start = time.Now()
	b.pop(t, popq{"queue": "empty", "wait": "true", "timeout": "300"})
	if took := time.Since(start); took < 280*time.Millisecond || took >= 5*time.Second {
		t.Fatalf("pop with timeout 300 took %v; want 300 ms, not the broker's 5 s", took)
	}

	// Unknown parameters are ignored (D11).
	if p := b.pop(t, popq{"queue": "empty", "subscriptionMode": "new", "x": "y"}); len(p.Messages) != 0 {
		t.Fatalf("pop %+v", p)
	}

	b.push(t, "d", "", "0", "1", "2")
	b.push(t, "d", "x", `"x0"`, `"x1"`)
	if p := b.pop(t, popq{"queue": "d", "group": "g1"}); len(p.Messages) != 1 {
		t.Fatalf("default batch: got %d messages, want 1", len(p.Messages))
	}
	// Without partition: every partition, FIFO within each.
	p := b.pop(t, popq{"queue": "d", "group": "g2", "batch": "10"})
	per := map[string][]string{}
	for _, m := range p.Messages {
		per[m.Partition] = append(per[m.Partition], string(m.Payload))
	}
	want := map[string][]string{"Default": {"0", "1", "2"}, "x": {`"x0"`, `"x1"`}}
	if !reflect.DeepEqual(per, want) {
		t.Fatalf("pop without partition: %v, want %v", per, want)
	}
}

// TestAutoAck: an autoAck pop advances the cursor at delivery and keeps no
// lease, so its ids ack as unknown and nothing redelivers; it still skips a
// partition whose lease for the group is live (docs/routes.md, pop; D1).
func TestAutoAck(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "auto", `{"leaseSeconds":1}`)
	b.push(t, "auto", "p", "0", "1", "2")
	held := b.pop(t, popq{"queue": "auto", "group": "g"}) // a lease on p
	if p := b.pop(t, popq{"queue": "auto", "group": "g", "autoAck": "true", "batch": "10"}); len(p.Messages) != 0 {
		t.Fatalf("autoAck pop took %v from a partition leased to its group", p.payloads())
	}
	b.ackAll(t, "auto", "g", "completed", held)
	p := b.pop(t, popq{"queue": "auto", "group": "g", "autoAck": "true", "batch": "10"})
	if !equalStrings(p.payloads(), []string{"1", "2"}) {
		t.Fatalf("autoAck pop %v, want 1 2", p.payloads())
	}
	if got := b.ackAll(t, "auto", "g", "completed", p); !equalStrings(got, []string{"unknown", "unknown"}) {
		t.Fatalf("acks of autoAck deliveries: %v, want unknown (no lease)", got)
	}
	// Past the 1 s lease an explicit pop would have redelivered; autoAck
	// kept none.
	time.Sleep(1200 * time.Millisecond)
	if p := b.pop(t, popq{"queue": "auto", "group": "g", "batch": "10"}); len(p.Messages) != 0 {
		t.Fatalf("autoAck deliveries came back: %+v", p.Messages)
	}
	if d := b.depth(t, "auto", "g"); d.Pending != 0 {
		t.Fatalf("pending %d for g", d.Pending)
	}
}

// TestIDsNeverReused: an id is never reused within an incarnation, not
// after reset, not after the queue is deleted and created again (D6).
func TestIDsNeverReused(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	seen := map[string]bool{}
	take := func() {
		t.Helper()
		b.push(t, "ids", "p", "1", "2")
		p := b.pop(t, popq{"queue": "ids", "group": "g", "batch": "10"})
		if len(p.Messages) != 2 {
			t.Fatalf("pop %+v", p)
		}
		for _, id := range p.ids() {
			if seen[id] {
				t.Fatalf("id %s minted twice", id)
			}
			seen[id] = true
		}
	}
	take()
	b.reset(t, "ids")
	take()
	b.delete(t, "ids")
	take()
	b.configure(t, "ids", "")
	b.reset(t, "ids")
	take()
	b.delete(t, "ids")
	b.configure(t, "ids", "")
	take()
}
