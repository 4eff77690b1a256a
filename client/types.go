package client

import (
	"encoding/json"
	"time"
)

// QueueOptions are the options of a declared queue ([Client.Configure]). A
// zero field is not sent, so the broker's default applies to it (ttlSeconds
// 0, the default, is off).
type QueueOptions struct {
	MaxBytes     int64         `json:"maxBytes,omitempty"`
	MaxLength    int           `json:"maxLength,omitempty"`
	Policy       string        `json:"policy,omitempty"` // PolicyReject or PolicyDropOldest
	TTLSeconds   int           `json:"ttlSeconds,omitempty"`
	LeaseSeconds int           `json:"leaseSeconds,omitempty"`
	RetryLimit   int           `json:"retryLimit,omitempty"`
	WindowBuffer *WindowBuffer `json:"windowBuffer,omitempty"`
}

// The two bound policies.
const (
	PolicyReject     = "reject"
	PolicyDropOldest = "dropOldest"
)

// WindowBuffer lets a waiting pop fatten its batch: up to Count messages or
// MS milliseconds, bounded by the pop's own timeout.
type WindowBuffer struct {
	MS    int `json:"ms"`
	Count int `json:"count"`
}

// ConfigureResult is the stored declaration: the options as the broker
// echoed them (what was sent), typed as the listing's are.
type ConfigureResult struct {
	Queue   string       `json:"queue"`
	Options QueueOptions `json:"options"`
}

// PushOptions are the options of [Client.Push].
type PushOptions struct {
	// Partition is the partition pushed to; empty is the broker's
	// "Default". FIFO order holds per (queue, partition).
	Partition string
	// Buffered queues the messages client-side; they are sent in batches
	// by the client's [BufferOptions]. See [Client.Push].
	Buffered bool
}

// PushResult answers a push.
type PushResult struct {
	// Pushed is how many messages the broker appended, or, for a buffered
	// push, how many the buffer accepted.
	Pushed int `json:"pushed"`
}

// PopOptions are the options of [Client.Pop].
type PopOptions struct {
	// Partition restricts the pop to one partition; empty is every one.
	Partition string
	// Group is the consumer group; empty is queue mode (one shared
	// cursor). The same group is competing consumers, one group per
	// subscriber is fan-out.
	Group string
	// Batch is the most messages to take; 0 is the broker's default (1).
	Batch int
	// Wait parks the pop until a message arrives or Timeout passes.
	Wait bool
	// Timeout bounds a waiting pop; 0 is the broker's default.
	Timeout time.Duration
	// AutoAck advances the cursor at delivery and keeps no lease
	// (at-most-once).
	AutoAck bool
}

// Message is one popped message.
type Message struct {
	// ID is opaque: pass it back to Ack, never parse or store it.
	ID        string          `json:"id"`
	Partition string          `json:"partition"`
	Attempts  int             `json:"attempts"`
	Payload   json.RawMessage `json:"payload"`
	// Queue is the queue the message was popped from (filled by the SDK).
	Queue string `json:"-"`
}

// Decode unmarshals the payload into v.
func (m Message) Decode(v any) error { return json.Unmarshal(m.Payload, v) }

// PopResult answers a pop; Messages is empty (not nil) when there was
// nothing.
type PopResult struct {
	Queue    string    `json:"queue"`
	Messages []Message `json:"messages"`
}

// The three ack statuses.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusRetry     = "retry"
)

// AckOptions are the options of [Client.Ack].
type AckOptions struct {
	// Group must be the group the pop used; empty is queue mode.
	Group string
	// Status is StatusCompleted (the default), StatusFailed or StatusRetry.
	Status string
}

// The four ack outcomes; none of them is an error.
const (
	OutcomeAcked       = "acked"
	OutcomeRedelivered = "redelivered"
	OutcomeStale       = "stale"
	OutcomeUnknown     = "unknown"
)

// AckResult answers an ack, one element per id, in order.
type AckResult struct {
	Results []AckOutcome `json:"results"`
}

// AckOutcome is the outcome of one id.
type AckOutcome struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
}

// ResetResult answers a reset.
type ResetResult struct {
	Queue   string `json:"queue"`
	Dropped int    `json:"dropped"`
}

// DeleteResult answers a delete.
type DeleteResult struct {
	Queue    string `json:"queue"`
	Deleted  bool   `json:"deleted"`
	Declared bool   `json:"declared"`
}

// QueuesResult is the listing of every queue of the tenant.
type QueuesResult struct {
	Queues    []QueueInfo `json:"queues"`
	Count     int         `json:"count"`
	CellBytes int64       `json:"cellBytes"`
}

// QueueInfo is one queue of the listing, with the options in force.
type QueueInfo struct {
	Queue      string       `json:"queue"`
	Tier       string       `json:"tier"` // "declared" or "implicit"
	Depth      int          `json:"depth"`
	Bytes      int64        `json:"bytes"`
	Partitions int          `json:"partitions"`
	Groups     int          `json:"groups"`
	Drops      Drops        `json:"drops"`
	Options    QueueOptions `json:"options"`
}

// Drops counts messages lost, by cause.
type Drops struct {
	Bounds int64 `json:"bounds"`
	TTL    int64 `json:"ttl"`
	Retry  int64 `json:"retry"`
}

// DepthOptions are the options of [Client.Depth].
type DepthOptions struct {
	// Group reads pending for one group; empty reads the queue.
	Group string
}

// DepthResult is the depth read of one queue.
type DepthResult struct {
	Queue             string           `json:"queue"`
	Group             *string          `json:"group"`
	Tier              string           `json:"tier"`
	Pending           int              `json:"pending"`
	PartitionsPending int              `json:"partitionsPending"`
	Bytes             int64            `json:"bytes"`
	Partitions        []PartitionDepth `json:"partitions"`
	Groups            []GroupDepth     `json:"groups"`
}

// PartitionDepth is one partition of a depth read.
type PartitionDepth struct {
	Partition string `json:"partition"`
	Pending   int    `json:"pending"`
	Bytes     int64  `json:"bytes"`
}

// GroupDepth is one group of a depth read; Skipped counts messages the
// group lost to drops before it received them.
type GroupDepth struct {
	Group   string `json:"group"`
	Pending int    `json:"pending"`
	Skipped int64  `json:"skipped"`
}
