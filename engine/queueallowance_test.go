package engine

import (
	"errors"
	"fmt"
	"testing"
)

// The queue allowance counted per kind (docs/engine.md, "The queue
// allowance"): declared and implicit queues apart, undivided in a cell of
// one, divided among members for implicit queues only.

// counts fails the test unless the tenant "default" holds declared declared
// and implicit implicit queues as the allowance counts them.
func (h *harness) counts(declared, implicit int64) {
	h.t.Helper()
	d, i := h.e.QueueCounts("default")
	if d != declared || i != implicit {
		h.t.Fatalf("queue counts: declared %d implicit %d, want %d and %d", d, i, declared, implicit)
	}
}

// Every way a queue is created, declared, undeclared or removed moves it
// between the two counts, or out of them, as its kind says.
func TestQueueCountsFollowEveryChangeOfKind(t *testing.T) {
	h := newHarness(t, nil)
	h.counts(0, 0)
	h.configure("decl", OptionSet{}) // a new declared queue
	h.counts(1, 0)
	h.push("imp", "", "a") // implicit, by push
	h.pop(PopRequest{Queue: "popped"})
	h.counts(1, 2)
	h.push("imp", "", "b") // a queue that is there: no count moves
	h.pop(PopRequest{Queue: "imp"})
	h.counts(1, 2)
	h.configure("imp", OptionSet{}) // implicit declared: moves
	h.configure("imp", OptionSet{}) // declared again: stays
	h.counts(2, 1)
	if !h.e.Undeclare("default", "imp") { // holds messages: stays, implicit
		t.Fatal("Undeclare of a declared queue reported false")
	}
	h.counts(1, 2)
	h.configure("pristine", OptionSet{})
	h.counts(2, 2)
	h.e.Undeclare("default", "pristine") // holds nothing: removed at once
	h.counts(1, 2)
	if existed, _ := h.e.Delete("default", "decl"); !existed {
		t.Fatal("delete of decl")
	}
	h.counts(0, 2)
	if existed, _ := h.e.Delete("default", "imp"); !existed {
		t.Fatal("delete of imp")
	}
	h.counts(0, 1)
	h.advance(h.e.cfg.ImplicitIdle + h.e.cfg.SweepEvery) // "popped" is collected
	if h.listed("popped") {
		t.Fatal("popped was not collected")
	}
	h.counts(0, 0)
}

// An ownership move keeps a declared queue's count (its replacement is
// declared) and uncounts an implicit one (it goes).
func TestQueueCountsAcrossAnOwnershipMove(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("decl", OptionSet{})
	h.push("decl", "", "a")
	h.push("imp", "", "a")
	h.counts(1, 1)
	h.dropForMove("decl")
	h.dropForMove("imp")
	h.counts(1, 0)
	if _, ok := h.e.Declared("default", "decl"); !ok {
		t.Fatal("a declared queue lost its declaration in a move")
	}
}

// In a cell of one (undivided, members 1) the two kinds share one count,
// exactly as before they were counted apart: creating either is refused at
// the allowance, and declaring an implicit queue that is there is not.
func TestUndividedQueueAllowanceIsOneCount(t *testing.T) {
	for _, members := range []int64{0, 1} {
		h := newHarness(t, nil)
		h.e.SetTenantLimitsShared("default", 0, 3, members)
		h.configure("d1", OptionSet{})
		h.push("i1", "", "a")
		h.push("i2", "", "a")
		if _, err := h.pushErr("i3", "", "a"); !errors.Is(err, ErrTenantQueues) || CodeOf(err) != CodeQuotaExceeded {
			t.Fatalf("members %d: push creating a fourth queue: %v, want quota exceeded", members, err)
		}
		if err := h.e.CheckDeclare("default", "d2"); !errors.Is(err, ErrTenantQueues) {
			t.Fatalf("members %d: CheckDeclare of a fourth queue: %v", members, err)
		}
		if err := h.e.Configure("default", "d2", OptionSet{}); !errors.Is(err, ErrTenantQueues) {
			t.Fatalf("members %d: configure creating a fourth queue: %v", members, err)
		}
		if err := h.e.CheckDeclare("default", "i1"); err != nil {
			t.Fatalf("members %d: CheckDeclare of an implicit queue that is there: %v", members, err)
		}
		h.configure("i1", OptionSet{})
		h.counts(2, 1)
		if _, err := h.pushErr("i3", "", "a"); !errors.Is(err, ErrTenantQueues) {
			t.Fatalf("members %d: push after declaring i1: %v, want quota exceeded", members, err)
		}
	}
}

// Divided among k members, declared queues are bounded by the whole
// allowance whatever the implicit ones hold, and the implicit queues of the
// member by max(1, (allowance - declared) / k).
func TestDividedQueueAllowance(t *testing.T) {
	h := newHarness(t, nil)
	h.e.SetTenantLimitsShared("default", 0, 10, 3)
	h.configure("d1", OptionSet{})
	// (10 - 1) / 3 = 3 implicit queues.
	for i := range 3 {
		h.push(fmt.Sprintf("i%d", i), "", "a")
	}
	if _, err := h.pushErr("i3", "", "a"); !errors.Is(err, ErrTenantQueues) || CodeOf(err) != CodeQuotaExceeded {
		t.Fatalf("push past the implicit share: %v, want quota exceeded", err)
	}
	if _, _, err := h.e.Pop(&PopRequest{Tenant: "default", Queue: "i3"}, &collector{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("pop past the implicit share: %v, want quota exceeded", err)
	}
	h.counts(1, 3)
	// Declarations are not refused for the implicit queues: up to 10.
	for i := 2; i <= 10; i++ {
		q := fmt.Sprintf("d%d", i)
		if err := h.e.CheckDeclare("default", q); err != nil {
			t.Fatalf("CheckDeclare of %s: %v", q, err)
		}
		h.configure(q, OptionSet{})
	}
	h.counts(10, 3)
	if err := h.e.CheckDeclare("default", "d11"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("CheckDeclare of an eleventh declared queue: %v", err)
	}
	if err := h.e.Configure("default", "d11", OptionSet{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("configure of an eleventh declared queue: %v", err)
	}
	// Declaring an implicit queue past the declared allowance is refused
	// too, and leaves it implicit.
	if err := h.e.CheckDeclare("default", "i0"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("CheckDeclare of implicit i0 with 10 declared: %v", err)
	}
	if err := h.e.Configure("default", "i0", OptionSet{}); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("configure of implicit i0 with 10 declared: %v", err)
	}
	if _, ok := h.e.Declared("default", "i0"); ok {
		t.Fatal("a refused configure declared i0")
	}
	h.counts(10, 3)
	// Nothing is left for implicit queues; the ones there stay and serve.
	if _, err := h.pushErr("i9", "", "a"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push creating an implicit queue with the declared ones at the allowance: %v", err)
	}
	h.push("i0", "", "b")
	// Declared queues going raise the share: with 4 declared it is
	// (10 - 4) / 3 = 2, below the 3 held; with none, 10 / 3 = 3, all held.
	for i := 1; i <= 6; i++ {
		h.e.Delete("default", fmt.Sprintf("d%d", i))
	}
	h.counts(4, 3)
	if _, err := h.pushErr("i9", "", "a"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push with 4 declared and 3 implicit (share 2): %v", err)
	}
	for i := 7; i <= 10; i++ {
		h.e.Delete("default", fmt.Sprintf("d%d", i))
	}
	h.counts(0, 3) // share 10 / 3 = 3: full
	if _, err := h.pushErr("i9", "", "a"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push with 3 implicit (share 3): %v", err)
	}
	// Redivided among 2 members: 10 / 2 = 5.
	h.e.SetTenantLimitsShared("default", 0, 10, 2)
	h.push("i3", "", "a")
	h.push("i4", "", "a")
	if _, err := h.pushErr("i5", "", "a"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push past the share of 2 members: %v", err)
	}
	h.counts(0, 5)
}

// A share never rounds down to none while the declared queues leave any
// room: a grant of 2 queues in a cell of 3 gives each member one.
func TestImplicitShareIsAtLeastOne(t *testing.T) {
	for _, c := range []struct{ max, declared, members, want int64 }{
		{10, 0, 3, 3}, {10, 1, 3, 3}, {10, 4, 3, 2}, {2, 0, 3, 1}, {2, 1, 3, 1},
		{2, 2, 3, 0}, {2, 5, 3, 0}, {10, 0, 1, 10}, {10, 7, 1, 3},
	} {
		if got := implicitShare(c.max, c.declared, c.members); got != c.want {
			t.Errorf("implicitShare(%d, %d, %d) = %d, want %d", c.max, c.declared, c.members, got, c.want)
		}
	}
	h := newHarness(t, nil)
	h.e.SetTenantLimitsShared("default", 0, 2, 3)
	h.push("a", "", "x")
	if _, err := h.pushErr("b", "", "x"); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("second implicit queue on a share of 1: %v", err)
	}
}

// docs/engine.md (the queue allowance): 0 is unlimited, divided or not:
// implicit queues are created and declared without limit.
func TestUnlimitedDividedAllowanceAdmitsEveryKind(t *testing.T) {
	h := newHarness(t, nil)
	h.e.SetTenantLimitsShared("default", 0, 0, 3)
	h.push("i", "", "a")
	h.configure("i", OptionSet{}) // declared from implicit
	h.configure("d", OptionSet{})
	h.push("j", "", "a")
	h.counts(2, 1)
}

// docs/engine.md (the queue allowance): declaring an implicit queue that
// brings the declared ones to the divided allowance exactly is admitted;
// undivided, declaring an implicit queue is always admitted (it is counted
// already), even after the allowance was lowered below what is held.
func TestDeclaringAnImplicitQueueAtTheAllowance(t *testing.T) {
	h := newHarness(t, nil)
	h.e.SetTenantLimitsShared("default", 0, 2, 2)
	h.configure("d", OptionSet{})
	h.push("i", "", "a")
	h.configure("i", OptionSet{}) // 2 declared of 2
	h.counts(2, 0)

	h = newHarness(t, nil)
	h.configure("d", OptionSet{})
	h.push("i", "", "a")
	h.e.SetTenantLimits("default", 0, 1)
	h.configure("i", OptionSet{})
	h.counts(2, 0)
}

// D7, divided among members: the implicit share answers before the broker
// total, as the undivided allowance does. A push that would create an
// implicit queue past both the member's share and the broker total is
// refused for the share.
func TestImplicitShareAnswersBeforeTheBrokerTotal(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 1024 })
	h.e.SetTenantLimitsShared("default", 0, 2, 2) // (2 - 0) / 2 = 1 implicit queue
	h.push("one", "", "a")
	big := string(make([]byte, 900)) // passes the broker total too
	if _, err := h.pushErr("two", "", big); !errors.Is(err, ErrTenantQueues) {
		t.Fatalf("push creating a second implicit queue past both: %v, want the queue allowance", err)
	}
}
