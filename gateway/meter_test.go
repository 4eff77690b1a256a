package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// The metering rules of docs/gateway.md ("Metering", "Parked-consumer
// slots") at their bounds, on one tenant's state: the end-to-end tests
// (gateway/e2e) see them through a broker, these pin the exact edges.

// Periods are aligned to the epoch; Retry-After is the whole seconds to the
// period's end, at least 1.
func TestPeriodsAndRetryAfter(t *testing.T) {
	minute := &catalog.Plan{PeriodSeconds: 60}
	for _, c := range []struct {
		p                  *catalog.Plan
		now                int64
		index, start, left int64
	}{
		{minute, 0, 0, 0, 60},
		{minute, 59, 0, 0, 1},
		{minute, 60, 1, 60, 60},
		{minute, 120, 2, 120, 60},
		{minute, 150, 2, 120, 30},
		{minute, 179, 2, 120, 1},
		{&catalog.Plan{PeriodSeconds: 86400}, 86400*3 + 5, 3, 86400 * 3, 86395},
	} {
		index, start := periodOf(c.p, c.now)
		if index != c.index || start != c.start {
			t.Errorf("period of %ds at %d: %d from %d, want %d from %d", c.p.PeriodSeconds, c.now, index, start, c.index, c.start)
		}
		if left := untilPeriodEnd(c.p, c.now); left != int(c.left) {
			t.Errorf("Retry-After of %ds at %d: %d, want %d", c.p.PeriodSeconds, c.now, left, c.left)
		}
	}
	for _, p := range []*catalog.Plan{nil, {}} {
		if index, start := periodOf(p, 12345); index != 0 || start != 0 {
			t.Errorf("a plan without a period (%v): period %d from %d, want one period from the epoch", p, index, start)
		}
	}
}

// A push whose items would pass the allowance is refused whole, with
// Retry-After until the period ends; its items are held while it is in
// flight and metered when it is answered 201, given back otherwise. A new
// period starts from zero.
func TestPushAllowanceIsExact(t *testing.T) {
	p := &catalog.Plan{MessagesPerPeriod: 10, PeriodSeconds: 60}
	ts := &tenantState{name: "t"}
	const now = 150
	if e, _ := admitPush(ts, p, 6, now); e != nil {
		t.Fatalf("6 of 10: %v", e)
	}
	if e, _ := admitPush(ts, p, 4, now); e != nil {
		t.Fatalf("4 more, 10 of 10 with the first in flight: %v", e)
	}
	e, retry := admitPush(ts, p, 1, now)
	if e != errAllowance || retry != 30 {
		t.Fatalf("an 11th message: %v, Retry-After %d; want %v, 30", e, retry, errAllowance)
	}
	if got := ts.pending.Load(); got != 10 {
		t.Fatalf("held after the refusal: %d, want 10 (the refused push holds nothing)", got)
	}
	pushAnswered(ts, p, 6, 201)
	pushAnswered(ts, p, 4, 503)
	if m, pend, un := ts.msgs.Load(), ts.pending.Load(), ts.unflushedMsgs.Load(); m != 6 || pend != 0 || un != 6 {
		t.Fatalf("after a 201 of 6 and a 503 of 4: metered %d, held %d, unwritten %d; want 6, 0, 6", m, pend, un)
	}
	if e, _ := admitPush(ts, p, 4, now); e != nil {
		t.Fatalf("the 4 the refused push gave back: %v", e)
	}
	pushAnswered(ts, p, 4, 201)
	if e, _ := admitPush(ts, p, 1, now); e != errAllowance {
		t.Fatalf("the allowance spent by answered pushes: %v, want %v", e, errAllowance)
	}
	ts.msgs.Store(9)
	ts.delivs.Store(1)
	if e, _ := admitPush(ts, p, 1, now); e != errAllowance {
		t.Fatalf("9 messages and 1 delivery spend the allowance of 10: %v", e)
	}
	if e, _ := admitPush(ts, p, 10, now+30); e != nil {
		t.Fatalf("10 in the next period: %v", e)
	}
	if m, d := ts.msgs.Load(), ts.delivs.Load(); m != 0 || d != 0 {
		t.Fatalf("the next period's counters: %d messages, %d deliveries, want 0, 0", m, d)
	}
	// No allowance: any count passes.
	free := &catalog.Plan{PeriodSeconds: 60}
	if e, _ := admitPush(&tenantState{}, free, 1_000_000, now); e != nil {
		t.Fatalf("a plan without an allowance: %v", e)
	}
}

// The rate admits a push while the bucket is not empty and takes its items
// (so a large batch's debt refuses what follows); a push the rate refuses
// holds nothing, and one the broker refuses gives its items back.
func TestPushRate(t *testing.T) {
	p := &catalog.Plan{MessagesPerSecond: 1}
	ts := &tenantState{}
	if e, _ := admitPush(ts, p, 100, 0); e != nil {
		t.Fatalf("the first push on a full bucket: %v", e)
	}
	e, wait := admitPush(ts, p, 1, 0)
	if e != errRate || wait < 1 {
		t.Fatalf("behind 99 s of debt: %v, Retry-After %d; want %v, at least 1", e, wait, errRate)
	}
	if got := ts.pending.Load(); got != 100 {
		t.Fatalf("held: %d, want 100 (the refused push holds nothing)", got)
	}
	pushAnswered(ts, p, 100, 400)
	if got := ts.pending.Load(); got != 0 {
		t.Fatalf("held after the broker refused: %d, want 0", got)
	}
	if e, _ := admitPush(ts, p, 1, 0); e != nil {
		t.Fatalf("after the refused push gave its 100 back: %v", e)
	}
	// Refunding a tenant that lost its plan meanwhile does not panic.
	pushAnswered(ts, nil, 1, 503)
}

// A pop is admitted while the allowance is not spent (in-flight pushes
// count) and the bucket is not empty; its deliveries are metered and paid
// for when it is answered, an empty one meters nothing.
func TestPopAllowanceAndRate(t *testing.T) {
	p := &catalog.Plan{MessagesPerPeriod: 3, PeriodSeconds: 60}
	ts := &tenantState{}
	const now = 60
	ts.roll(p, now)
	ts.msgs.Store(1)
	ts.delivs.Store(1)
	if e, _ := admitPop(ts, p, now); e != nil {
		t.Fatalf("2 of 3 spent: %v", e)
	}
	ts.pending.Store(1)
	e, retry := admitPop(ts, p, now)
	if e != errAllowance || retry != 60 {
		t.Fatalf("3 of 3 spent, one in flight: %v, Retry-After %d; want %v, 60", e, retry, errAllowance)
	}
	ts.pending.Store(0)
	popAnswered(ts, p, 0)
	if d, un := ts.delivs.Load(), ts.unflushedDelivs.Load(); d != 1 || un != 0 {
		t.Fatalf("an empty pop metered: %d deliveries, %d unwritten; want 1, 0", d, un)
	}
	popAnswered(ts, p, 1)
	if d, un := ts.delivs.Load(), ts.unflushedDelivs.Load(); d != 2 || un != 1 {
		t.Fatalf("a pop of 1: %d deliveries, %d unwritten; want 2, 1", d, un)
	}
	if e, _ := admitPop(ts, p, now); e != errAllowance {
		t.Fatalf("3 of 3 spent: %v, want %v", e, errAllowance)
	}
	if e, _ := admitPop(&tenantState{}, &catalog.Plan{}, now); e != nil {
		t.Fatalf("a plan without an allowance: %v", e)
	}

	r := &catalog.Plan{MessagesPerSecond: 1}
	ts = &tenantState{}
	if e, _ := admitPop(ts, r, now); e != nil {
		t.Fatalf("a pop on a full bucket: %v", e)
	}
	popAnswered(ts, r, 100)
	if e, wait := admitPop(ts, r, now); e != errRate || wait < 1 {
		t.Fatalf("behind 100 deliveries at 1/s: %v, Retry-After %d; want %v, at least 1", e, wait, errRate)
	}
	popAnswered(ts, nil, 1) // a tenant that lost its plan meanwhile
}

// A waiting pop takes one of the plan's parked slots; at the plan's count
// the next is refused and takes nothing; 0 is unlimited.
func TestParkedSlotsCount(t *testing.T) {
	p := &catalog.Plan{ParkedSlots: 2}
	ts := &tenantState{}
	for i, want := range []bool{true, true, false, false} {
		if got := takeSlot(ts, p); got != want {
			t.Fatalf("pop %d: took a slot %v, want %v", i+1, got, want)
		}
	}
	if n := ts.parked.Load(); n != 2 {
		t.Fatalf("slots held: %d, want 2", n)
	}
	ts = &tenantState{}
	for i := range 100 {
		if !takeSlot(ts, &catalog.Plan{}) {
			t.Fatalf("unlimited slots: pop %d refused", i+1)
		}
	}
}

// syncBuffer is a log destination tests read while the gateway writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Usage is written as one row per tenant and class in the minute of the
// write, counts whose write failed are kept for the next, and after each
// write the period's totals are read back: what every gateway sharing the
// catalog wrote plus what this one has not written yet (docs/gateway.md,
// "Metering"). A period that is not a whole number of minutes is counted
// by this gateway alone. The writer writes every FlushInterval and once
// more when the gateway stops.
func TestUsageWrittenAndReadBack(t *testing.T) {
	mem := newMemCatalog()
	cat := &failingCatalog{Store: mem}
	var logs syncBuffer
	g := &Gateway{
		cfg:     Config{Catalog: cat, Logger: slog.New(slog.NewTextHandler(&logs, nil)), FlushInterval: 5 * time.Millisecond},
		tenants: xsync.NewMap[string, *tenantState](),
		quit:    make(chan struct{}),
	}
	hour := &catalog.Plan{PeriodSeconds: 3600}
	odd := &catalog.Plan{PeriodSeconds: 3599} // not a whole number of minutes
	a, b := g.tenant("a"), g.tenant("b")
	a.plan.Store(hour)
	b.plan.Store(odd)
	g.tenant("c").plan.Store(hour) // nothing to write
	ctx := context.Background()
	usage := func() map[catalog.Usage]int64 {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return maps.Clone(mem.usage)
	}

	a.unflushedMsgs.Store(3)
	b.unflushedDelivs.Store(2)
	before := time.Now().Unix() / 60 * 60
	if err := g.flushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	minute := time.Now().Unix() / 60 * 60
	if minute != before {
		t.Skip("the write straddled a minute")
	}
	want := map[catalog.Usage]int64{
		{Tenant: "a", Class: catalog.Messages, Minute: minute}:   3,
		{Tenant: "b", Class: catalog.Deliveries, Minute: minute}: 2,
	}
	if got := usage(); !maps.Equal(got, want) {
		t.Fatalf("written: %v, want %v", got, want)
	}
	if a.unflushedMsgs.Load() != 0 || b.unflushedDelivs.Load() != 0 || g.flushes.Load() != 1 {
		t.Fatalf("after the write: %d and %d unwritten, %d writes; want 0, 0, 1", a.unflushedMsgs.Load(), b.unflushedDelivs.Load(), g.flushes.Load())
	}
	if err := g.flushUsage(ctx); err != nil || g.flushes.Load() != 1 {
		t.Fatalf("a write of nothing: %v, %d writes, want none", err, g.flushes.Load())
	}
	cat.fail.Store(true)
	a.unflushedMsgs.Store(4)
	if err := g.flushUsage(ctx); err == nil || a.unflushedMsgs.Load() != 4 {
		t.Fatalf("a failed write: %v, %d unwritten, want an error and 4 kept", err, a.unflushedMsgs.Load())
	}
	if err := g.refreshUsage(ctx); err == nil {
		t.Fatal("reading back from a failing catalog: no error")
	}
	cat.fail.Store(false)

	// Another gateway wrote 5 deliveries of a this period, and 100 messages
	// the period before; b's own count is 1.
	now := time.Now().Unix()
	_, start := periodOf(hour, now)
	_ = mem.AddUsage(ctx, []catalog.Usage{
		{Tenant: "a", Class: catalog.Deliveries, Minute: minute, Count: 5},
		{Tenant: "a", Class: catalog.Messages, Minute: start - 3600, Count: 100},
	})
	a.unflushedDelivs.Store(2)
	b.roll(odd, now)
	b.msgs.Store(1)
	oddIdx, oddStart := periodOf(odd, now)
	if err := g.refreshUsage(ctx); err != nil {
		t.Fatal(err)
	}
	if m, d := a.msgs.Load(), a.delivs.Load(); m != 3+4 || d != 5+2 {
		t.Fatalf("a read back: %d messages, %d deliveries; want 7 (3 written, 4 not yet), 7 (5 written, 2 not yet)", m, d)
	}
	if idx, _ := periodOf(odd, time.Now().Unix()); idx == oddIdx && oddStart%60 != 0 {
		if m, d := b.msgs.Load(), b.delivs.Load(); m != 1 || d != 0 {
			t.Fatalf("b, on a period of 3599 s: %d messages, %d deliveries; want its own 1, 0", m, d)
		}
	}

	// The writer: a's 4 and 2 more are written, and what another gateway
	// writes meanwhile is read back.
	a.unflushedMsgs.Add(2)
	g.bg.Add(1)
	go g.flushEvery()
	_ = mem.AddUsage(ctx, []catalog.Usage{{Tenant: "a", Class: catalog.Messages, Minute: start, Count: 10}})
	brokertest.Eventually(t, 10*time.Second, "a's usage written and read back", func() bool { return a.unflushedMsgs.Load() == 0 && a.msgs.Load() == 3+6+10 })
	a.unflushedMsgs.Add(1)
	a.msgs.Add(1)
	close(g.quit)
	g.bg.Wait()
	var total int64
	for k, n := range usage() {
		if k.Tenant == "a" && k.Class == catalog.Messages && k.Minute >= start {
			total += n
		}
	}
	if total != 3+6+10+1 {
		t.Fatalf("a's messages written by the end: %d, want 20", total)
	}
	if l := logs.String(); strings.Contains(l, "failed") {
		t.Fatalf("warnings with the catalog up: %s", l)
	}
}

// A refusal for the spent allowance says, in Retry-After, the whole seconds
// to the end of the period, aligned to the epoch (docs/gateway.md,
// "Metering"), over HTTP connections and on the link alike, and to a
// client link's request (a link opened with a JWT: served until its exp).
func TestAllowanceRetryAfterIsTheRestOfThePeriod(t *testing.T) {
	const day = 86400
	for _, mode := range []string{"http", "broker link", "client link"} {
		noLink := mode != "broker link"
		g := startFront(t, nil, func(c *Config) {
			_ = c.Catalog.PutPlan(context.Background(), catalog.Plan{Name: "pro", Features: catalog.Features{Ephemeral: true}, MessagesPerPeriod: 1, PeriodSeconds: day})
			c.NoLink, c.Loops = noLink, 1
		})
		tok := frontToken(t, "acme", "read-write")
		do := func(method, target, body string) (int, string, http.Header) {
			req, _ := http.NewRequest(method, "http://"+g.Addr().String()+target, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b), resp.Header
		}
		if mode == "client link" {
			l := dialTestLink(t, g.Addr().String(), tok)
			do = func(method, target, body string) (int, string, http.Header) {
				typ, p := l.roundTrip(t, &link.Request{Method: []byte(method), Target: []byte(target), Body: []byte(body)})
				if typ != link.FrameAnswer {
					t.Fatalf("%s %s on the client link: frame %d %q, want an answer", method, target, typ, p)
				}
				resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), resp.Header
			}
		}
		if st, body, _ := do("POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}]}`); st != 201 {
			t.Fatalf("%s: the push: %d %s", mode, st, body)
		}
		if !noLink {
			brokertest.Eventually(t, 10*time.Second, "the link open", func() bool { return g.links.Load() == 1 })
		}
		before := day - time.Now().Unix()%day
		st, body, h := do("GET", "/api/v1/ephemeral/pop?queue=q", "")
		after := day - time.Now().Unix()%day
		ra, _ := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
		if st != 429 || !strings.Contains(body, `"message_allowance_exceeded"`) || ra > before || ra < after-1 {
			t.Errorf("%s: a pop with the allowance spent: %d %s, Retry-After %q; want 429 message_allowance_exceeded, %d", mode, st, body, h.Get("Retry-After"), after)
		}
	}
}
