package wire

// PushBody is a decoded push body (spec, push; D10):
//
//	{"queue": string, "partition"?: string, "messages": [{"payload": <any JSON>}, ...]}
//
// The shape is closed: an unknown key, at the top or in a message, is a
// 400, and so is a duplicate key. Keep one PushBody per connection (or
// loop) and call Decode for each request: its slices are reused, so
// decoding allocates nothing per message.
type PushBody struct {
	// Queue is the queue name, decoded, checked (D10).
	Queue []byte
	// Partition is empty when absent, null or "" (the server pushes to
	// Default then), else a checked name.
	Partition []byte
	// Payloads holds each message's payload exactly as sent: a sub-slice
	// of the body, validated as JSON but never decoded (P2). null is a
	// payload too (the four bytes "null").
	Payloads [][]byte

	scratch scratch
}

// Keys of the push body, as bits for duplicate detection.
const (
	pushQueue = 1 << iota
	pushPartition
	pushMessages
)

// Decode parses body into b, replacing what it held. Every refusal is an
// *Error with status 400 and code ephemeral_bad_request. The slices in b
// point into body (or b's own scratch) and are valid while body is.
func (b *PushBody) Decode(body []byte) error {
	b.Queue, b.Partition = nil, nil
	clear(b.Payloads) // drop references to an old body
	b.Payloads = b.Payloads[:0]
	b.scratch.reset()
	if err := b.decode(body); err != nil {
		return err
	}
	return nil
}

func (b *PushBody) decode(body []byte) *Error {
	s := scanner{b: body, what: "push body", code: CodeBadRequest, decoded: &b.scratch}
	var seen uint16
	err := s.body(func(key []byte) (err *Error) {
		switch string(key) {
		case "queue":
			if err = s.once(&seen, pushQueue, key); err == nil {
				err = s.name("queue", &b.Queue, false)
			}
		case "partition":
			if err = s.once(&seen, pushPartition, key); err == nil {
				err = s.name("partition", &b.Partition, true)
			}
		case "messages":
			if err = s.once(&seen, pushMessages, key); err == nil {
				err = b.messages(&s)
			}
		default:
			err = s.fail("unknown key %s in the push body; the keys are queue, partition and messages", quote(key))
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case seen&pushQueue == 0:
		return s.fail("queue is required")
	case seen&pushMessages == 0:
		return s.fail("messages is required")
	}
	return nil
}

// messages reads the messages array: at most MaxBatch elements, each
// exactly {"payload": <value>}.
func (b *PushBody) messages(s *scanner) *Error {
	return s.batch("messages", func(n int) *Error { return b.message(s, n) })
}

// message reads one {"payload": <value>} and keeps the value's bytes.
func (b *PushBody) message(s *scanner, n int) *Error {
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.fail(`messages[%d] must be an object {"payload": ...}, not %s`, n, s.kind())
	}
	// Fast path: compact JSON, as most clients write it.
	if rest := s.b[s.i:]; len(rest) > len(compactMessage) && string(rest[:len(compactMessage)]) == compactMessage {
		s.i += len(compactMessage)
		payload, err := s.span()
		if err != nil {
			return err
		}
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			b.Payloads = append(b.Payloads, payload)
			return nil
		}
		// Something follows the payload: let the general path word it.
		return b.messageRest(s, n, payload)
	}
	s.i++
	return b.messageRest(s, n, nil)
}

// compactMessage is how a message starts in compact JSON.
const compactMessage = `{"payload":`

// messageRest reads the members of a message object after its '{' (and,
// when payload is set, after its first member).
func (b *PushBody) messageRest(s *scanner, n int, payload []byte) *Error {
	m := 0
	if payload != nil {
		m = 1
	}
	for ; ; m++ {
		key, ok, err := s.member(m)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if string(key) != "payload" {
			return s.fail(`messages[%d] has the key %s; a message is {"payload": ...} and nothing else`, n, quote(key))
		}
		if payload != nil {
			return s.fail("messages[%d] has the key \"payload\" twice", n)
		}
		if payload, err = s.span(); err != nil {
			return err
		}
	}
	if payload == nil {
		return s.fail(`messages[%d] has no payload; a message is {"payload": ...}`, n)
	}
	b.Payloads = append(b.Payloads, payload)
	return nil
}
