package engine

import (
	"errors"
	"testing"
	"time"
)

// spec (status reads): the listing returns every queue of the tenant, declared and implicit, and only the tenant's.
func TestQueuesListsEveryQueueOfTheTenant(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("b-declared", OptionSet{})
	h.push("a-pushed", "", "x")
	h.pop(PopRequest{Queue: "c-popped"})
	if _, err := h.e.Push("other", "z-foreign", "", payloads("y")); err != nil {
		t.Fatal(err)
	}
	qs := h.e.Queues("default", nil)
	if len(qs) != 3 {
		t.Fatalf("listing %+v, want 3 queues", qs)
	}
	want := []struct {
		name     string
		declared bool
	}{{"a-pushed", false}, {"b-declared", true}, {"c-popped", false}}
	for i, w := range want {
		if qs[i].Name != w.name || qs[i].Declared != w.declared {
			t.Fatalf("row %d: %s declared=%v, want %s declared=%v", i, qs[i].Name, qs[i].Declared, w.name, w.declared)
		}
	}
	if other := h.e.Queues("other", nil); len(other) != 1 || other[0].Name != "z-foreign" {
		t.Fatalf("other tenant's listing %+v", other)
	}
	if none := h.e.Queues("nobody", nil); len(none) != 0 {
		t.Fatalf("unknown tenant's listing %+v", none)
	}
}

// spec: durable-style names are per tenant: the same queue name in two tenants is two unrelated queues.
func TestSameQueueNameInTwoTenantsIsTwoQueues(t *testing.T) {
	h := newHarness(t, nil)
	h.push("inbox", "", "mine")
	if _, err := h.e.Push("other", "inbox", "", payloads("theirs", "too")); err != nil {
		t.Fatal(err)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "inbox", Batch: 10})); got != "mine" {
		t.Fatalf("default tenant got %q", got)
	}
	if d := h.infoOf("inbox").Depth; d != 1 {
		t.Fatalf("default tenant's depth %d", d)
	}
}

// spec + D5: the listing row: depth (pending), bytes (held, reclaimable included), partitions, groups, drops, options.
func TestQueuesRowFields(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasPolicy|HasTTLSeconds|HasLeaseSeconds|HasRetryLimit|HasMaxBytes|HasWindowBuffer,
		Options{MaxLength: 1000, MaxBytes: 1 << 20, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3, WindowMs: 20, WindowCount: 50}))
	h.push("q", "p1", "aa", "bb")
	h.push("q", "p2", "ccc")
	h.push("q", "p3", "d")
	h.ack("q", "g1", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g1", Batch: 2})...)
	h.pop(PopRequest{Queue: "q", Partition: "p2", Group: "g2"})
	qi := h.infoOf("q")
	want := QueueInfo{
		// depth 2: p1 was consumed by g1 before g2 existed, so a and b are reclaimable (D3)
		Name: "q", Declared: true, Depth: 2, Bytes: 8, Partitions: 3, Groups: 2,
		Options: Options{MaxLength: 1000, MaxBytes: 1 << 20, Policy: PolicyDropOldest, TTLSeconds: 30, LeaseSeconds: 15, RetryLimit: 3, WindowMs: 20, WindowCount: 50},
	}
	if qi != want {
		t.Fatalf("row\n got %+v\nwant %+v", qi, want)
	}
}

// D5: the depth read's fields: pending, partitionsPending, bytes, per-partition pending and bytes, per-group pending and skipped.
func TestDepthFields(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{})
	h.push("q", "room-7", "aaaaa", "bbbbb")
	h.push("q", "room-8", "cc")
	h.push("q", "room-9", "d")
	h.ack("q", "widget", AckCompleted, h.pop(PopRequest{Queue: "q", Partition: "room-9", Group: "widget"})...)
	h.pop(PopRequest{Queue: "q", Partition: "room-7", Group: "widget"})
	d := h.depthOf("q", "")
	if d.Queue != "q" || d.HasGroup || !d.Declared || d.Pending != 3 || d.PartitionsPending != 2 || d.Bytes != 13 {
		t.Fatalf("depth %+v, want pending 3 in 2 partitions, 13 bytes", d)
	}
	if p := partitionDepth(t, d, "room-7"); p.Pending != 2 || p.Bytes != 10 {
		t.Fatalf("room-7 %+v", p)
	}
	if p := partitionDepth(t, d, "room-8"); p.Pending != 1 || p.Bytes != 2 {
		t.Fatalf("room-8 %+v", p)
	}
	if p := partitionDepth(t, d, "room-9"); p.Pending != 0 || p.Bytes != 1 {
		t.Fatalf("room-9 %+v, want consumed but held: pending 0, bytes 1", p)
	}
	if g := groupDepth(t, d, "widget"); g.Pending != 3 || g.Skipped != 0 {
		t.Fatalf("widget %+v, want pending 3 (2 in room-7, one in room-8 never popped)", g)
	}
}

// D5: per-partition figures add up to the queue's, and the listing agrees with the depth read.
func TestDepthPerPartitionFiguresAddUp(t *testing.T) {
	h := newHarness(t, payloadOnly)
	for i, p := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		h.push("q", p, numbered(p, i+1)...)
	}
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 17})...)
	d := h.depthOf("q", "")
	var pending, bytes int64
	var partsPending int
	for _, p := range d.Partitions {
		pending += p.Pending
		bytes += p.Bytes
		if p.Pending > 0 {
			partsPending++
		}
	}
	qi := h.infoOf("q")
	if pending != d.Pending || bytes != d.Bytes || partsPending != d.PartitionsPending || len(d.Partitions) != 10 {
		t.Fatalf("sums pending=%d bytes=%d parts=%d vs depth %+v", pending, bytes, partsPending, d)
	}
	if qi.Depth != d.Pending || qi.Bytes != d.Bytes || qi.Partitions != 10 || d.Pending != 55-17 || h.e.CellBytes() != d.Bytes {
		t.Fatalf("listing depth=%d bytes=%d vs depth read pending=%d bytes=%d, cell %d", qi.Depth, qi.Bytes, d.Pending, d.Bytes, h.e.CellBytes())
	}
}

// D5: bytes counts the payload memory held, reclaimable included, and is 0 when nothing is held.
func TestBytesCountReclaimableAndAreZeroWhenEmpty(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.configure("q", OptionSet{})
	if d := h.depthOf("q", ""); d.Bytes != 0 || d.Pending != 0 || len(d.Partitions) != 0 {
		t.Fatalf("declared empty queue %+v", d)
	}
	h.push("q", "", "12345")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g"})...)
	if qi := h.infoOf("q"); qi.Bytes != 5 || qi.Depth != 0 {
		t.Fatalf("consumed: bytes=%d depth=%d, want 5 and 0", qi.Bytes, qi.Depth)
	}
	if _, err := h.e.Reset("default", "q"); err != nil {
		t.Fatal(err)
	}
	if d := h.depthOf("q", ""); d.Bytes != 0 || h.infoOf("q").Bytes != 0 || h.e.CellBytes() != 0 {
		t.Fatalf("after reset bytes %d", d.Bytes)
	}
}

// spec (status reads): the depth read of a queue that does not exist is 404 ephemeral_queue_not_found.
func TestDepthOfMissingQueueIsNotFound(t *testing.T) {
	h := newHarness(t, nil)
	var d DepthInfo
	err := h.e.Depth("default", "nope", "", &d)
	if !errors.Is(err, ErrQueueNotFound) || CodeOf(err) != CodeQueueNotFound {
		t.Fatalf("depth of a missing queue: %v", err)
	}
	if h.listed("nope") {
		t.Fatal("the depth read created the queue")
	}
	h.push("gone", "", "x")
	h.e.Delete("default", "gone")
	if err := h.e.Depth("default", "gone", "g", &d); !errors.Is(err, ErrQueueNotFound) {
		t.Fatalf("depth of a deleted queue: %v", err)
	}
}

// D5: a depth read for a group that does not exist answers as for a new group, and creates nothing.
func TestDepthForUnknownGroupReadsAsNewGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a", "b")
	h.push("q", "p2", "c")
	h.ack("q", "g", AckCompleted, h.pop(PopRequest{Queue: "q", Group: "g", Batch: 10})...)
	d := h.depthOf("q", "nobody")
	if !d.HasGroup || d.Group != "nobody" || d.Pending != 3 || d.PartitionsPending != 2 || d.Bytes != 3 {
		t.Fatalf("depth for a new group %+v, want pending 3 (all held) in 2 partitions", d)
	}
	if qi := h.infoOf("q"); qi.Groups != 1 {
		t.Fatalf("the depth read created a group: %d groups", qi.Groups)
	}
	if len(d.Groups) != 1 || d.Groups[0].Group != "g" {
		t.Fatalf("groups %+v", d.Groups)
	}
}

// D5: with a group, pending counts what that group has not settled (in flight included).
func TestDepthWithGroupCountsThatGroupsUnsettled(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p1", "a", "b", "c")
	h.push("q", "p2", "d")
	ms := h.pop(PopRequest{Queue: "q", Partition: "p1", Group: "g", Batch: 2})
	h.ack("q", "g", AckCompleted, ms[0])
	d := h.depthOf("q", "g")
	if d.Pending != 3 || d.PartitionsPending != 2 {
		t.Fatalf("group depth %+v, want 3 unsettled (b in flight, c, d)", d)
	}
	if p := partitionDepth(t, d, "p1"); p.Pending != 2 {
		t.Fatalf("p1 %+v", p)
	}
	if d := h.depthOf("q", ""); d.Pending != 3 {
		t.Fatalf("queue pending %d, want 3 (the only group settled a)", d.Pending)
	}
}

// D4 + engine.md: queue mode is shown as __QUEUE_MODE__, and a depth read naming it reads queue mode.
func TestDepthShowsQueueModeGroup(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "a", "b")
	h.ack("q", "", AckCompleted, h.pop(PopRequest{Queue: "q"})...)
	d := h.depthOf("q", QueueModeGroup)
	if d.Pending != 1 {
		t.Fatalf("queue-mode depth pending %d, want 1", d.Pending)
	}
	if g := groupDepth(t, d, QueueModeGroup); g.Pending != 1 {
		t.Fatalf("queue-mode group row %+v", g)
	}
}

// D9: the options in force are those sent, clamped to the broker's ceilings, and the status reads publish them.
func TestInForceOptionsAreClampedToCeilings(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxBytes = 64 << 20 })
	h.configure("q", declare(HasMaxBytes|HasMaxLength|HasTTLSeconds|HasLeaseSeconds|HasRetryLimit|HasWindowBuffer,
		Options{MaxBytes: 1 << 40, MaxLength: 5_000_000, TTLSeconds: 1_000_000, LeaseSeconds: 10_000, RetryLimit: 1000, WindowMs: 400_000, WindowCount: 20_000}))
	want := Options{MaxBytes: 64 << 20, MaxLength: 1_000_000, TTLSeconds: 86_400, LeaseSeconds: 3600, RetryLimit: 100, WindowMs: 300_000, WindowCount: 10_000}
	if got := h.infoOf("q").Options; got != want {
		t.Fatalf("in force\n got %v\nwant %v", got, want)
	}
}

// D9: the ceilings are the broker's own (configurable) and clamp the defaults the same way; ttl 0 stays off.
func TestDefaultsAreClampedToCeilings(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Defaults = Options{MaxBytes: 1 << 30, MaxLength: 5000, LeaseSeconds: 120, RetryLimit: 50}
		c.Ceilings = Ceilings{MaxBytes: 1 << 20, MaxLength: 100, LeaseSeconds: 60, RetryLimit: 10}
	})
	h.push("implicit", "", "x")
	want := Options{MaxBytes: 1 << 20, MaxLength: 100, LeaseSeconds: 60, RetryLimit: 10, TTLSeconds: 0}
	if got := h.infoOf("implicit").Options; got != want {
		t.Fatalf("implicit queue in force\n got %v\nwant %v", got, want)
	}
	h.configure("declared", declare(HasLeaseSeconds, Options{LeaseSeconds: 30}))
	want.LeaseSeconds = 30
	if got := h.infoOf("declared").Options; got != want {
		t.Fatalf("declared queue in force\n got %v\nwant %v", got, want)
	}
}

// D9: the clamped values are the ones enforced (maxLength clamped to its ceiling bounds the push).
func TestClampedOptionIsTheOneEnforced(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Ceilings.MaxLength = 2; c.Ceilings.LeaseSeconds = 5 })
	h.configure("q", declare(HasMaxLength|HasLeaseSeconds, Options{MaxLength: 1000, LeaseSeconds: 3000}))
	h.push("q", "", "a", "b")
	if _, err := h.pushErr("q", "", "c"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("push past the clamped maxLength: %v", err)
	}
	h.pop(PopRequest{Queue: "q", Group: "g"})
	h.advance(5 * time.Second)
	if ms := h.pop(PopRequest{Queue: "q", Group: "g"}); attemptsOf(ms) != "1" {
		t.Fatalf("lease clamped to 5 s should have expired: got %q attempts %s", payloadsOf(ms), attemptsOf(ms))
	}
}

// D9: options left out take the defaults, ttlSeconds the tenant default QUEEN_EPHEMERAL_TTL_S.
func TestConfigureOmittedOptionsTakeDefaults(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Defaults.TTLSeconds = 60 })
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 7}))
	want := Options{MaxBytes: 16 << 20, MaxLength: 7, Policy: PolicyReject, TTLSeconds: 60, LeaseSeconds: 30, RetryLimit: 5}
	if got := h.infoOf("q").Options; got != want {
		t.Fatalf("in force\n got %v\nwant %v", got, want)
	}
}

// spec (configure): the defaults are maxBytes 16 MiB, maxLength 10,000, reject, ttl off, lease 30, retryLimit 5, no window.
func TestImplicitQueueHasSpecDefaults(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "", "x")
	want := Options{MaxBytes: 16 << 20, MaxLength: 10000, Policy: PolicyReject, TTLSeconds: 0, LeaseSeconds: 30, RetryLimit: 5}
	if got := h.infoOf("q").Options; got != want {
		t.Fatalf("defaults\n got %v\nwant %v", got, want)
	}
}

// D9: configure replaces the declaration with exactly what was sent; it is not a merge.
func TestConfigureReplacesNotMerges(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength|HasTTLSeconds|HasPolicy|HasWindowBuffer, Options{MaxLength: 5, TTLSeconds: 30, Policy: PolicyDropOldest, WindowMs: 20, WindowCount: 5}))
	h.configure("q", declare(HasLeaseSeconds, Options{LeaseSeconds: 10}))
	want := Options{MaxBytes: 16 << 20, MaxLength: 10000, Policy: PolicyReject, TTLSeconds: 0, LeaseSeconds: 10, RetryLimit: 5}
	if got := h.infoOf("q").Options; got != want {
		t.Fatalf("after second configure\n got %v\nwant %v", got, want)
	}
}

// D9: configuring an implicit queue makes it declared and keeps its contents.
func TestConfigureImplicitQueueKeepsContents(t *testing.T) {
	h := newHarness(t, nil)
	h.push("q", "p", "a", "b", "c")
	first := h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g"})
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 100}))
	qi := h.infoOf("q")
	if !qi.Declared || qi.Depth != 3 || qi.Bytes != 3 || qi.Options.MaxLength != 100 {
		t.Fatalf("after configure %+v", qi)
	}
	if got := outcomes(h.ack("q", "g", AckCompleted, first...)); got != "[acked]" {
		t.Fatalf("the lease survived configure: %s", got)
	}
	if got := payloadsOf(h.pop(PopRequest{Queue: "q", Partition: "p", Group: "g", Batch: 10})); got != "b,c" {
		t.Fatalf("contents after configure %q", got)
	}
}

// spec (two tiers): declare a queue when you want it visible before its first message.
func TestDeclaredQueueIsListedBeforeItsFirstMessage(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", OptionSet{})
	qi := h.infoOf("q")
	if !qi.Declared || qi.Depth != 0 || qi.Bytes != 0 || qi.Partitions != 0 || qi.Groups != 0 {
		t.Fatalf("declared empty queue %+v", qi)
	}
	if d := h.depthOf("q", ""); !d.Declared || d.Pending != 0 {
		t.Fatalf("depth of a declared empty queue %+v", d)
	}
}

// D9: numbers are non-negative; maxBytes, maxLength, leaseSeconds and retryLimit at least 1; policy is one of two.
func TestConfigureValidatesRanges(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("q", declare(HasMaxLength, Options{MaxLength: 9}))
	bad := []OptionSet{
		declare(HasMaxBytes, Options{MaxBytes: 0}),
		declare(HasMaxLength, Options{MaxLength: 0}),
		declare(HasLeaseSeconds, Options{LeaseSeconds: 0}),
		declare(HasRetryLimit, Options{RetryLimit: 0}),
		declare(HasTTLSeconds, Options{TTLSeconds: -1}),
		declare(HasMaxBytes, Options{MaxBytes: -5}),
		declare(HasWindowBuffer, Options{WindowMs: -1}),
		declare(HasWindowBuffer, Options{WindowCount: -1}),
		declare(HasPolicy, Options{Policy: Policy(2)}),
	}
	for _, s := range bad {
		if err := h.e.Configure("default", "q", s); CodeOf(err) != CodeBadRequest {
			t.Errorf("configure %+v: %v, want bad request", s, err)
		}
		if err := h.e.Configure("default", "fresh", s); CodeOf(err) != CodeBadRequest {
			t.Errorf("configure fresh %+v: %v", s, err)
		}
	}
	if h.infoOf("q").Options.MaxLength != 9 || h.listed("fresh") {
		t.Fatal("a refused configure changed something")
	}
	for _, s := range []OptionSet{
		declare(HasTTLSeconds, Options{TTLSeconds: 0}),
		declare(HasWindowBuffer, Options{}),
		declare(HasMaxBytes|HasMaxLength|HasLeaseSeconds|HasRetryLimit, Options{MaxBytes: 1, MaxLength: 1, LeaseSeconds: 1, RetryLimit: 1}),
	} {
		if err := h.e.Configure("default", "q", s); err != nil {
			t.Errorf("configure %+v: %v", s, err)
		}
	}
}

// spec (configure): policy is reject or dropOldest.
func TestParsePolicy(t *testing.T) {
	if p, ok := ParsePolicy("reject"); !ok || p != PolicyReject {
		t.Fatal("reject")
	}
	if p, ok := ParsePolicy("dropOldest"); !ok || p != PolicyDropOldest {
		t.Fatal("dropOldest")
	}
	for _, s := range []string{"", "dropoldest", "drop", "Reject"} {
		if _, ok := ParsePolicy(s); ok {
			t.Errorf("%q accepted", s)
		}
	}
}

// spec (status reads): drops are three counters, bounds, ttl and retry, per queue; the broker counts them too.
func TestDropCountersAreSplitByCause(t *testing.T) {
	h := newHarness(t, nil)
	h.configure("b", declare(HasMaxLength|HasPolicy, Options{MaxLength: 1, Policy: PolicyDropOldest}))
	h.push("b", "", "1", "2", "3")
	h.configure("t", declare(HasTTLSeconds, Options{TTLSeconds: 1}))
	h.push("t", "", "1", "2")
	h.configure("r", declare(HasRetryLimit, Options{RetryLimit: 1}))
	h.push("r", "", "1")
	h.ack("r", "g", AckFailed, h.pop(PopRequest{Queue: "r", Group: "g"})...)
	h.advance(time.Second)
	for q, want := range map[string]Drops{"b": {Bounds: 2}, "t": {TTL: 2}, "r": {Retry: 1}} {
		if got := h.infoOf(q).Drops; got != want {
			t.Errorf("queue %s drops %+v, want %+v", q, got, want)
		}
	}
	if h.e.Drops(CauseBounds) != 2 || h.e.Drops(CauseTTL) != 2 || h.e.Drops(CauseRetry) != 1 {
		t.Fatalf("broker drops bounds=%d ttl=%d retry=%d", h.e.Drops(CauseBounds), h.e.Drops(CauseTTL), h.e.Drops(CauseRetry))
	}
}

// spec (status reads): cellBytes is the whole broker's ephemeral footprint, every tenant included.
func TestCellBytesIsBrokerWide(t *testing.T) {
	h := newHarness(t, payloadOnly)
	h.push("q", "", "12345")
	if _, err := h.e.Push("other", "q", "x", payloads("123", "4567")); err != nil {
		t.Fatal(err)
	}
	if h.e.CellBytes() != 12 {
		t.Fatalf("cell bytes %d, want 12", h.e.CellBytes())
	}
	h.e.Delete("other", "q")
	if h.e.CellBytes() != 5 {
		t.Fatalf("cell bytes %d after delete, want 5", h.e.CellBytes())
	}
}
