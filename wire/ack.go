package wire

// AckStatus is an ack element's status. The values mirror the engine's
// order (completed, failed, retry) so that the server's mapping is a cast
// it can check in a test.
type AckStatus uint8

const (
	AckCompleted AckStatus = iota // the default
	AckFailed
	AckRetry
)

func (s AckStatus) String() string {
	switch s {
	case AckFailed:
		return "failed"
	case AckRetry:
		return "retry"
	}
	return "completed"
}

// AckItem is one element of an ack body. ID is a sub-slice of the body,
// decoded (into the AckBody's scratch) only when it holds an escape.
type AckItem struct {
	ID     []byte
	Status AckStatus
}

// AckBody is a decoded ack body (spec, ack; D2):
//
//	{"queue": string, "group"?: string, "acks": [{"id": string, "status"?: string, "error"?: string}, ...]}
//
// At most MaxBatch elements. An element without a string id, with a status
// other than completed, failed or retry, or with an unknown key refuses the
// whole call. error is accepted and ignored. Reuse one AckBody: Acks keeps
// its capacity across calls.
type AckBody struct {
	Queue []byte
	// Group is empty when absent, null or "" (queue mode).
	Group []byte
	Acks  []AckItem

	scratch scratch
}

const (
	ackQueue = 1 << iota
	ackGroup
	ackAcks
	ackID
	ackStatus
	ackError
)

// Decode parses body into b, replacing what it held; refusals are *Error
// (400, ephemeral_bad_request).
func (b *AckBody) Decode(body []byte) error {
	b.Queue, b.Group = nil, nil
	clear(b.Acks)
	b.Acks = b.Acks[:0]
	b.scratch.reset()
	if err := b.decode(body); err != nil {
		return err
	}
	return nil
}

func (b *AckBody) decode(body []byte) *Error {
	s := scanner{b: body, what: "ack body", code: CodeBadRequest, decoded: &b.scratch}
	var seen uint16
	err := s.body(func(key []byte) (err *Error) {
		switch string(key) {
		case "queue":
			if err = s.once(&seen, ackQueue, key); err == nil {
				err = s.name("queue", &b.Queue, false)
			}
		case "group":
			if err = s.once(&seen, ackGroup, key); err == nil {
				err = s.name("group", &b.Group, true)
			}
		case "acks":
			if err = s.once(&seen, ackAcks, key); err == nil {
				err = b.acks(&s)
			}
		default:
			err = s.fail("unknown key %s in the ack body; the keys are queue, group and acks", quote(key))
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case seen&ackQueue == 0:
		return s.fail("queue is required")
	case seen&ackAcks == 0:
		return s.fail("acks is required")
	}
	return nil
}

func (b *AckBody) acks(s *scanner) *Error {
	return s.batch("acks", func(n int) *Error {
		item, err := b.item(s, n)
		if err == nil {
			b.Acks = append(b.Acks, item)
		}
		return err
	})
}

// item reads one {"id": .., "status"?: .., "error"?: ..}.
func (b *AckBody) item(s *scanner, n int) (AckItem, *Error) {
	var item AckItem
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return item, s.fail(`acks[%d] must be an object {"id": ..., "status": ...}, not %s`, n, s.kind())
	}
	s.i++
	var seen uint16
	for m := 0; ; m++ {
		key, ok, err := s.member(m)
		if err != nil {
			return item, err
		}
		if !ok {
			break
		}
		switch string(key) {
		case "id":
			if err = s.once(&seen, ackID, key); err == nil {
				if s.i < len(s.b) && s.b[s.i] == '"' {
					item.ID, err = s.stringLit()
				} else {
					err = s.fail("acks[%d].id must be a string, not %s", n, s.kind())
				}
			}
		case "status":
			if err = s.once(&seen, ackStatus, key); err == nil {
				item.Status, err = readAckStatus(s, n)
			}
		case "error":
			if err = s.once(&seen, ackError, key); err == nil {
				if s.i < len(s.b) && s.b[s.i] == '"' {
					_, _, err = s.rawString() // accepted and ignored (spec, ack)
				} else if !s.isNull() {
					err = s.fail("acks[%d].error must be a string, not %s", n, s.kind())
				}
			}
		default:
			err = s.fail("acks[%d] has the unknown key %s; the keys are id, status and error", n, quote(key))
		}
		if err != nil {
			return item, err
		}
	}
	if seen&ackID == 0 {
		return item, s.fail("acks[%d] has no id", n)
	}
	return item, nil
}

// readAckStatus reads a status: completed, failed or retry; null means the
// default. "" is refused: it is none of the three (D2).
func readAckStatus(s *scanner, n int) (AckStatus, *Error) {
	if s.isNull() {
		return AckCompleted, nil
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, s.fail("acks[%d].status must be completed, failed or retry, not %s", n, s.kind())
	}
	v, err := s.stringLit()
	if err != nil {
		return 0, err
	}
	switch string(v) {
	case "completed":
		return AckCompleted, nil
	case "failed":
		return AckFailed, nil
	case "retry":
		return AckRetry, nil
	}
	return 0, s.fail("acks[%d].status is %s; it must be completed, failed or retry", n, quote(v))
}
