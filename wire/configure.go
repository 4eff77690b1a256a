package wire

// Policy is a queue's bound policy; the values mirror the engine's order.
type Policy uint8

const (
	PolicyReject Policy = iota
	PolicyDropOldest
)

func (p Policy) String() string {
	if p == PolicyDropOldest {
		return "dropOldest"
	}
	return "reject"
}

// Presence bits of Options.Has (the same bits, in the same order, as the
// engine's OptionSet).
const (
	HasMaxBytes uint16 = 1 << iota
	HasMaxLength
	HasPolicy
	HasTTLSeconds
	HasLeaseSeconds
	HasRetryLimit
	HasWindowBuffer
)

// Options are the options a configure body sent: a value counts only when
// its bit is in Has. Options left out take the defaults (D9), which is the
// server's and engine's business, not the wire's.
type Options struct {
	Has          uint16
	MaxBytes     int64
	MaxLength    int64
	Policy       Policy
	TTLSeconds   int64
	LeaseSeconds int64
	RetryLimit   int64
	WindowMs     int64
	WindowCount  int64
}

// ConfigureBody is a decoded configure body (spec, configure; D9):
//
//	{"queue": string, "options"?: {maxBytes, maxLength, policy, ttlSeconds, leaseSeconds, retryLimit, windowBuffer: {ms, count}}}
type ConfigureBody struct {
	Queue   []byte
	Options Options
	// RawOptions is the options object exactly as sent (a sub-slice of the
	// body), for the 201 echo and the store; nil when options was absent or
	// null.
	RawOptions []byte

	scratch scratch
}

// Decode parses body into b; refusals are *Error (400,
// ephemeral_bad_request) and name the offending option.
func (b *ConfigureBody) Decode(body []byte) error {
	*b = ConfigureBody{scratch: b.scratch}
	b.scratch.reset()
	if err := b.decode(body); err != nil {
		return err
	}
	return nil
}

const (
	cfgQueue = 1 << iota
	cfgOptions
)

func (b *ConfigureBody) decode(body []byte) *Error {
	s := scanner{b: body, what: "configure body", code: CodeBadRequest, decoded: &b.scratch}
	var seen uint16
	err := s.body(func(key []byte) (err *Error) {
		switch string(key) {
		case "queue":
			if err = s.once(&seen, cfgQueue, key); err == nil {
				err = s.name("queue", &b.Queue, false)
			}
		case "options":
			if err = s.once(&seen, cfgOptions, key); err == nil {
				start := s.i
				if !s.isNull() {
					if err = options(&s, &b.Options); err == nil {
						b.RawOptions = body[start:s.i]
					}
				}
			}
		default:
			err = s.fail("unknown key %s in the configure body; the keys are queue and options", quote(key))
		}
		return err
	})
	if err != nil {
		return err
	}
	if seen&cfgQueue == 0 {
		return s.fail("queue is required")
	}
	return nil
}

// ParseOptions decodes an options object on its own: the store keeps the
// object as it was sent, and the server resolves the values in force from
// it at boot.
func ParseOptions(raw []byte) (Options, error) {
	var o Options
	s := scanner{b: raw, what: "options", code: CodeBadRequest, decoded: new(scratch)}
	s.ws()
	if err := options(&s, &o); err != nil {
		return Options{}, err
	}
	if err := s.close(); err != nil {
		return Options{}, err
	}
	return o, nil
}

const optionNames = "maxBytes, maxLength, policy, ttlSeconds, leaseSeconds, retryLimit and windowBuffer"

// options reads the closed options object into o.
func options(s *scanner, o *Options) *Error {
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.fail("options must be an object, not %s", s.kind())
	}
	s.i++
	return s.fields(func(key []byte) *Error {
		var bit uint16
		var dst *int64
		var min int64
		var field string // constant, so that reading a number allocates nothing
		switch string(key) {
		case "maxBytes":
			bit, dst, min, field = HasMaxBytes, &o.MaxBytes, 1, "options.maxBytes"
		case "maxLength":
			bit, dst, min, field = HasMaxLength, &o.MaxLength, 1, "options.maxLength"
		case "ttlSeconds":
			bit, dst, field = HasTTLSeconds, &o.TTLSeconds, "options.ttlSeconds"
		case "leaseSeconds":
			bit, dst, min, field = HasLeaseSeconds, &o.LeaseSeconds, 1, "options.leaseSeconds"
		case "retryLimit":
			bit, dst, min, field = HasRetryLimit, &o.RetryLimit, 1, "options.retryLimit"
		case "policy":
			bit = HasPolicy
		case "windowBuffer":
			bit = HasWindowBuffer
		default:
			return s.fail("unknown option %s; the options are %s", quote(key), optionNames)
		}
		if o.Has&bit != 0 {
			return s.fail("options has the key %s twice", quote(key))
		}
		o.Has |= bit
		switch {
		case dst != nil:
			return optionInt(s, field, dst, min)
		case bit == HasPolicy:
			return policy(s, o)
		}
		return windowBuffer(s, o)
	})
}

// optionInt reads a non-negative integer option of at least min (D9).
func optionInt(s *scanner, field string, dst *int64, min int64) *Error {
	v, _, err := s.uint(field, false)
	if err != nil {
		return err
	}
	if v < min {
		return s.fail("%s must be at least %d", field, min)
	}
	*dst = v
	return nil
}

func policy(s *scanner, o *Options) *Error {
	v, _, err := s.str("options.policy", false)
	if err != nil {
		return err
	}
	switch string(v) {
	case "reject":
		o.Policy = PolicyReject
	case "dropOldest":
		o.Policy = PolicyDropOldest
	default:
		return s.fail("options.policy is %s; it must be reject or dropOldest", quote(v))
	}
	return nil
}

// windowBuffer reads {"ms": int, "count": int}: closed, and both required
// (a window with one bound missing would be a guess).
func windowBuffer(s *scanner, o *Options) *Error {
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.fail("options.windowBuffer must be an object {\"ms\": ..., \"count\": ...}, not %s", s.kind())
	}
	s.i++
	var seen uint16
	err := s.fields(func(key []byte) (err *Error) {
		switch string(key) {
		case "ms":
			if err = s.once(&seen, 1, key); err == nil {
				o.WindowMs, _, err = s.uint("options.windowBuffer.ms", false)
			}
		case "count":
			if err = s.once(&seen, 2, key); err == nil {
				o.WindowCount, _, err = s.uint("options.windowBuffer.count", false)
			}
		default:
			err = s.fail("unknown key %s in options.windowBuffer; the keys are ms and count", quote(key))
		}
		return err
	})
	if err != nil {
		return err
	}
	if seen != 3 {
		return s.fail("options.windowBuffer needs both ms and count")
	}
	return nil
}
