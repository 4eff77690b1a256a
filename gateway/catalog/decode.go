package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// The admin routes' bodies are decoded strictly: a field the gateway does
// not know is refused rather than ignored, so that a typo ("messagesPerSec")
// does not silently leave a tenant unlimited. Each refusal names the field.

// DecodePlan decodes the body of the admin route that puts plan name:
//
//	{"features":{"ephemeral":true},"messagesPerPeriod":N,"periodSeconds":N,"messagesPerSecond":N,"parkedSlots":N}
//
// Every field is optional (absent: 0, unlimited; ephemeral false). Unknown
// or repeated fields, numbers that are not whole, negative numbers, and a
// messagesPerPeriod without a periodSeconds are refused with an
// *InvalidError. The name comes from the route, never from the body.
func DecodePlan(name string, body []byte) (Plan, error) {
	if err := checkName("plan name", name); err != nil {
		return Plan{}, err
	}
	p := Plan{Name: name}
	err := eachField("", body, func(field string, v json.RawMessage) error {
		switch field {
		case "features":
			return eachField("features.", v, func(field string, v json.RawMessage) error {
				if field != "features.ephemeral" {
					return invalid("unknown field %q", field)
				}
				return decodeBool(field, v, &p.Features.Ephemeral)
			})
		case "messagesPerPeriod":
			return decodeInt(field, v, &p.MessagesPerPeriod)
		case "periodSeconds":
			return decodeInt(field, v, &p.PeriodSeconds)
		case "messagesPerSecond":
			return decodeInt(field, v, &p.MessagesPerSecond)
		case "parkedSlots":
			return decodeInt(field, v, &p.ParkedSlots)
		}
		return invalid("unknown field %q", field)
	})
	if err != nil {
		return Plan{}, err
	}
	if err := p.Validate(); err != nil {
		return Plan{}, err
	}
	return p, nil
}

// DecodeTenant decodes the body of the admin route that puts tenant name:
// {"plan":"name"}, the plan required and a valid name.
func DecodeTenant(name string, body []byte) (Tenant, error) {
	if err := checkName("tenant name", name); err != nil {
		return Tenant{}, err
	}
	t := Tenant{Name: name}
	seen := false
	err := eachField("", body, func(field string, v json.RawMessage) error {
		if field != "plan" {
			return invalid("unknown field %q", field)
		}
		seen = true
		if v[0] != '"' || json.Unmarshal(v, &t.Plan) != nil {
			return invalid("plan must be a string, got %s", shown(v))
		}
		return nil
	})
	if err != nil {
		return Tenant{}, err
	}
	if !seen {
		return Tenant{}, invalid("plan is required")
	}
	if err := t.Validate(); err != nil {
		return Tenant{}, err
	}
	return t, nil
}

// eachField walks the JSON object data, calling fn with each field's name
// (after prefix) and raw value, in the order written. It refuses anything
// but one object, and a field given twice.
func eachField(prefix string, data []byte, fn func(field string, v json.RawMessage) error) error {
	what := "the body"
	if prefix != "" {
		what = prefix[:len(prefix)-1]
	}
	notObject := invalid("%s must be a JSON object", what)
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return syntaxError(what, err, notObject)
	} else if tok != json.Delim('{') {
		return notObject
	}
	// Past the opening brace, running out of input is ending early.
	inside := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return syntaxError(what, err, notObject)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return inside(err)
		}
		key, ok := tok.(string) // the decoder refuses a key that is not a string
		if !ok {
			return notObject
		}
		field := prefix + key
		if seen[field] {
			return invalid("duplicate field %q", field)
		}
		seen[field] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return inside(err)
		}
		if err := fn(field, v); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return inside(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("%s must hold one JSON object and nothing after it", what)
	}
	return nil
}

// syntaxError turns a decoding failure into a refusal: empty input is not
// an object; malformed input is not JSON, and says where.
func syntaxError(what string, err, notObject error) error {
	if errors.Is(err, io.EOF) {
		return notObject
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return invalid("%s is not valid JSON: it ends early", what)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return invalid("%s is not valid JSON at byte %d: %s", what, se.Offset, se.Error())
	}
	return invalid("%s is not valid JSON: %s", what, err.Error())
}

// decodeInt accepts a JSON number spelled as a whole number (no fraction,
// no exponent, no quotes) that fits int64. The sign is checked by
// Plan.Validate, so that the message is the same for both paths.
func decodeInt(field string, v json.RawMessage, dst *int64) error {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return invalid("%s is out of range", field)
		}
		return invalid("%s must be a whole number, got %s", field, shown(v))
	}
	*dst = n
	return nil
}

func decodeBool(field string, v json.RawMessage, dst *bool) error {
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return invalid("%s must be true or false, got %s", field, shown(v))
	}
	return nil
}

// shown is a refused value as quoted in a message, cut short: the message
// goes back to the client, who sent the value, so only its size matters.
func shown(v json.RawMessage) string {
	n := 40
	if len(v) <= n {
		return string(v)
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return string(v[:n]) + "..."
}
