package wire

// Bodies of the success answers of every route (docs/routes.md), the
// ephemeral family's and the system ones, appended into the caller's
// buffer. Payloads and the options a client sent go out verbatim; names
// and ids are escaped. The server fills the plain values taken here from
// the engine's and the store's: the wire never imports the engine.
//
// Two diagnostic reads write their bodies in the server (server/health.go,
// server/cellstatus.go): /health's cell part and GET /api/v1/system/cell
// are made from the cell membership's view and rows, which the wire does
// not know; the SDKs read neither.

// AppendPushed appends push's 201 body: {"pushed":n}.
func AppendPushed(dst []byte, n int) []byte {
	dst = append(dst, `{"pushed":`...)
	dst = AppendInt(dst, int64(n))
	return append(dst, '}')
}

// AppendPopStart opens pop's 200 body: {"queue":Q,"messages":[ . Follow
// with one AppendPopMessage per message and close with AppendPopEnd.
func AppendPopStart(dst []byte, queue string) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	return append(dst, `,"messages":[`...)
}

// AppendPopMessage appends the i-th (from 0) message of a pop answer:
// {"id":..,"partition":..,"attempts":..,"payload":<payload verbatim>}.
func AppendPopMessage(dst []byte, i int, id []byte, partition string, attempts int, payload []byte) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"partition":`...)
	dst = appendString(dst, partition)
	dst = append(dst, `,"attempts":`...)
	dst = AppendInt(dst, int64(attempts))
	dst = append(dst, `,"payload":`...)
	dst = append(dst, payload...)
	return append(dst, '}')
}

// AppendPopEnd closes a pop answer.
func AppendPopEnd(dst []byte) []byte { return append(dst, "]}"...) }

// AppendAckStart opens ack's 200 body: {"results":[ .
func AppendAckStart(dst []byte) []byte { return append(dst, `{"results":[`...) }

// AppendAckResult appends the i-th (from 0) result: {"id":..,"outcome":..}.
// outcome is one of acked, redelivered, stale, unknown.
func AppendAckResult(dst []byte, i int, id []byte, outcome string) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"outcome":`...)
	dst = appendString(dst, outcome)
	return append(dst, '}')
}

// AppendAckEnd closes an ack answer.
func AppendAckEnd(dst []byte) []byte { return append(dst, "]}"...) }

// AppendConfigured appends configure's 201 body: {"queue":Q,"options":O}
// with the options exactly as sent ({} when none were sent) (D9).
func AppendConfigured(dst []byte, queue string, rawOptions []byte) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"options":`...)
	if len(rawOptions) == 0 {
		return append(dst, "{}}"...)
	}
	dst = append(dst, rawOptions...)
	return append(dst, '}')
}

// AppendReset appends reset's 200 body: {"queue":Q,"dropped":n}.
func AppendReset(dst []byte, queue string, dropped int64) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"dropped":`...)
	dst = AppendInt(dst, dropped)
	return append(dst, '}')
}

// AppendDeleted appends delete's 200 body:
// {"queue":Q,"deleted":bool,"declared":bool}.
func AppendDeleted(dst []byte, queue string, deleted, declared bool) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, queue)
	dst = append(dst, `,"deleted":`...)
	dst = AppendBool(dst, deleted)
	dst = append(dst, `,"declared":`...)
	dst = AppendBool(dst, declared)
	return append(dst, '}')
}

// QueueStatus is one queue of the listing (GET .../queues): its gauges and
// the options in force, as plain values the server fills from the engine's.
type QueueStatus struct {
	Name       string
	Declared   bool // tier "declared", else "implicit"
	Depth      int64
	Bytes      int64
	Partitions int
	Groups     int
	Drops      QueueDrops
	// Options in force: every field is written, Has is not read, and
	// WindowMs 0 is windowBuffer null (no window buffer).
	Options Options
}

// QueueDrops are a queue's drops by cause.
type QueueDrops struct {
	Bounds, TTL, Retry int64
}

// AppendQueuesStart opens the listing's 200 body: {"queues":[ . Follow with
// one AppendQueueStatus per queue and close with AppendQueuesEnd.
func AppendQueuesStart(dst []byte) []byte { return append(dst, `{"queues":[`...) }

// AppendQueueStatus appends the i-th (from 0) queue of the listing.
func AppendQueueStatus(dst []byte, i int, q *QueueStatus) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, q.Name)
	dst = append(dst, `,"tier":`...)
	dst = appendTier(dst, q.Declared)
	dst = append(dst, `,"depth":`...)
	dst = AppendInt(dst, q.Depth)
	dst = append(dst, `,"bytes":`...)
	dst = AppendInt(dst, q.Bytes)
	dst = append(dst, `,"partitions":`...)
	dst = AppendInt(dst, int64(q.Partitions))
	dst = append(dst, `,"groups":`...)
	dst = AppendInt(dst, int64(q.Groups))
	dst = append(dst, `,"drops":{"bounds":`...)
	dst = AppendInt(dst, q.Drops.Bounds)
	dst = append(dst, `,"ttl":`...)
	dst = AppendInt(dst, q.Drops.TTL)
	dst = append(dst, `,"retry":`...)
	dst = AppendInt(dst, q.Drops.Retry)
	dst = append(dst, `},"options":`...)
	dst = appendOptions(dst, &q.Options)
	return append(dst, '}')
}

// AppendQueuesEnd closes the listing: ],"count":n,"cellBytes":n} .
func AppendQueuesEnd(dst []byte, count, cellBytes int64) []byte {
	dst = append(dst, `],"count":`...)
	dst = AppendInt(dst, count)
	dst = append(dst, `,"cellBytes":`...)
	dst = AppendInt(dst, cellBytes)
	return append(dst, '}')
}

func appendTier(dst []byte, declared bool) []byte {
	if declared {
		return append(dst, `"declared"`...)
	}
	return append(dst, `"implicit"`...)
}

// appendOptions writes options in force (D9): every field, and windowBuffer
// null when there is none.
func appendOptions(dst []byte, o *Options) []byte {
	dst = append(dst, `{"maxBytes":`...)
	dst = AppendInt(dst, o.MaxBytes)
	dst = append(dst, `,"maxLength":`...)
	dst = AppendInt(dst, o.MaxLength)
	dst = append(dst, `,"policy":`...)
	dst = appendString(dst, o.Policy.String())
	dst = append(dst, `,"ttlSeconds":`...)
	dst = AppendInt(dst, o.TTLSeconds)
	dst = append(dst, `,"leaseSeconds":`...)
	dst = AppendInt(dst, o.LeaseSeconds)
	dst = append(dst, `,"retryLimit":`...)
	dst = AppendInt(dst, o.RetryLimit)
	dst = append(dst, `,"windowBuffer":`...)
	if o.WindowMs == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"ms":`...)
		dst = AppendInt(dst, o.WindowMs)
		dst = append(dst, `,"count":`...)
		dst = AppendInt(dst, o.WindowCount)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// DepthStatus is the head of a depth read's 200 body (GET
// .../queues/:queue/depth). Queue and Group are written as the request
// named them; without a group, group is null.
type DepthStatus struct {
	Queue             []byte
	Group             []byte
	HasGroup          bool
	Declared          bool
	Pending           int64
	PartitionsPending int
	Bytes             int64
}

// AppendDepthStart opens a depth read's body, up to "partitions":[ .
// Follow with one AppendDepthPartition per partition, then
// AppendDepthGroupsStart, one AppendDepthGroup per group, and AppendDepthEnd.
func AppendDepthStart(dst []byte, d *DepthStatus) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendString(dst, d.Queue)
	dst = append(dst, `,"group":`...)
	if d.HasGroup {
		dst = appendString(dst, d.Group)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"tier":`...)
	dst = appendTier(dst, d.Declared)
	dst = append(dst, `,"pending":`...)
	dst = AppendInt(dst, d.Pending)
	dst = append(dst, `,"partitionsPending":`...)
	dst = AppendInt(dst, int64(d.PartitionsPending))
	dst = append(dst, `,"bytes":`...)
	dst = AppendInt(dst, d.Bytes)
	return append(dst, `,"partitions":[`...)
}

// AppendDepthPartition appends the i-th (from 0) partition:
// {"partition":P,"pending":n,"bytes":n}.
func AppendDepthPartition(dst []byte, i int, partition string, pending, bytes int64) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"partition":`...)
	dst = appendString(dst, partition)
	dst = append(dst, `,"pending":`...)
	dst = AppendInt(dst, pending)
	dst = append(dst, `,"bytes":`...)
	dst = AppendInt(dst, bytes)
	return append(dst, '}')
}

// AppendDepthGroupsStart closes the partitions and opens the groups.
func AppendDepthGroupsStart(dst []byte) []byte { return append(dst, `],"groups":[`...) }

// AppendDepthGroup appends the i-th (from 0) group:
// {"group":G,"pending":n,"skipped":n}.
func AppendDepthGroup(dst []byte, i int, group string, pending, skipped int64) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"group":`...)
	dst = appendString(dst, group)
	dst = append(dst, `,"pending":`...)
	dst = AppendInt(dst, pending)
	dst = append(dst, `,"skipped":`...)
	dst = AppendInt(dst, skipped)
	return append(dst, '}')
}

// AppendDepthEnd closes a depth read's body.
func AppendDepthEnd(dst []byte) []byte { return append(dst, "]}"...) }

// AppendKillSwitch appends the kill switch's 200 body (GET and POST of the
// system route): {"enabled":bool,"retryAfterSeconds":n}.
func AppendKillSwitch(dst []byte, enabled bool, retryAfterSeconds int64) []byte {
	dst = append(dst, `{"enabled":`...)
	dst = AppendBool(dst, enabled)
	dst = append(dst, `,"retryAfterSeconds":`...)
	dst = AppendInt(dst, retryAfterSeconds)
	return append(dst, '}')
}

// AppendGrant appends a grant's 200 body (GET and PUT):
// {"tenant":T,"maxBytes":n,"maxQueues":n,"messagesPerSecond":n}.
func AppendGrant(dst []byte, tenant string, maxBytes, maxQueues, messagesPerSecond int64) []byte {
	dst = append(dst, `{"tenant":`...)
	dst = appendString(dst, tenant)
	dst = append(dst, `,"maxBytes":`...)
	dst = AppendInt(dst, maxBytes)
	dst = append(dst, `,"maxQueues":`...)
	dst = AppendInt(dst, maxQueues)
	dst = append(dst, `,"messagesPerSecond":`...)
	dst = AppendInt(dst, messagesPerSecond)
	return append(dst, '}')
}

// AppendGrantDeleted appends a grant delete's 200 body:
// {"tenant":T,"deleted":bool}.
func AppendGrantDeleted(dst []byte, tenant string, deleted bool) []byte {
	dst = append(dst, `{"tenant":`...)
	dst = appendString(dst, tenant)
	dst = append(dst, `,"deleted":`...)
	dst = AppendBool(dst, deleted)
	return append(dst, '}')
}
