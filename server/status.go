package server

import "github.com/queenmq/ephemeral/wire"

// listQueues serves GET /api/v1/ephemeral/queues: every queue of the
// tenant with its gauges and options in force, and the cell's bytes (docs/routes.md,
// queues). Read from memory; no store call. A tenant with
// more than listWholeMax queues gets the listing streamed (streamQueues),
// never held whole.
func (cs *conn) listQueues(req *wire.Request) {
	if cs.s.e.QueueCount(cs.tenant) > listWholeMax {
		if cs.frameLink != nil {
			cs.listQueuesLater(req) // a link's frame: one answer frame
			return
		}
		cs.streamQueues(req)
		return
	}
	cs.ls.queues = cs.s.e.Queues(cs.tenant, cs.ls.queues[:0])
	b := wire.AppendQueuesStart(cs.ls.scratch[:0])
	for i := range cs.ls.queues {
		qs := queueStatus(&cs.ls.queues[i])
		b = wire.AppendQueueStatus(b, i, &qs)
	}
	cs.ls.scratch = wire.AppendQueuesEnd(b, int64(len(cs.ls.queues)), cs.s.e.CellBytes())
	clear(cs.ls.queues) // drop the names until the next read
	cs.answer(req, 200, cs.ls.scratch)
}

// depthRead serves GET /api/v1/ephemeral/queues/:queue/depth?group=: the
// one route of the family that answers 404 (docs/routes.md, queues; D5).
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
	b := wire.AppendDepthStart(cs.ls.scratch[:0], &wire.DepthStatus{
		Queue: name, Group: group, HasGroup: d.HasGroup, Declared: d.Declared,
		Pending: d.Pending, PartitionsPending: d.PartitionsPending, Bytes: d.Bytes,
	})
	for i, p := range d.Partitions {
		b = wire.AppendDepthPartition(b, i, p.Partition, p.Pending, p.Bytes)
	}
	b = wire.AppendDepthGroupsStart(b)
	for i, g := range d.Groups {
		b = wire.AppendDepthGroup(b, i, g.Group, g.Pending, g.Skipped)
	}
	cs.ls.scratch = wire.AppendDepthEnd(b)
	cs.answer(req, 200, cs.ls.scratch)
}
