package wire

// QueueBody is reset's body, {"queue": string} (spec, reset and delete).
// The shape is closed like the others: any other key is a 400.
type QueueBody struct {
	Queue   []byte
	scratch scratch
}

// Decode parses body into b; refusals are *Error (400,
// ephemeral_bad_request).
func (b *QueueBody) Decode(body []byte) error {
	b.Queue = nil
	b.scratch.reset()
	if err := b.decode(body); err != nil {
		return err
	}
	return nil
}

func (b *QueueBody) decode(body []byte) *Error {
	s := scanner{b: body, what: "reset body", code: CodeBadRequest, decoded: &b.scratch}
	var seen uint16
	err := s.body(func(key []byte) (err *Error) {
		if string(key) != "queue" {
			return s.fail("unknown key %s in the reset body; the only key is queue", quote(key))
		}
		if err = s.once(&seen, 1, key); err == nil {
			err = s.name("queue", &b.Queue, false)
		}
		return err
	})
	if err != nil {
		return err
	}
	if seen == 0 {
		return s.fail("queue is required")
	}
	return nil
}
