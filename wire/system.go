package wire

// Bodies of the system routes (D15). Their refusals use the system code
// bad_request, not the ephemeral family's.

// KillSwitchBody is {"enabled": bool, "retryAfterSeconds"?: int}.
type KillSwitchBody struct {
	Enabled bool
	// RetryAfterSeconds is 0 when absent or null.
	RetryAfterSeconds int64
}

// Decode parses body; refusals are *Error (400, bad_request).
func (k *KillSwitchBody) Decode(body []byte) error {
	*k = KillSwitchBody{}
	s := scanner{b: body, what: "kill switch body", code: CodeSystemBadRequest, decoded: new(scratch)}
	if err := k.decode(&s); err != nil {
		return err
	}
	return nil
}

func (k *KillSwitchBody) decode(s *scanner) *Error {
	var seen uint16
	err := s.body(func(key []byte) (err *Error) {
		switch string(key) {
		case "enabled":
			if err = s.once(&seen, 1, key); err == nil {
				k.Enabled, err = s.bool("enabled")
			}
		case "retryAfterSeconds":
			if err = s.once(&seen, 2, key); err == nil {
				k.RetryAfterSeconds, _, err = s.uint("retryAfterSeconds", true)
			}
		default:
			err = s.fail("unknown key %s in the kill switch body; the keys are enabled and retryAfterSeconds", quote(key))
		}
		return err
	})
	if err != nil {
		return err
	}
	if seen&1 == 0 {
		return s.fail("enabled is required")
	}
	return nil
}

// Presence bits of GrantBody.Has.
const (
	HasGrantMaxBytes uint8 = 1 << iota
	HasGrantMaxQueues
	HasGrantMessagesPerSecond
)

// GrantBody is {"maxBytes"?, "maxQueues"?, "messagesPerSecond"?}: each a
// non-negative integer, 0 meaning unlimited (D14). A field left out is 0
// too; Has says which were sent.
type GrantBody struct {
	Has               uint8
	MaxBytes          int64
	MaxQueues         int64
	MessagesPerSecond int64
}

// Decode parses body; refusals are *Error (400, bad_request).
func (g *GrantBody) Decode(body []byte) error {
	*g = GrantBody{}
	s := scanner{b: body, what: "grant body", code: CodeSystemBadRequest, decoded: new(scratch)}
	if err := g.decode(&s); err != nil {
		return err
	}
	return nil
}

func (g *GrantBody) decode(s *scanner) *Error {
	return s.body(func(key []byte) (err *Error) {
		var bit uint8
		var dst *int64
		var field string
		switch string(key) {
		case "maxBytes":
			bit, dst, field = HasGrantMaxBytes, &g.MaxBytes, "maxBytes"
		case "maxQueues":
			bit, dst, field = HasGrantMaxQueues, &g.MaxQueues, "maxQueues"
		case "messagesPerSecond":
			bit, dst, field = HasGrantMessagesPerSecond, &g.MessagesPerSecond, "messagesPerSecond"
		default:
			return s.fail("unknown key %s in the grant body; the keys are maxBytes, maxQueues and messagesPerSecond", quote(key))
		}
		if g.Has&bit != 0 {
			return s.fail("the grant body has the key %s twice", quote(key))
		}
		g.Has |= bit
		*dst, _, err = s.uint(field, false)
		return err
	})
}
