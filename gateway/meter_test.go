package gateway

import (
	"testing"

	"github.com/queenmq/ephemeral/gateway/catalog"
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
