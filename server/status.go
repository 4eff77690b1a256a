package server

import (
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// listQueues serves GET /api/v1/ephemeral/queues: every queue of the
// tenant with its gauges and options in force, and the cell's bytes (spec,
// the two status reads). Read from memory; no store call. A tenant with
// more than listWholeMax queues gets the listing streamed (streamQueues),
// never held whole.
func (cs *conn) listQueues(req *wire.Request) {
	if cs.s.e.QueueCount(cs.tenant) > listWholeMax {
		cs.streamQueues(req)
		return
	}
	cs.ls.queues = cs.s.e.Queues(cs.tenant, cs.ls.queues[:0])
	b := append(cs.ls.scratch[:0], `{"queues":[`...)
	for i := range cs.ls.queues {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQueueInfo(b, &cs.ls.queues[i])
	}
	b = append(b, `],"count":`...)
	b = wire.AppendInt(b, int64(len(cs.ls.queues)))
	b = append(b, `,"cellBytes":`...)
	b = wire.AppendInt(b, cs.s.e.CellBytes())
	cs.ls.scratch = append(b, '}')
	clear(cs.ls.queues) // drop the names until the next read
	cs.answer(req, 200, cs.ls.scratch)
}

// appendQueueInfo appends one queue of the listing.
func appendQueueInfo(b []byte, q *engine.QueueInfo) []byte {
	b = append(b, `{"queue":`...)
	b = wire.AppendString(b, q.Name)
	b = append(b, `,"tier":`...)
	b = appendTier(b, q.Declared)
	b = append(b, `,"depth":`...)
	b = wire.AppendInt(b, q.Depth)
	b = append(b, `,"bytes":`...)
	b = wire.AppendInt(b, q.Bytes)
	b = append(b, `,"partitions":`...)
	b = wire.AppendInt(b, int64(q.Partitions))
	b = append(b, `,"groups":`...)
	b = wire.AppendInt(b, int64(q.Groups))
	b = append(b, `,"drops":{"bounds":`...)
	b = wire.AppendInt(b, q.Drops.Bounds)
	b = append(b, `,"ttl":`...)
	b = wire.AppendInt(b, q.Drops.TTL)
	b = append(b, `,"retry":`...)
	b = wire.AppendInt(b, q.Drops.Retry)
	b = append(b, `},"options":`...)
	b = appendOptions(b, &q.Options)
	return append(b, '}')
}

func appendTier(b []byte, declared bool) []byte {
	if declared {
		return append(b, `"declared"`...)
	}
	return append(b, `"implicit"`...)
}

// appendOptions writes the options in force (D9): windowBuffer is null when
// there is none.
func appendOptions(b []byte, o *engine.Options) []byte {
	b = append(b, `{"maxBytes":`...)
	b = wire.AppendInt(b, o.MaxBytes)
	b = append(b, `,"maxLength":`...)
	b = wire.AppendInt(b, o.MaxLength)
	b = append(b, `,"policy":`...)
	b = wire.AppendString(b, o.Policy.String())
	b = append(b, `,"ttlSeconds":`...)
	b = wire.AppendInt(b, o.TTLSeconds)
	b = append(b, `,"leaseSeconds":`...)
	b = wire.AppendInt(b, o.LeaseSeconds)
	b = append(b, `,"retryLimit":`...)
	b = wire.AppendInt(b, o.RetryLimit)
	b = append(b, `,"windowBuffer":`...)
	if o.WindowMs == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"ms":`...)
		b = wire.AppendInt(b, o.WindowMs)
		b = append(b, `,"count":`...)
		b = wire.AppendInt(b, o.WindowCount)
		b = append(b, '}')
	}
	return append(b, '}')
}

// depthRead serves GET /api/v1/ephemeral/queues/:queue/depth?group=: the
// one route of the family that answers 404 (spec, the status reads; D5).
func (cs *conn) depthRead(req *wire.Request, name []byte) {
	if err := wire.CheckName("queue", name); err != nil {
		cs.refuse(req, err)
		return
	}
	var group []byte
	for it := req.Query().Params(); it.Next(); {
		if it.NameIs("group") {
			group = it.Value()
		}
	}
	if len(group) > 0 {
		if err := wire.CheckName("group", group); err != nil {
			cs.refuse(req, err)
			return
		}
	}
	d := &cs.ls.depth
	if err := cs.s.e.Depth(cs.tenant, bytesString(name), bytesString(group), d); err != nil {
		cs.refuse(req, err)
		return
	}
	b := append(cs.ls.scratch[:0], `{"queue":`...)
	b = wire.AppendStringBytes(b, name)
	b = append(b, `,"group":`...)
	if d.HasGroup {
		b = wire.AppendStringBytes(b, group)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"tier":`...)
	b = appendTier(b, d.Declared)
	b = append(b, `,"pending":`...)
	b = wire.AppendInt(b, d.Pending)
	b = append(b, `,"partitionsPending":`...)
	b = wire.AppendInt(b, int64(d.PartitionsPending))
	b = append(b, `,"bytes":`...)
	b = wire.AppendInt(b, d.Bytes)
	b = append(b, `,"partitions":[`...)
	for i, p := range d.Partitions {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"partition":`...)
		b = wire.AppendString(b, p.Partition)
		b = append(b, `,"pending":`...)
		b = wire.AppendInt(b, p.Pending)
		b = append(b, `,"bytes":`...)
		b = wire.AppendInt(b, p.Bytes)
		b = append(b, '}')
	}
	b = append(b, `],"groups":[`...)
	for i, g := range d.Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"group":`...)
		b = wire.AppendString(b, g.Group)
		b = append(b, `,"pending":`...)
		b = wire.AppendInt(b, g.Pending)
		b = append(b, `,"skipped":`...)
		b = wire.AppendInt(b, g.Skipped)
		b = append(b, '}')
	}
	cs.ls.scratch = append(b, "]}"...)
	cs.answer(req, 200, cs.ls.scratch)
}
