package engine

import "unsafe"

// AckStatus is what a consumer says of a delivered message.
type AckStatus uint8

const (
	AckCompleted AckStatus = iota // settled
	AckFailed                     // redeliver at once with attempts + 1
	AckRetry                      // the same as failed on this class
)

// ParseAckStatus accepts the spec's three statuses; "" is completed.
func ParseAckStatus(s string) (AckStatus, bool) {
	switch s {
	case "completed", "":
		return AckCompleted, true
	case "failed":
		return AckFailed, true
	case "retry":
		return AckRetry, true
	}
	return 0, false
}

// Outcome is the closed list of ack outcomes (spec, ack).
type Outcome uint8

const (
	OutcomeAcked       Outcome = iota // the lease was yours and the cursor advanced
	OutcomeRedelivered                // put back for the group at once
	OutcomeStale                      // minted by an incarnation that is gone
	OutcomeUnknown                    // no such lease
)

func (o Outcome) String() string {
	switch o {
	case OutcomeAcked:
		return "acked"
	case OutcomeRedelivered:
		return "redelivered"
	case OutcomeStale:
		return "stale"
	}
	return "unknown"
}

// AckItem is one element of an ack call. ID may alias the request buffer;
// it is not kept.
type AckItem struct {
	ID     []byte
	Status AckStatus
}

// Ack settles delivered messages for a group ("" = queue mode), one outcome
// per item appended to out (D2). Consecutive ids of one partition are
// settled under one lock.
func (e *Engine) Ack(tenant, queue, groupName string, items []AckItem, out []Outcome) ([]Outcome, error) {
	return e.AckBy(nil, tenant, queue, groupName, items, out)
}

// AckBy is Ack made by origin by, which the parked pops it completes (a
// lease released) receive in Consumer.Complete.
func (e *Engine) AckBy(by Origin, tenant, queue, groupName string, items []AckItem, out []Outcome) ([]Outcome, error) {
	if e.closed.Load() {
		return out, ErrClosed
	}
	if err := CheckName("queue", queue); err != nil {
		return out, err
	}
	if err := checkOptionalName("group", groupName); err != nil {
		return out, err
	}
	if len(items) > MaxBatch {
		return out, badRequest("acks holds %d items; at most %d are allowed per call", len(items), MaxBatch)
	}
	var g *group
	q := e.lookup(tenant, queue)
	if q != nil {
		g = q.findGroup(queueModeName(groupName))
	}
	now := e.nowNanos()
	var locked *partition
	done := doneList{by: by}
	unlock := func() {
		if locked != nil {
			locked.settleReclaim()
			locked.wakeLocked(&done)
			locked.mu.Unlock()
			locked = nil
		}
	}
	for i := range items {
		kind, pname, seq := e.parseID(bytesString(items[i].ID))
		switch {
		case kind == idStale:
			out = append(out, OutcomeStale)
			continue
		case kind == idForeign:
			out = append(out, OutcomeUnknown)
			continue
		case e.mintedBeforeMove(q, seq):
			out = append(out, OutcomeStale)
			continue
		case g == nil:
			out = append(out, OutcomeUnknown)
			continue
		}
		p := locked
		if p == nil || p.name != pname {
			unlock()
			if p = q.findPartition(pname); p == nil {
				out = append(out, OutcomeUnknown)
				continue
			}
			p.mu.Lock()
			locked = p
		}
		if q.dead.Load() { // deleted, collected or moved since the lookup
			out = append(out, e.goneOutcome(seq))
			continue
		}
		c := p.findCursor(g)
		if c == nil {
			out = append(out, OutcomeUnknown)
			continue
		}
		c.expireDue(now)
		out = append(out, c.ack(seq, items[i].Status))
	}
	unlock()
	done.finish()
	if g != nil {
		g.lastActive.Store(now)
	}
	return out, nil
}

// bytesString views b as a string for a lookup that does not keep it.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// queueModeName maps the shown name of queue mode back to "" (D4).
func queueModeName(g string) string {
	if g == QueueModeGroup {
		return ""
	}
	return g
}
