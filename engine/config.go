package engine

import (
	"fmt"
	"runtime/debug"
	"time"
)

// Policy is what a breach of a queue's maxBytes or maxLength does.
type Policy uint8

const (
	PolicyReject     Policy = iota // refuse the push: 429 queue_full
	PolicyDropOldest               // admit the push and drop from the head
)

func (p Policy) String() string {
	if p == PolicyDropOldest {
		return "dropOldest"
	}
	return "reject"
}

// ParsePolicy accepts the two policy names of the spec.
func ParsePolicy(s string) (Policy, bool) {
	switch s {
	case "reject":
		return PolicyReject, true
	case "dropOldest":
		return PolicyDropOldest, true
	}
	return 0, false
}

// Options are a queue's options in force: defaults filled in and every value
// clamped to the broker's ceilings (D9).
type Options struct {
	MaxBytes     int64
	MaxLength    int64
	Policy       Policy
	TTLSeconds   int64 // 0 = off
	LeaseSeconds int64
	RetryLimit   int64
	WindowMs     int64 // 0 = no window buffer
	WindowCount  int64
}

// Option presence bits of an OptionSet.
const (
	HasMaxBytes uint16 = 1 << iota
	HasMaxLength
	HasPolicy
	HasTTLSeconds
	HasLeaseSeconds
	HasRetryLimit
	HasWindowBuffer
)

// OptionSet is a declaration as sent: a value counts only when its bit is in
// Has. Configure replaces the declaration with exactly this (D9, not a merge).
type OptionSet struct {
	Has uint16
	Options
}

// Validate checks the value ranges of D9: numbers are non-negative, and
// maxBytes, maxLength, leaseSeconds and retryLimit are at least 1. (Integrality
// and closed keys are the decoder's job; it can see the JSON.)
func (s *OptionSet) Validate() error {
	type rule struct {
		bit  uint16
		name string
		v    int64
		min  int64
	}
	for _, r := range [...]rule{
		{HasMaxBytes, "maxBytes", s.MaxBytes, 1},
		{HasMaxLength, "maxLength", s.MaxLength, 1},
		{HasTTLSeconds, "ttlSeconds", s.TTLSeconds, 0},
		{HasLeaseSeconds, "leaseSeconds", s.LeaseSeconds, 1},
		{HasRetryLimit, "retryLimit", s.RetryLimit, 1},
		{HasWindowBuffer, "windowBuffer.ms", s.WindowMs, 0},
		{HasWindowBuffer, "windowBuffer.count", s.WindowCount, 0},
	} {
		if s.Has&r.bit != 0 && r.v < r.min {
			return badRequest("options.%s must be an integer of at least %d", r.name, r.min)
		}
	}
	if s.Has&HasPolicy != 0 && s.Policy > PolicyDropOldest {
		return badRequest("options.policy must be reject or dropOldest")
	}
	return nil
}

// Ceilings clamp every option in force (D9).
type Ceilings struct {
	MaxBytes     int64 // default: the broker total
	MaxLength    int64 // 1,000,000
	LeaseSeconds int64 // 3,600
	TTLSeconds   int64 // 86,400
	RetryLimit   int64 // 100
	WindowMs     int64 // 300,000
	WindowCount  int64 // 10,000
}

// Config is the engine's configuration; zero fields take the defaults of
// the specification (docs/engine.md records the ones we chose).
type Config struct {
	// MaxBytes is the broker's total budget, QUEEN_EPHEMERAL_MAX_BYTES: payload
	// bytes plus object charges (docs/engine.md, "What the budgets count").
	MaxBytes int64
	// Defaults are a queue's options when not declared (the tenant defaults):
	// QUEEN_EPHEMERAL_QUEUE_MAX_BYTES, _QUEUE_MAX_LENGTH, _TTL_S, _LEASE_S,
	// _RETRY_LIMIT. Policy defaults to reject and no window buffer.
	Defaults Options
	Ceilings Ceilings
	// GroupIdle forgets a group that neither popped nor acked for this long (D4).
	GroupIdle time.Duration
	// ImplicitIdle collects an empty, unpolled implicit queue (D8).
	ImplicitIdle time.Duration
	// TenantMaxBytes and TenantMaxQueues are the allowance of a tenant without
	// limits of its own (0 = unlimited).
	TenantMaxBytes  int64
	TenantMaxQueues int64
	// Clock, when set, is the only time source and the engine does not tick
	// by itself: the caller calls Tick (tests drive time without sleeping).
	Clock Clock
	// Tick is the timing wheel's resolution (default 10ms).
	Tick time.Duration
	// SweepEvery is how often idle groups and queues are looked for (1s).
	SweepEvery time.Duration
	// Incarnation, when non-zero, replaces the random one (tests only).
	Incarnation uint64
	// SegmentSize is the arena's segment size (default 1 MiB).
	SegmentSize int
	// FreeOSMemory is called when the sweeper has released a meaningful
	// amount of pooled memory, at most once every 30 s of engine time. The
	// default runs runtime/debug.FreeOSMemory on a goroutine of its own, so
	// the timing wheel never waits for it.
	FreeOSMemory func()

	// payloadOnly turns every object charge off, so budgets count payload
	// bytes alone. Tests of the payload rules use it; the charges have
	// tests of their own (docs/engine.md, "What the budgets count").
	payloadOnly bool
}

// Clock tells engine time in nanoseconds.
type Clock interface{ Now() int64 }

// ManualClock is a Clock that moves only when told to.
type ManualClock struct{ t int64 }

// NewManualClock starts a manual clock at a fixed, non-zero instant.
func NewManualClock() *ManualClock { return &ManualClock{t: 1_700_000_000 * int64(time.Second)} }

func (c *ManualClock) Now() int64 { return c.t }

// Add moves the clock forward by d.
func (c *ManualClock) Add(d time.Duration) { c.t += int64(d) }

const (
	mib = 1 << 20
)

// fillDefaults sets every field left zero (or negative) to its default,
// the tenant defaults and the ceilings included.
func (c *Config) fillDefaults() {
	if c.MaxBytes <= 0 {
		c.MaxBytes = 256 * mib
	}
	d := &c.Defaults
	if d.MaxBytes <= 0 {
		d.MaxBytes = 16 * mib
	}
	if d.MaxLength <= 0 {
		d.MaxLength = 10000
	}
	if d.LeaseSeconds <= 0 {
		d.LeaseSeconds = 30
	}
	if d.RetryLimit <= 0 {
		d.RetryLimit = 5
	}
	d.TTLSeconds = max(d.TTLSeconds, 0) // 0 = off
	g := &c.Ceilings
	if g.MaxBytes <= 0 {
		g.MaxBytes = c.MaxBytes
	}
	if g.MaxLength <= 0 {
		g.MaxLength = 1_000_000
	}
	if g.LeaseSeconds <= 0 {
		g.LeaseSeconds = 3600
	}
	if g.TTLSeconds <= 0 {
		g.TTLSeconds = 86400
	}
	if g.RetryLimit <= 0 {
		g.RetryLimit = 100
	}
	if g.WindowMs <= 0 {
		g.WindowMs = 300_000
	}
	if g.WindowCount <= 0 {
		g.WindowCount = 10_000
	}
	if c.GroupIdle <= 0 {
		c.GroupIdle = 300 * time.Second
	}
	if c.ImplicitIdle <= 0 {
		c.ImplicitIdle = 300 * time.Second
	}
	if c.Tick <= 0 {
		c.Tick = 10 * time.Millisecond
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = time.Second
	}
	if c.FreeOSMemory == nil {
		c.FreeOSMemory = func() { go debug.FreeOSMemory() }
	}
}

// Resolve returns the options in force for a declaration as sent: options
// left out take the defaults, and everything is clamped to the ceilings; a
// ttlSeconds of 0 stays off (D9).
func (e *Engine) Resolve(sent OptionSet) Options {
	o := e.cfg.Defaults
	if sent.Has&HasMaxBytes != 0 {
		o.MaxBytes = sent.MaxBytes
	}
	if sent.Has&HasMaxLength != 0 {
		o.MaxLength = sent.MaxLength
	}
	if sent.Has&HasPolicy != 0 {
		o.Policy = sent.Policy
	}
	if sent.Has&HasTTLSeconds != 0 {
		o.TTLSeconds = sent.TTLSeconds
	}
	if sent.Has&HasLeaseSeconds != 0 {
		o.LeaseSeconds = sent.LeaseSeconds
	}
	if sent.Has&HasRetryLimit != 0 {
		o.RetryLimit = sent.RetryLimit
	}
	if sent.Has&HasWindowBuffer != 0 {
		o.WindowMs, o.WindowCount = sent.WindowMs, sent.WindowCount
	}
	g := &e.cfg.Ceilings
	o.MaxBytes = clamp(o.MaxBytes, 1, g.MaxBytes)
	o.MaxLength = clamp(o.MaxLength, 1, g.MaxLength)
	o.LeaseSeconds = clamp(o.LeaseSeconds, 1, g.LeaseSeconds)
	o.RetryLimit = clamp(o.RetryLimit, 1, g.RetryLimit)
	o.TTLSeconds = clamp(o.TTLSeconds, 0, g.TTLSeconds)
	o.WindowMs = clamp(o.WindowMs, 0, g.WindowMs)
	o.WindowCount = clamp(o.WindowCount, 0, g.WindowCount)
	return o
}

func clamp(v, lo, hi int64) int64 {
	return max(lo, min(v, hi))
}

func (o Options) String() string {
	return fmt.Sprintf("maxBytes=%d maxLength=%d policy=%s ttl=%ds lease=%ds retryLimit=%d window=%dms/%d",
		o.MaxBytes, o.MaxLength, o.Policy, o.TTLSeconds, o.LeaseSeconds, o.RetryLimit, o.WindowMs, o.WindowCount)
}
