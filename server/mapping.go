package server

// Mapping between the wire's plain values and the engine's: the wire never
// imports the engine (wire/doc.go), so the server translates both ways.
// The presence bits and policy orders agree, which TestWireAndEngineAgreeOnCasts
// pins.

import (
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// optionSet maps the wire's options onto the engine's (the same presence
// bits and policy order; a test pins that).
func optionSet(o wire.Options) engine.OptionSet {
	return engine.OptionSet{
		Has: o.Has,
		Options: engine.Options{
			MaxBytes:     o.MaxBytes,
			MaxLength:    o.MaxLength,
			Policy:       engine.Policy(o.Policy),
			TTLSeconds:   o.TTLSeconds,
			LeaseSeconds: o.LeaseSeconds,
			RetryLimit:   o.RetryLimit,
			WindowMs:     o.WindowMs,
			WindowCount:  o.WindowCount,
		},
	}
}

// wireOptions maps options in force onto the wire's, for the listing.
func wireOptions(o *engine.Options) wire.Options {
	return wire.Options{
		MaxBytes:     o.MaxBytes,
		MaxLength:    o.MaxLength,
		Policy:       wire.Policy(o.Policy),
		TTLSeconds:   o.TTLSeconds,
		LeaseSeconds: o.LeaseSeconds,
		RetryLimit:   o.RetryLimit,
		WindowMs:     o.WindowMs,
		WindowCount:  o.WindowCount,
	}
}

// queueStatus maps one queue of the engine's listing onto the wire's.
func queueStatus(q *engine.QueueInfo) wire.QueueStatus {
	return wire.QueueStatus{
		Name:       q.Name,
		Declared:   q.Declared,
		Depth:      q.Depth,
		Bytes:      q.Bytes,
		Partitions: q.Partitions,
		Groups:     q.Groups,
		Drops:      wire.QueueDrops{Bounds: q.Drops.Bounds, TTL: q.Drops.TTL, Retry: q.Drops.Retry},
		Options:    wireOptions(&q.Options),
	}
}
