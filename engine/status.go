package engine

import "sort"

// Drops are a queue's drop counters by cause (spec: the listing's drops).
type Drops struct{ Bounds, TTL, Retry int64 }

// QueueInfo is one row of the queue listing: gauges read from atomics, with
// no partition lock taken, so it is safe to poll (spec, the status reads).
type QueueInfo struct {
	Name       string
	Declared   bool
	Depth      int64 // pending messages (D5)
	Bytes      int64 // payload bytes held, reclaimable included
	Partitions int
	Groups     int
	Drops      Drops
	Options    Options // in force
}

// Queues appends every live queue of the tenant to dst, sorted by name.
func (e *Engine) Queues(tenant string, dst []QueueInfo) []QueueInfo {
	t, ok := e.tenants.Load(tenant)
	if !ok {
		return dst
	}
	start := len(dst)
	t.queues.Range(func(_ string, q *Queue) bool {
		if q = q.live(); q == nil {
			return true
		}
		dst = append(dst, q.info())
		return true
	})
	rows := dst[start:]
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return dst
}

func (q *Queue) info() QueueInfo {
	return QueueInfo{
		Name:       q.name,
		Declared:   q.declared.Load(),
		Depth:      max(0, q.length.Load()-q.reclaimableMsgs.Load()),
		Bytes:      q.bytes.Load(),
		Partitions: len(q.partitions()),
		Groups:     len(q.groupList()),
		Drops: Drops{
			Bounds: q.drops[CauseBounds].Load(),
			TTL:    q.drops[CauseTTL].Load(),
			Retry:  q.drops[CauseRetry].Load(),
		},
		Options: *q.options(),
	}
}

// PartitionDepth is one partition of a depth read.
type PartitionDepth struct {
	Partition string
	Pending   int64
	Bytes     int64
}

// GroupDepth is one group of a depth read: what it has not settled, and what
// was freed before it ever received it (D5).
type GroupDepth struct {
	Group   string // queue mode is shown as __QUEUE_MODE__
	Pending int64
	Skipped int64
}

// DepthInfo is the depth read of one queue (spec, the status reads). With a
// group, Pending, PartitionsPending and each partition's Pending are that
// group's (a group that does not exist reads as a new one, D5); without,
// they count the queue's pending messages (D3).
type DepthInfo struct {
	Queue             string
	Group             string
	HasGroup          bool
	Declared          bool
	Pending           int64
	PartitionsPending int
	Bytes             int64
	Partitions        []PartitionDepth
	Groups            []GroupDepth
}

// Depth fills d for one queue, reusing its slices. A queue that is not there
// is ErrQueueNotFound (the one 404 of the family). An empty group means no
// group; __QUEUE_MODE__ asks for queue mode.
func (e *Engine) Depth(tenant, queue, groupName string, d *DepthInfo) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	if err := checkOptionalName("group", groupName); err != nil {
		return err
	}
	q := e.lookup(tenant, queue)
	if q == nil {
		return ErrQueueNotFound
	}
	*d = DepthInfo{
		Queue:      queue,
		Group:      groupName,
		HasGroup:   groupName != "",
		Declared:   q.declared.Load(),
		Partitions: d.Partitions[:0],
		Groups:     d.Groups[:0],
	}
	groups := q.groupList()
	var asked *group
	if d.HasGroup {
		asked = q.findGroup(queueModeName(groupName))
	}
	for _, g := range groups {
		name := g.name
		if name == "" {
			name = QueueModeGroup
		}
		d.Groups = append(d.Groups, GroupDepth{Group: name, Skipped: g.skipped.Load()})
	}
	for _, p := range q.partitions() {
		p.mu.Lock()
		pd := PartitionDepth{Partition: p.name, Bytes: p.bytes}
		if d.HasGroup {
			pd.Pending = groupPending(p, asked)
		} else {
			pd.Pending = int64(p.pending())
		}
		for i, g := range groups {
			d.Groups[i].Pending += groupPending(p, g)
		}
		p.mu.Unlock()
		d.Pending += pd.Pending
		d.Bytes += pd.Bytes
		if pd.Pending > 0 {
			d.PartitionsPending++
		}
		d.Partitions = append(d.Partitions, pd)
	}
	return nil
}

// groupPending is what g has not settled in p; p.mu is held. A group with no
// cursor here would start at the oldest message held.
func groupPending(p *partition, g *group) int64 {
	if g != nil {
		if c := p.findCursor(g); c != nil {
			return int64(c.pendingCount())
		}
	}
	return int64(p.held())
}
