package conformance

// Owner routing through the Go SDK (D19; docs/sdk-transport.md, "Owner
// routing"): given one member's URL, the SDK learns the cell from the view
// read and sends each queue's calls to its owner, so nothing is relayed;
// a member whose public URL the client cannot reach is served through the
// URL the client was given (relayed, as before); a single broker sees one
// view read and nothing else changes.

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

const relayedSeries = "queen_ephemeral_relayed_total"

// sdkClient is a Go SDK client of url, closed when the test ends.
func sdkClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	cl, err := client.New(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	return cl
}

// relayed reads how many requests m relayed to an owner.
func (m *member) relayed(t *testing.T) float64 {
	t.Helper()
	got, _ := m.scrape(t)
	return got[relayedSeries]
}

// awaitRouted waits until cl, given via's URL, sends queue q (owned by
// another member) to its owner: a push of q through cl leaves via's relay
// count where it was. The SDK learns the view at its first call, in the
// background; until then its calls are relayed, as before.
func awaitRouted(t *testing.T, cl *client.Client, via *member, q string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		before := via.relayed(t)
		if _, err := cl.Push(context.Background(), q, []any{"probe"}, client.PushOptions{}); err != nil {
			t.Fatalf("probe push: %v", err)
		}
		if via.relayed(t) == before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the SDK given %s still relays %s through it after 20 s", via.id, q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// routedCell is a cell of three, a client given a's URL and one given b's
// (the responder), each routing to owners already (awaitRouted).
type routedCell struct {
	a, b, cc      *member
	members       []*member
	all           []string
	cl, responder *client.Client
}

func newRoutedCell(t *testing.T) routedCell {
	t.Helper()
	c := newTestCell(t)
	r := routedCell{a: c.start(advertise(t), nil), b: c.start(advertise(t), nil), cc: c.start(advertise(t), nil)}
	r.members = []*member{r.a, r.b, r.cc}
	r.all = ids(r.members...)
	c.waitLive(r.all...)
	r.cl = sdkClient(t, r.a.url(""))
	awaitRouted(t, r.cl, r.a, queueOwnedBy(t, "probe", r.b.id, r.all...))
	r.responder = sdkClient(t, r.b.url(""))
	awaitRouted(t, r.responder, r.b, queueOwnedBy(t, "probe-b", r.cc.id, r.all...))
	return r
}

// echoServe runs Serve on svc through responder, answering each request
// with its payload, until the stop it returns is called (which waits for
// Serve to return).
func echoServe(t *testing.T, responder *client.Client, svc string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var served sync.WaitGroup
	served.Add(1)
	go func() {
		defer served.Done()
		_ = responder.Serve(ctx, svc, client.ServeOptions{Wait: time.Second, OnError: func(err error) { t.Errorf("Serve: %v", err) }},
			func(_ context.Context, m client.Message) (any, error) {
				env, err := client.ParseRequest(m)
				return env.Payload, err
			})
	}()
	return func() { cancel(); served.Wait() }
}

// Given one member's URL, pushes, pops (waiting and not), acks and depth
// reads of queues owned by each member, and Requests answered by Serve on
// a queue of a third member, are served by their owners: no member relays
// anything. Without owner routing two thirds of them are relayed through
// the member the client was given.
func TestSDKOwnerRouting(t *testing.T) {
	t.Parallel()
	r := newRoutedCell(t)
	a, cc, members, all, cl, responder := r.a, r.cc, r.members, r.all, r.cl, r.responder
	awaitRouted(t, cl, a, queueOwnedBy(t, "probe", cc.id, all...))

	relayedBefore := make([]float64, len(members))
	for i, m := range members {
		relayedBefore[i] = m.relayed(t)
	}
	ctx := context.Background()
	for i, m := range members {
		q := queueOwnedBy(t, "routed"+strconv.Itoa(i), m.id, all...)
		if _, err := cl.Push(ctx, q, []any{1, 2, 3}, client.PushOptions{}); err != nil {
			t.Fatalf("push to %s's queue: %v", m.id, err)
		}
		d, err := cl.Depth(ctx, q, client.DepthOptions{})
		if err != nil || d.Pending != 3 {
			t.Fatalf("depth of %s's queue: %+v %v, want 3 pending", m.id, d, err)
		}
		res, err := cl.Pop(ctx, q, client.PopOptions{Batch: 10})
		if err != nil || len(res.Messages) != 3 {
			t.Fatalf("pop of %s's queue: %+v %v, want 3 messages", m.id, res, err)
		}
		ack, err := cl.Ack(ctx, q, res.Messages, client.AckOptions{})
		if err != nil || len(ack.Results) != 3 {
			t.Fatalf("ack on %s's queue: %+v %v", m.id, ack, err)
		}
		for _, r := range ack.Results {
			if r.Outcome != client.OutcomeAcked {
				t.Fatalf("ack on %s's queue: %+v, want every id acked", m.id, ack.Results)
			}
		}
		empty, err := cl.Pop(ctx, q, client.PopOptions{Wait: true, Timeout: 50 * time.Millisecond})
		if err != nil || len(empty.Messages) != 0 {
			t.Fatalf("waiting pop of %s's empty queue: %+v %v", m.id, empty, err)
		}
	}

	// Request/reply: the responder given b's URL serves a queue of cc's;
	// the requester (given a's) mints inboxes cc owns too.
	svc := queueOwnedBy(t, "routed-svc", cc.id, all...)
	stop := echoServe(t, responder, svc)
	for i := range 20 {
		msg, err := cl.Request(ctx, svc, i, client.RequestOptions{Timeout: 10 * time.Second})
		if err != nil || string(msg.Payload) != strconv.Itoa(i) {
			stop()
			t.Fatalf("request %d: %+v %v", i, msg, err)
		}
	}
	stop()

	for i, m := range members {
		if got := m.relayed(t); got != relayedBefore[i] {
			t.Errorf("member %c (%s) relayed %v requests, want none (every call sent to its owner)", 'a'+i, m.id, got-relayedBefore[i])
		}
	}
}

// A member whose public URL the client cannot reach (published, but
// nothing listens there): its queues' calls fail to dial, and go through
// the URL the client was given, which relays them; every call succeeds.
func TestSDKOwnerUnreachableRelayed(t *testing.T) {
	t.Parallel()
	c := newSteadyTestCell(t)
	closed := "http://127.0.0.1:" + strconv.Itoa(brokertest.Port(t))
	a, b := c.start(advertise(t), nil), c.start(advertise(t), nil)
	cc := c.start(advertise(t), map[string]string{"QUEEN_CELL_PUBLIC_URL": closed})
	all := ids(a, b, cc)
	c.waitLive(all...)
	v := a.cellView(t, "")
	if !containsURL(v, cc.id, closed) {
		t.Fatalf("the view does not publish %s at %s: %s", cc.id, closed, v.members())
	}

	cl := sdkClient(t, a.url(""))
	awaitRouted(t, cl, a, queueOwnedBy(t, "probe", b.id, all...))

	ctx := context.Background()
	q := queueOwnedBy(t, "unreachable", cc.id, all...)
	before := a.relayed(t)
	if _, err := cl.Push(ctx, q, []any{"x", "y"}, client.PushOptions{}); err != nil {
		t.Fatalf("push to the unreachable member's queue: %v", err)
	}
	res, err := cl.Pop(ctx, q, client.PopOptions{Batch: 10, Wait: true, Timeout: time.Second})
	if err != nil || len(res.Messages) != 2 {
		t.Fatalf("pop: %+v %v, want 2 messages", res, err)
	}
	ack, err := cl.Ack(ctx, q, res.Messages, client.AckOptions{})
	if err != nil || len(ack.Results) != 2 || ack.Results[0].Outcome != client.OutcomeAcked || ack.Results[1].Outcome != client.OutcomeAcked {
		t.Fatalf("ack: %+v %v", ack, err)
	}
	if got := a.relayed(t) - before; got < 3 {
		t.Fatalf("a relayed %v requests of the unreachable member's queue, want at least 3 (push, pop, ack)", got)
	}
}

// containsURL reports whether view v lists member id at url.
func containsURL(v cellView, id, url string) bool {
	for _, m := range v.Members {
		if m.ID == id && m.URL == url {
			return true
		}
	}
	return false
}

// A single broker: the SDK reads the view once (generation 0: not a cell)
// and never again, whatever it does next; its calls are served as before.
func TestSDKSingleBrokerOneViewRead(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	cl := sdkClient(t, b.url(""))
	ctx := context.Background()
	const series = `queen_ephemeral_request_duration_seconds_count{route="cell"}`
	if _, err := cl.Push(ctx, "single", []any{1}, client.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := b.scrape(t)
		if got[series] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want 1", series, got[series])
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 20 {
		if _, err := cl.Push(ctx, "single", []any{1}, client.PushOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Pop(ctx, "single", client.PopOptions{Batch: 1, AutoAck: true}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := b.scrape(t); got[series] != 1 {
		t.Fatalf("%s = %v after 40 more calls, want 1", series, got[series])
	}
}

// TestCellSDKRequestReplyCost measures (only with QUEEN_CELL_MEASURE=1)
// request/reply through the Go SDK (queenbench -client sdk: 32 requesters,
// 4 responders, a fresh inbox per request) pointed at ONE member of a cell
// of two and of a cell of three, against one broker, all on the same
// PostgreSQL and at the default heartbeat (1 s), in alternating rounds
// (QUEEN_CELL_MEASURE_ROUNDS, default 3): round trips/s and the brokers'
// CPU per round trip (every member summed, from /proc over queenbench's
// measured 3 s: -cpu-pids), medians and their ratios to one broker. Twice: with
// one request queue (the whole load on its owner: the SDK draws inboxes
// on the request queue's owner) and with 8 (-services 8: each member owns
// some, so the load spreads over the cell), with one broker driven by 16
// and by 11 requesters besides: a member's share of the spread load. Then
// the members at rest: CPU
// per member per second over QUEEN_CELL_MEASURE_IDLE (default 20 s) for
// the cells of two and three and one broker, and again with the cell of
// three grown to six; the difference from one broker at rest is the
// membership's own cost (docs/cell.md, "How a cell scales").
//
//	QUEEN_CELL_MEASURE=1 go test ./conformance/ -run TestCellSDKRequestReplyCost -v -count 1
func TestCellSDKRequestReplyCost(t *testing.T) {
	if os.Getenv("QUEEN_CELL_MEASURE") != "1" {
		t.Skip("a measurement: set QUEEN_CELL_MEASURE=1")
	}
	rounds := 3
	if s := os.Getenv("QUEEN_CELL_MEASURE_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("QUEEN_CELL_MEASURE_ROUNDS=%q", s)
		}
		rounds = n
	}
	idle := 20 * time.Second
	if s := os.Getenv("QUEEN_CELL_MEASURE_IDLE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("QUEEN_CELL_MEASURE_IDLE=%q", s)
		}
		idle = d
	}
	bench := t.TempDir() + "/queenbench"
	// bench/ is a module of its own: queenbench is built there.
	if err := brokertest.Build("../bench", "./cmd/queenbench", bench); err != nil {
		t.Fatal(err)
	}
	defaults := brokertest.MeasuredCellTimings() // the membership's cost is part of what is measured
	startCell := func(c *testCell, n int) []*member {
		var ms []*member
		var ids []string
		for range n {
			m := c.start(advertise(t), defaults)
			ms, ids = append(ms, m), append(ids, m.id)
		}
		c.waitLive(ids...)
		return ms
	}
	one := startBrokerOn(t, postgresStore, nil)
	cell3 := newSteadyTestCell(t)
	two, three := startCell(newSteadyTestCell(t), 2), startCell(cell3, 3)
	type setup struct {
		name       string
		brokers    []*broker // the first is the one the SDK is given
		members    []*member
		requesters int // 0: queenbench's 32
	}
	brokers := func(ms []*member) []*broker {
		var bs []*broker
		for _, m := range ms {
			bs = append(bs, m.broker)
		}
		return bs
	}
	// One broker again with a half and a third of the requesters: what a
	// member of a cell of two or three serves when 8 request queues spread
	// the load (fewer calls in flight per member, so fewer per write).
	setups := []setup{{"one broker", []*broker{one}, nil, 0}, {"cell of two", brokers(two), two, 0}, {"cell of three", brokers(three), three, 0},
		{"one broker, 16 requesters", []*broker{one}, nil, 16}, {"one broker, 11 requesters", []*broker{one}, nil, 11}}
	run := func(s setup, services int) (rate, perRT float64) {
		pids := make([]string, len(s.brokers))
		for i, b := range s.brokers {
			pids[i] = strconv.Itoa(b.PID())
		}
		// -cpu-pids: queenbench sums every member's CPU over its measured
		// 3 s alone (not the warm-up, nor the start and end of the run).
		args := []string{"-scenario", "reqreply", "-client", "sdk", "-services", strconv.Itoa(services),
			"-addr", strings.TrimPrefix(s.brokers[0].url(""), "http://"), "-d", "3s", "-warmup", "1s",
			"-cpu-pids", strings.Join(pids, ",")}
		if s.requesters > 0 {
			args = append(args, "-c", strconv.Itoa(s.requesters))
		}
		r := brokertest.Queenbench(t, bench, args...)
		if r.Rate <= 0 || r.CPU.Target < 0 {
			t.Fatalf("queenbench gave %v round trips/s and %v cores of the brokers' CPU", r.Rate, r.CPU.Target)
		}
		return r.Rate, r.CPU.Target / r.Rate * 1e6
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for _, services := range []int{1, 8} {
		setups := setups
		if services == 1 {
			setups = setups[:3]
		}
		rates, cpus := make([][]float64, len(setups)), make([][]float64, len(setups))
		for round := range rounds {
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("services %d, round %d, load average %s", services, round+1, strings.TrimSpace(string(load)))
			for i, s := range setups {
				var relayedBefore float64
				for _, m := range s.members {
					relayedBefore += m.relayed(t)
				}
				r, u := run(s, services)
				rates[i], cpus[i] = append(rates[i], r), append(cpus[i], u)
				var relayed float64
				for _, m := range s.members {
					relayed += m.relayed(t)
				}
				t.Logf("  %s: %.0f round trips/s, %.1f µs per round trip, %.0f requests relayed", s.name, r, u, relayed-relayedBefore)
			}
		}
		for i, s := range setups {
			t.Logf("services %d, %s, medians of %d: %.0f round trips/s (%.2f× one broker), %.1f µs CPU per round trip (%.2f× one broker); rounds %.0f, %.1f",
				services, s.name, rounds, med(rates[i]), med(rates[i])/med(rates[0]), med(cpus[i]), med(cpus[i])/med(cpus[0]), rates[i], cpus[i])
		}
	}
	// At rest: nothing connected, only the membership and the store's sync.
	atRest := func(label string, ss []setup) {
		before := make([][]time.Duration, len(ss))
		for i, s := range ss {
			for _, b := range s.brokers {
				before[i] = append(before[i], b.CPU(t))
			}
		}
		time.Sleep(idle) // the window measured, not a wait for a condition
		for i, s := range ss {
			var used time.Duration
			for j, b := range s.brokers {
				used += b.CPU(t) - before[i][j]
			}
			perMember := float64(used.Microseconds()) / float64(len(s.brokers)) / idle.Seconds()
			t.Logf("at rest (%s) over %s: %s, %.0f µs CPU per member per second (%.3f%% of a core)", label, idle, s.name, perMember, perMember/1e4)
		}
	}
	atRest("three cells", setups[:3])
	six := slices.Clone(three)
	var ids []string
	for range 3 {
		six = append(six, cell3.start(advertise(t), defaults))
	}
	for _, m := range six {
		ids = append(ids, m.id)
	}
	cell3.waitLive(ids...)
	atRest("the cell of three grown to six", []setup{{"one broker", []*broker{one}, nil, 0}, {"cell of six", brokers(six), nil, 0}})
}

// kill -9 of the one member the client was given, which owns a queue: the
// SDK goes on through the other members of its view (the configured URL
// cannot be dialled), learns the view without the dead member from one of
// them, and the dead member's queue is served by its new owner again,
// without the caller seeing an error: pushes refused forward_failed while
// the cell waits out the member timeout are retried within their bound.
func TestSDKGivenMemberKilled(t *testing.T) {
	t.Parallel()
	c := newTestCell(t)
	a, b, cc := c.start(advertise(t), nil), c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b, cc)
	c.waitLive(all...)
	cl := sdkClient(t, a.url(""), client.WithTimeout(15*time.Second))
	awaitRouted(t, cl, a, queueOwnedBy(t, "probe", b.id, all...))
	ctx := context.Background()
	qa := queueOwnedBy(t, "killed", a.id, all...)
	qb := queueOwnedBy(t, "alive", b.id, all...)
	if _, err := cl.Push(ctx, qa, []any{"before"}, client.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	a.kill(t)
	killed := time.Now()
	// b's queue is not a's: served at once, a's death changes nothing.
	if _, err := cl.Push(ctx, qb, []any{"b"}, client.PushOptions{}); err != nil {
		t.Fatalf("push to a live member's queue after the kill: %v", err)
	}
	// a's queue: served again by its new owner (empty: the class keeps
	// nothing of a dead owner's), the push retried until then.
	if _, err := cl.Push(ctx, qa, []any{"after"}, client.PushOptions{}); err != nil {
		t.Fatalf("push to the dead member's queue: %v", err)
	}
	took := time.Since(killed)
	res, err := cl.Pop(ctx, qa, client.PopOptions{Batch: 10})
	if err != nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != `"after"` {
		t.Fatalf("pop of the dead member's queue from its new owner: %+v %v", res, err)
	}
	t.Logf("the dead member's queue served again %v after the kill (member timeout %d ms)", took.Round(time.Millisecond), brokertest.CellMemberTimeoutMS)
}

// Serve's replies to inboxes another member owns than the served queue's
// (a requester that does not mint its inboxes on the request queue's
// owner, as the Go SDK's Request does): each goes to its inbox's owner,
// in one batch per owner; nothing is relayed and every reply arrives.
func TestSDKServeRepliesToOtherOwners(t *testing.T) {
	t.Parallel()
	r := newRoutedCell(t)
	a, b, cc, members, all, cl, responder := r.a, r.b, r.cc, r.members, r.all, r.cl, r.responder
	svc := queueOwnedBy(t, "svc", cc.id, all...)
	var inboxes []string
	for i, m := range members {
		for k := range 3 {
			inboxes = append(inboxes, queueOwnedBy(t, "inbox"+strconv.Itoa(i)+"x"+strconv.Itoa(k), m.id, all...))
		}
	}
	relayedBefore := []float64{a.relayed(t), b.relayed(t), cc.relayed(t)}
	ctx := context.Background()
	var reqs []any
	for i, in := range inboxes {
		reqs = append(reqs, client.RequestEnvelope{ReplyTo: in, Payload: []byte(strconv.Itoa(i))})
	}
	// Pushed together: Serve's first pop takes them in one batch.
	if _, err := cl.Push(ctx, svc, reqs, client.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := echoServe(t, responder, svc)
	for i, in := range inboxes {
		res, err := cl.Pop(ctx, in, client.PopOptions{Wait: true, Timeout: 10 * time.Second, AutoAck: true})
		if err != nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != strconv.Itoa(i) {
			stop()
			t.Fatalf("the reply in %s: %+v %v", in, res, err)
		}
	}
	stop()
	for i, m := range members {
		if got := m.relayed(t); got != relayedBefore[i] {
			t.Errorf("member %c relayed %v requests, want none", 'a'+i, got-relayedBefore[i])
		}
	}
}
