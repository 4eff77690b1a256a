package conformance

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestBadRequest: every shape refusal is 400 ephemeral_bad_request (docs/routes.md,
// Refusals; D2, D9, D10, D11), on every route that takes input.
func TestBadRequest(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	long := strings.Repeat("a", 513)
	items := func(n int, item string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = item
		}
		return strings.Join(parts, ",")
	}
	pop := func(q string) string { return "/api/v1/ephemeral/pop?" + q }
	const (
		push  = "/api/v1/ephemeral/push"
		ack   = "/api/v1/ephemeral/ack"
		conf  = "/api/v1/ephemeral/configure"
		reset = "/api/v1/ephemeral/reset"
	)
	cases := []struct {
		name, method, path, body string
	}{
		// push
		{"push/not json", "POST", push, `{"queue":`},
		{"push/empty body", "POST", push, ``},
		{"push/not an object", "POST", push, `[1]`},
		{"push/no queue", "POST", push, `{"messages":[{"payload":1}]}`},
		{"push/queue not a string", "POST", push, `{"queue":7,"messages":[]}`},
		{"push/empty queue", "POST", push, `{"queue":"","messages":[]}`},
		{"push/queue of 513 bytes", "POST", push, `{"queue":"` + long + `","messages":[]}`},
		{"push/queue with a C0 control", "POST", push, `{"queue":"a\u0001b","messages":[]}`},
		{"push/queue with a tab", "POST", push, `{"queue":"a\tb","messages":[]}`},
		{"push/queue with DEL", "POST", push, "{\"queue\":\"a\x7fb\",\"messages\":[]}"},
		{"push/queue with a C1 control", "POST", push, `{"queue":"a\u0085b","messages":[]}`},
		{"push/partition of 513 bytes", "POST", push, `{"queue":"q","partition":"` + long + `","messages":[]}`},
		{"push/partition with a control", "POST", push, `{"queue":"q","partition":"p\u0000","messages":[]}`},
		{"push/no messages", "POST", push, `{"queue":"q"}`},
		{"push/messages not an array", "POST", push, `{"queue":"q","messages":{"payload":1}}`},
		{"push/message not an object", "POST", push, `{"queue":"q","messages":[1]}`},
		{"push/message without payload", "POST", push, `{"queue":"q","messages":[{}]}`},
		{"push/message with another key", "POST", push, `{"queue":"q","messages":[{"payload":1,"transactionId":"x"}]}`},
		{"push/unknown top key", "POST", push, `{"queue":"q","messages":[],"tenant":"t"}`},
		{"push/10001 messages", "POST", push, `{"queue":"q","messages":[` + items(10001, `{"payload":1}`) + `]}`},
		// pop (query parameters)
		{"pop/no queue", "GET", pop("batch=1"), ""},
		{"pop/empty queue", "GET", pop("queue="), ""},
		{"pop/queue of 513 bytes", "GET", pop("queue=" + long), ""},
		{"pop/queue with a control", "GET", pop("queue=a%01b"), ""},
		{"pop/partition with DEL", "GET", pop("queue=q&partition=%7F"), ""},
		{"pop/group with a C1 control", "GET", pop("queue=q&group=%C2%85"), ""},
		{"pop/group of 513 bytes", "GET", pop("queue=q&group=" + long), ""},
		{"pop/batch 0", "GET", pop("queue=q&batch=0"), ""},
		{"pop/batch negative", "GET", pop("queue=q&batch=-1"), ""},
		{"pop/batch not an integer", "GET", pop("queue=q&batch=1.5"), ""},
		{"pop/batch a word", "GET", pop("queue=q&batch=ten"), ""},
		{"pop/timeout negative", "GET", pop("queue=q&timeout=-5"), ""},
		{"pop/timeout not an integer", "GET", pop("queue=q&timeout=1.5"), ""},
		{"pop/wait yes", "GET", pop("queue=q&wait=yes"), ""},
		{"pop/autoAck 2", "GET", pop("queue=q&autoAck=2"), ""},
		// ack
		{"ack/not json", "POST", ack, `nope`},
		{"ack/no queue", "POST", ack, `{"acks":[]}`},
		{"ack/queue of 513 bytes", "POST", ack, `{"queue":"` + long + `","acks":[]}`},
		{"ack/group with a control", "POST", ack, `{"queue":"q","group":"g\u001f","acks":[]}`},
		{"ack/group of 513 bytes", "POST", ack, `{"queue":"q","group":"` + long + `","acks":[]}`},
		{"ack/no acks", "POST", ack, `{"queue":"q"}`},
		{"ack/acks not an array", "POST", ack, `{"queue":"q","acks":"e:1:p:0"}`},
		{"ack/element without id", "POST", ack, `{"queue":"q","acks":[{"status":"completed"}]}`},
		{"ack/id not a string", "POST", ack, `{"queue":"q","acks":[{"id":41}]}`},
		{"ack/status outside the list", "POST", ack, `{"queue":"q","acks":[{"id":"x","status":"done"}]}`},
		{"ack/unknown element key", "POST", ack, `{"queue":"q","acks":[{"id":"x","partition":"p"}]}`},
		{"ack/10001 acks", "POST", ack, `{"queue":"q","acks":[` + items(10001, `{"id":"x"}`) + `]}`},
		// configure
		{"configure/no queue", "POST", conf, `{"options":{}}`},
		{"configure/queue of 513 bytes", "POST", conf, `{"queue":"` + long + `"}`},
		{"configure/queue with a control", "POST", conf, `{"queue":"q\n"}`},
		{"configure/unknown top key", "POST", conf, `{"queue":"q","option":{}}`},
		{"configure/options not an object", "POST", conf, `{"queue":"q","options":[]}`},
		{"configure/ttlSeconds 1.5", "POST", conf, `{"queue":"q","options":{"ttlSeconds":1.5}}`},
		{"configure/maxBytes 0.5", "POST", conf, `{"queue":"q","options":{"maxBytes":0.5}}`},
		{"configure/negative leaseSeconds", "POST", conf, `{"queue":"q","options":{"leaseSeconds":-1}}`},
		{"configure/maxLength a string", "POST", conf, `{"queue":"q","options":{"maxLength":"10"}}`},
		{"configure/maxLength 0", "POST", conf, `{"queue":"q","options":{"maxLength":0}}`},
		{"configure/maxBytes 0", "POST", conf, `{"queue":"q","options":{"maxBytes":0}}`},
		{"configure/leaseSeconds 0", "POST", conf, `{"queue":"q","options":{"leaseSeconds":0}}`},
		{"configure/retryLimit 0", "POST", conf, `{"queue":"q","options":{"retryLimit":0}}`},
		{"configure/policy outside the list", "POST", conf, `{"queue":"q","options":{"policy":"dropNewest"}}`},
		{"configure/windowBuffer unknown key", "POST", conf, `{"queue":"q","options":{"windowBuffer":{"ms":1,"count":1,"size":1}}}`},
		{"configure/windowBuffer.ms 1.5", "POST", conf, `{"queue":"q","options":{"windowBuffer":{"ms":1.5,"count":1}}}`},
		{"configure/windowBuffer not an object", "POST", conf, `{"queue":"q","options":{"windowBuffer":20}}`},
		// reset
		{"reset/no queue", "POST", reset, `{}`},
		{"reset/empty queue", "POST", reset, `{"queue":""}`},
		{"reset/queue with a control", "POST", reset, `{"queue":"\u0002"}`},
		{"reset/queue of 513 bytes", "POST", reset, `{"queue":"` + long + `"}`},
		{"reset/unknown key", "POST", reset, `{"queue":"q","group":"g"}`},
		// delete and the depth read (the :queue segment, D10)
		{"delete/empty queue", "DELETE", "/api/v1/ephemeral/queue/", ""},
		{"delete/queue of 513 bytes", "DELETE", "/api/v1/ephemeral/queue/" + long, ""},
		{"depth/empty queue", "GET", "/api/v1/ephemeral/queues//depth", ""},
		{"depth/empty queue with a group", "GET", "/api/v1/ephemeral/queues//depth?group=g", ""},
		{"delete/queue with a control", "DELETE", "/api/v1/ephemeral/queue/a%01", ""},
		{"depth/queue of 513 bytes", "GET", "/api/v1/ephemeral/queues/" + long + "/depth", ""},
		{"depth/queue with a control", "GET", "/api/v1/ephemeral/queues/a%7F/depth", ""},
		{"depth/group with a control", "GET", "/api/v1/ephemeral/queues/q/depth?group=%01", ""},
		{"depth/group of 513 bytes", "GET", "/api/v1/ephemeral/queues/q/depth?group=" + long, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.method == "POST" {
				body = c.body
			}
			b.do(t, c.method, c.path, body).wantErr(t, 400, "ephemeral_bad_request")
		})
	}
	// None of those created a queue or appended anything (the depth reads
	// above would have 404'd for q anyway; the listing says it all).
	if l := b.queues(t); l.Count != 0 || l.CellBytes != 0 {
		t.Fatalf("refused requests left queues behind: %v (cellBytes %d)", l.names(), l.CellBytes)
	}

	t.Run("limits are inclusive", func(t *testing.T) {
		name := strings.Repeat("n", 512) // exactly 512 bytes
		b.push(t, name, strings.Repeat("p", 512), "1")
		p := b.pop(t, popq{"queue": name, "group": strings.Repeat("g", 512)})
		if len(p.Messages) != 1 || p.Messages[0].Partition != strings.Repeat("p", 512) {
			t.Fatalf("pop with 512-byte names: %+v", p)
		}
		b.depth(t, name, strings.Repeat("g", 512))
		b.configure(t, name, `{"maxLength":10000}`)
		b.delete(t, name)
		// 10,000 messages in one push and 10,000 acks in one call.
		b.push(t, "tenk", "", strings.Split(strings.Repeat("1,", 9999)+"1", ",")...)
		acks := make([]ackItem, 10000)
		for i := range acks {
			acks[i] = ackItem{ID: "x"}
		}
		b.ack(t, "tenk", "", acks...)
		b.delete(t, "tenk")
		// batch and timeout past their ceilings clamp rather than refuse.
		b.pop(t, popq{"queue": "clamp", "batch": "99999", "timeout": "9999999", "wait": "false"})
	})

	t.Run("a refused ack settles nothing", func(t *testing.T) {
		b.push(t, "refused-ack", "", "1")
		p := b.pop(t, popq{"queue": "refused-ack", "group": "g"})
		body := fmt.Sprintf(`{"queue":"refused-ack","group":"g","acks":[{"id":%q},{"id":%q,"status":"bogus"}]}`, p.Messages[0].ID, p.Messages[0].ID)
		b.do(t, "POST", "/api/v1/ephemeral/ack", body).wantErr(t, 400, "ephemeral_bad_request")
		if got := b.ackAll(t, "refused-ack", "g", "", p); !equalStrings(got, []string{"acked"}) {
			t.Fatalf("ack after a refused call: %v, want acked", got)
		}
	})
}

// TestUnknownOptionNamesKeys: an unknown option is a 400 naming the keys
// that exist (docs/routes.md, configure: "an ignored ttlSecond").
func TestUnknownOptionNamesKeys(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	e := b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"q","options":{"ttlSecond":30}}`).wantErr(t, 400, "ephemeral_bad_request")
	for _, k := range []string{"ttlSecond", "maxBytes", "maxLength", "policy", "ttlSeconds", "leaseSeconds", "retryLimit", "windowBuffer"} {
		if !strings.Contains(e.Error, k) {
			t.Errorf("the refusal %q does not name %q", e.Error, k)
		}
	}
	// Nothing was declared.
	if l := b.queues(t); l.Count != 0 {
		t.Fatalf("a refused configure declared %v", l.names())
	}
}

// TestQueueFull: a push that would pass maxLength or maxBytes under
// `reject` is 429 queue_full and appends nothing; filling a bound exactly
// is admitted; reclaimable messages make room first (docs/contract.md, Bounds; D3, D7).
// A message larger than maxBytes could never fit: under either policy it is
// a 400 naming the bound (D5; docs/engine.md, "A push that can never fit").
func TestQueueFull(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	b.configure(t, "len", `{"maxLength":2}`)
	b.push(t, "len", "", "1", "2") // exactly at the bound: admitted
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("len", "", "3")).wantErr(t, 429, "queue_full")
	// The bound is the queue's, across partitions (docs/engine.md).
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("len", "other", "3")).wantErr(t, 429, "queue_full")
	if r := b.row(t, "len"); r.Depth != 2 || r.Drops != (drops{}) {
		t.Fatalf("after refusals: %+v", r)
	}

	// A push of 3 into a queue bounded at 2 passes the bound as a whole:
	// 429 (a client splits it), and nothing appended.
	b.configure(t, "all", `{"maxLength":2,"policy":"reject"}`)
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("all", "", "1", "2", "3")).wantErr(t, 429, "queue_full")
	if d := b.depth(t, "all", ""); d.Pending != 0 || d.Bytes != 0 {
		t.Fatalf("a refused push appended: %+v", d)
	}
	// All or nothing: a batch of 2 fits the empty queue but not one
	// holding 1, so it is a 429 and appends neither message.
	b.push(t, "all", "", "1")
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("all", "", "2", "3")).wantErr(t, 429, "queue_full")
	if d := b.depth(t, "all", ""); d.Pending != 1 || d.Bytes != 1 {
		t.Fatalf("a refused push appended: %+v; want pending 1, bytes 1", d)
	}

	// maxBytes counts payload bytes as sent: 4+4 = 8 of 10, a third 4 is
	// refused, a 2-byte payload fills it exactly.
	b.configure(t, "bytes", `{"maxBytes":10}`)
	b.push(t, "bytes", "", `"ab"`, `"cd"`)
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("bytes", "", `"ef"`)).wantErr(t, 429, "queue_full")
	b.push(t, "bytes", "", `""`)
	if r := b.row(t, "bytes"); r.Bytes != 10 || r.Depth != 3 {
		t.Fatalf("bytes row %+v: want bytes 10, depth 3", r)
	}
	// A message of 11 bytes never fits maxBytes 10 under either policy:
	// 400, naming the bound.
	for _, c := range []struct {
		queue, options string
		payloads       []string
		want           string
	}{
		{"bytes", "", []string{str(11)}, "a message of 11 bytes can never fit queue bytes's maxBytes 10"},
		{"drop", `{"maxBytes":10,"policy":"dropOldest"}`, []string{str(11)}, "a message of 11 bytes can never fit queue drop's maxBytes 10"},
	} {
		if c.options != "" {
			b.configure(t, c.queue, c.options)
		}
		e := b.do(t, "POST", "/api/v1/ephemeral/push", pushBody(c.queue, "", c.payloads...)).wantErr(t, 400, "ephemeral_bad_request")
		if e.Error != c.want {
			t.Fatalf("refusal %q, want %q", e.Error, c.want)
		}
	}
	if r := b.row(t, "bytes"); r.Bytes != 10 || r.Depth != 3 {
		t.Fatalf("bytes row %+v after refusals: want bytes 10, depth 3", r)
	}
	if r := b.row(t, "drop"); r.Bytes != 0 || r.Depth != 0 || r.Drops != (drops{}) {
		t.Fatalf("drop row %+v after a refusal: want empty, no drops", r)
	}

	// Lowering a bound does not drop what is held; it applies to the next
	// push (docs/engine.md). An empty push passes no bound.
	b.configure(t, "lower", `{"maxLength":5}`)
	b.pushN(t, "lower", "", 0, 5)
	b.configure(t, "lower", `{"maxLength":2}`)
	if r := b.row(t, "lower"); r.Depth != 5 || r.Drops != (drops{}) || r.Options.MaxLength != 2 {
		t.Fatalf("after lowering maxLength: %+v; want depth 5, no drop, maxLength 2", r)
	}
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("lower", "", "5")).wantErr(t, 429, "queue_full")
	b.push(t, "lower", "")

	// Consumed (reclaimable) messages are freed before the bound refuses.
	p := b.pop(t, popq{"queue": "len", "batch": "10", "autoAck": "true"})
	if len(p.Messages) != 2 {
		t.Fatalf("pop: %+v", p)
	}
	b.push(t, "len", "", "3", "4")
	if r := b.row(t, "len"); r.Depth != 2 || r.Drops != (drops{}) {
		t.Fatalf("after reclaiming: %+v; want depth 2 and no drops", r)
	}
	p = b.pop(t, popq{"queue": "len", "batch": "10", "autoAck": "true"})
	if !equalStrings(p.payloads(), []string{"3", "4"}) {
		t.Fatalf("popped %v, want 3, 4", p.payloads())
	}
}

// TestBrokerBudget: past QUEEN_EPHEMERAL_MAX_BYTES a push is 503
// ephemeral_unavailable and appends nothing, unless reclaimable messages
// can make the room (D3, D7); filling the total exactly is admitted. The
// total counts payload bytes plus the charges of what the broker keeps
// (D5; charges_test.go), so the budget is set from them: qa with one
// 60-byte message, the queue-mode group that leases it (its cursor and a
// window of one), and a new queue qb with room for 40 payload bytes.
func TestBrokerBudget(t *testing.T) {
	t.Parallel()
	const room = 40
	qa := queueCharge("qa") + partitionCharge("Default") + ringCharge(1) + 60
	consumer := groupCharge("") + chargeCursor + windowCharge(1)
	qb := queueCharge("qb") + partitionCharge("Default") + ringCharge(1) // before its payload
	budget := qa + consumer + qb + room
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": strconv.FormatInt(budget, 10)})

	b.push(t, "qa", "", str(60))
	// The queue's default maxBytes is clamped to the ceiling, which is the
	// broker total by default (D9).
	if r := b.row(t, "qa"); r.Options.MaxBytes != budget {
		t.Fatalf("qa maxBytes in force %d, want %d (the ceiling)", r.Options.MaxBytes, budget)
	}
	// Lease qa's message: it is held, not reclaimable, until acked.
	leased := b.pop(t, popq{"queue": "qa"})
	if len(leased.Messages) != 1 {
		t.Fatalf("pop qa: %+v", leased)
	}
	b.wantCellBytes(t, qa+consumer, "with qa's message leased")

	// qb's own bound (the budget) admits room+1 bytes; the broker's total
	// does not, by one byte.
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("qb", "", str(room+1))).wantErr(t, 503, "ephemeral_unavailable")
	l := b.wantCellBytes(t, qa+consumer, "after a refused push")
	if r, ok := l.find("qb"); ok {
		t.Fatalf("the refused push left queue qb: %+v", r)
	}
	// Filling the total exactly is admitted; then even a new queue with a
	// 1-byte message passes it.
	b.push(t, "qb", "", str(room))
	b.wantCellBytes(t, budget, "at the total")
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("qc", "", "1")).wantErr(t, 503, "ephemeral_unavailable")
	b.wantCellBytes(t, budget, "after a refused push")

	// Ack qa's message: its 60 bytes become reclaimable, and the broker
	// frees them rather than refuse (D3): 60 bytes more into qb (whose ring
	// has a free slot) fill the total exactly again.
	if got := b.ackAll(t, "qa", "", "", leased); !equalStrings(got, []string{"acked"}) {
		t.Fatalf("ack qa: %v, want acked", got)
	}
	b.push(t, "qb", "", str(60))
	l = b.wantCellBytes(t, budget, "after qa's consumed message was freed")
	if r, _ := l.find("qa"); r.Bytes != 0 || r.Drops != (drops{}) {
		t.Fatalf("qa %+v: want bytes 0 and no drop (a reclaimable message is not a drop)", r)
	}
	if r, _ := l.find("qb"); r.Bytes != room+60 || r.Depth != 2 {
		t.Fatalf("qb %+v: want bytes %d, depth 2", r, room+60)
	}
}

// TestQueryDecoding: pop's query parameters are percent-decoded (the wire,
// wire/decisions.md), and an empty partition or group means absent (D10).
func TestQueryDecoding(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	name, part := "a b&c=d/é", "room 7+"
	b.push(t, name, part, "1")
	q := "queue=" + url.QueryEscape(name) + "&partition=" + url.QueryEscape(part) + "&group="
	var p popResp
	b.do(t, "GET", "/api/v1/ephemeral/pop?"+q, nil).want(t, 200, &p)
	if p.Queue != name || len(p.Messages) != 1 || p.Messages[0].Partition != part {
		t.Fatalf("pop %+v: want queue %q, one message of partition %q", p, name, part)
	}
	// group= (empty) was queue mode, and an empty group in an ack body is
	// queue mode too.
	if d := b.depth(t, name, ""); len(d.Groups) != 1 || d.Groups[0].Group != "__QUEUE_MODE__" {
		t.Fatalf("groups %+v: want queue mode only", d.Groups)
	}
	var out ackResp
	b.do(t, "POST", "/api/v1/ephemeral/ack", `{"queue":`+string(mustJSON(name))+`,"group":"","acks":[{"id":`+string(mustJSON(p.Messages[0].ID))+`}]}`).want(t, 200, &out)
	if !equalStrings(out.outcomes(), []string{"acked"}) {
		t.Fatalf("ack with an empty group: %v, want acked (queue mode)", out.outcomes())
	}
	// An empty partition in a push body means Default; an empty group in
	// the depth query means no group.
	b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"e","partition":"","messages":[{"payload":1}]}`).want(t, 201, nil)
	var d depthResp
	b.do(t, "GET", "/api/v1/ephemeral/queues/e/depth?group=", nil).want(t, 200, &d)
	if d.Group != nil || len(d.Partitions) != 1 || d.Partitions[0].Partition != "Default" {
		t.Fatalf("depth %+v: want group null and the one partition Default", d)
	}
}

func mustJSON(v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return j
}

// TestTenantAllowance: the tenant's byte and queue allowances (here the
// defaults for a tenant without a grant, QUEEN_EPHEMERAL_TENANT_MAX_BYTES
// and QUEEN_EPHEMERAL_TENANT_MAX_QUEUES) refuse with 403
// ephemeral_quota_exceeded the push, or the queue creation by push, pop or
// configure, that would pass them; reclaimable bytes make room first
// (docs/routes.md, Refusals; D3, D7, D14).
func TestTenantAllowance(t *testing.T) {
	t.Parallel()
	t.Run("bytes", func(t *testing.T) {
		t.Parallel()
		// The allowance counts payload bytes plus the charges (D5;
		// charges_test.go), so it is set from them: qa with one 60-byte
		// message and the queue-mode group that leases it (its cursor and a
		// window of one), small with one 1-byte message, and a new queue qb
		// with room for 40 payload bytes.
		const room = 40
		qa := queueCharge("qa") + partitionCharge("Default") + ringCharge(1) + 60
		consumer := groupCharge("") + chargeCursor + windowCharge(1)
		small := queueCharge("small") + partitionCharge("Default") + ringCharge(1) + 1
		qb := queueCharge("qb") + partitionCharge("Default") + ringCharge(1) // before its payload
		allowance := qa + consumer + small + qb + room
		b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_TENANT_MAX_BYTES": strconv.FormatInt(allowance, 10)})

		b.push(t, "qa", "", str(60))
		leased := b.pop(t, popq{"queue": "qa"}) // held, not reclaimable, until acked
		if len(leased.Messages) != 1 {
			t.Fatalf("pop qa: %+v", leased)
		}
		b.configure(t, "small", `{"maxLength":1}`)
		b.push(t, "small", "", "1")
		b.wantCellBytes(t, qa+consumer+small, "before qb")

		// One byte past the allowance is refused; filling it exactly is
		// admitted.
		b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("qb", "", str(room+1))).wantErr(t, 403, "ephemeral_quota_exceeded")
		l := b.wantCellBytes(t, qa+consumer+small, "after a refused push")
		if r, ok := l.find("qb"); ok {
			t.Fatalf("the refused push left queue qb: %+v", r)
		}
		b.push(t, "qb", "", str(room))
		b.wantCellBytes(t, allowance, "at the allowance")
		b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("qc", "", "1")).wantErr(t, 403, "ephemeral_quota_exceeded")
		// The queue's own bound is checked first (D7): small is full, and
		// the push would pass the allowance too.
		b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("small", "", str(60))).wantErr(t, 429, "queue_full")
		b.wantCellBytes(t, allowance, "after refused pushes")

		// Consumed bytes are freed rather than refused (D3): ack qa's
		// message, and 60 bytes more into qb (whose ring has a free slot)
		// fill the allowance exactly again.
		if got := b.ackAll(t, "qa", "", "", leased); !equalStrings(got, []string{"acked"}) {
			t.Fatalf("ack qa: %v, want acked", got)
		}
		b.push(t, "qb", "", str(60))
		l = b.wantCellBytes(t, allowance, "after qa's consumed message was freed")
		if r, _ := l.find("qa"); r.Bytes != 0 || r.Drops != (drops{}) {
			t.Fatalf("qa %+v: want bytes 0 and no drop", r)
		}
	})
	t.Run("queues", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES": "2"})
		b.push(t, "one", "", "1")
		b.configure(t, "two", "")
		b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("three", "", "1")).wantErr(t, 403, "ephemeral_quota_exceeded")
		b.do(t, "GET", "/api/v1/ephemeral/pop?queue=three", nil).wantErr(t, 403, "ephemeral_quota_exceeded")
		b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"three"}`).wantErr(t, 403, "ephemeral_quota_exceeded")
		if !equalStrings(b.queues(t).names(), []string{"one", "two"}) {
			t.Fatalf("listing %v", b.queues(t).names())
		}
		// Existing queues go on being served; a deleted one frees its slot.
		b.push(t, "one", "", "2")
		b.delete(t, "one")
		b.push(t, "three", "", "1")
		b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"four"}`).wantErr(t, 403, "ephemeral_quota_exceeded")
		if !equalStrings(b.queues(t).names(), []string{"three", "two"}) {
			t.Fatalf("listing %v", b.queues(t).names())
		}
	})
}

// TestRefusedConfigureDeclaresNothing, on each store: a configure refused
// with 403 ephemeral_quota_exceeded (the queue creation that would pass the
// allowance, D14) declares nothing, so after a restart the declared queue
// comes back and the refused one does not.
func TestRefusedConfigureDeclaresNothing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, st storeKind) {
		b := startBrokerOn(t, st, map[string]string{"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES": "1"})
		b.configure(t, "b-declared", "")
		b.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"a-refused"}`).wantErr(t, 403, "ephemeral_quota_exceeded")
		want := map[string]queueRow{"b-declared": {Queue: "b-declared", Tier: "declared", Options: defaultOptions}}
		checkListing(t, b, want)
		b.restart(t)
		checkListing(t, b, want)
	})
}

// TestResetVoidsLeases: reset drops the contents, voids every lease and
// rewinds every cursor; the declaration and the groups stay (docs/routes.md, reset).
func TestResetVoidsLeases(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "rv", `{"maxLength":10}`)
	b.push(t, "rv", "p", "1", "2")
	held := b.pop(t, popq{"queue": "rv", "group": "g"})
	if n := b.reset(t, "rv"); n != 2 {
		t.Fatalf("reset dropped %d, want 2", n)
	}
	if got := b.ackAll(t, "rv", "g", "completed", held); !equalStrings(got, []string{"unknown"}) {
		t.Fatalf("ack of a lease that reset voided: %v, want unknown", got)
	}
	b.push(t, "rv", "p", "3")
	if p := b.pop(t, popq{"queue": "rv", "group": "g", "batch": "10"}); !equalStrings(p.payloads(), []string{"3"}) || p.Messages[0].Attempts != 0 {
		t.Fatalf("after reset the group got %+v, want 3 (no lease left, nothing old)", p.Messages)
	}
	r := b.row(t, "rv")
	if r.Tier != "declared" || r.Groups != 1 || r.Options.MaxLength != 10 || r.Drops != (drops{}) {
		t.Fatalf("row after reset %+v: want declared, one group, maxLength 10, no drop counted", r)
	}
}

// TestCeilings: the values stored are what was sent (the 201 echo); the
// values in force, which the status reads publish, are clamped to the
// broker's ceilings, defaults included, and a ttlSeconds of 0 stays off
// (docs/routes.md, configure; D9).
func TestCeilings(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{
		"QUEEN_EPHEMERAL_CEILING_MAX_BYTES":   "1000",
		"QUEEN_EPHEMERAL_CEILING_MAX_LENGTH":  "100",
		"QUEEN_EPHEMERAL_CEILING_TTL_S":       "5",
		"QUEEN_EPHEMERAL_CEILING_LEASE_S":     "10",
		"QUEEN_EPHEMERAL_CEILING_RETRY_LIMIT": "3",
	})
	b.configure(t, "high", `{"maxBytes":5000,"maxLength":1000,"policy":"dropOldest","ttlSeconds":60,"leaseSeconds":60,"retryLimit":50,"windowBuffer":{"ms":999999,"count":99999}}`)
	want := options{MaxBytes: 1000, MaxLength: 100, Policy: "dropOldest", TTLSeconds: 5, LeaseSeconds: 10, RetryLimit: 3, WindowBuffer: &window{300000, 10000}}
	if r := b.row(t, "high"); !reflect.DeepEqual(r.Options, want) {
		t.Fatalf("in force %+v\nwant %+v", r.Options, want)
	}
	b.push(t, "implicit", "", "1")
	wantDef := options{MaxBytes: 1000, MaxLength: 100, Policy: "reject", TTLSeconds: 0, LeaseSeconds: 10, RetryLimit: 3}
	if r := b.row(t, "implicit"); !reflect.DeepEqual(r.Options, wantDef) {
		t.Fatalf("defaults in force %+v\nwant %+v", r.Options, wantDef)
	}
	// The clamped bound is the one enforced.
	b.configure(t, "capped", `{"maxLength":1000}`)
	b.pushN(t, "capped", "", 0, 100)
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("capped", "", "1")).wantErr(t, 429, "queue_full")
}
