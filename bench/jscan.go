package bench

import (
	"bytes"
	"errors"
)

// The broker's pop answer is {"queue":Q,"messages":[{"id":..,"payload":..},..]}.
// These helpers walk it without decoding anything into Go values: the load
// tool needs each message's id (to ack it) and the raw payload bytes (to read
// a timestamp or an inbox name), and nothing else.

var errJSON = errors.New("bench: malformed JSON in a pop answer")

// eachMessage calls fn with the raw id (string contents, no quotes) and the
// raw payload of every message of a pop answer and returns their count.
func eachMessage(body []byte, fn func(id, payload []byte)) (int, error) {
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return 0, errJSON
	}
	i++
	for {
		i = skipWS(body, i)
		if i < len(body) && body[i] == '}' {
			return 0, nil // no "messages" key
		}
		key, j, err := readString(body, i)
		if err != nil {
			return 0, err
		}
		i = skipWS(body, j)
		if i >= len(body) || body[i] != ':' {
			return 0, errJSON
		}
		i = skipWS(body, i+1)
		if string(key) == "messages" {
			return eachInArray(body, i, fn)
		}
		if i, err = skipValue(body, i); err != nil {
			return 0, err
		}
		i = skipWS(body, i)
		if i < len(body) && body[i] == ',' {
			i++
		}
	}
}

func eachInArray(body []byte, i int, fn func(id, payload []byte)) (int, error) {
	if i >= len(body) || body[i] != '[' {
		return 0, errJSON
	}
	i++
	n := 0
	for {
		i = skipWS(body, i)
		if i >= len(body) {
			return n, errJSON
		}
		switch body[i] {
		case ']':
			return n, nil
		case ',':
			i++
			continue
		case '{':
		default:
			return n, errJSON
		}
		i++
		var id, payload []byte
		for {
			i = skipWS(body, i)
			if i < len(body) && body[i] == ',' {
				i = skipWS(body, i+1)
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			key, j, err := readString(body, i)
			if err != nil {
				return n, err
			}
			i = skipWS(body, j)
			if i >= len(body) || body[i] != ':' {
				return n, errJSON
			}
			i = skipWS(body, i+1)
			start := i
			if i, err = skipValue(body, i); err != nil {
				return n, err
			}
			switch string(key) {
			case "id":
				if body[start] == '"' {
					id = body[start+1 : i-1]
				}
			case "payload":
				payload = body[start:i]
			}
		}
		fn(id, payload)
		n++
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// readString returns the contents of the string at b[i] (escapes left as
// they are) and the index after its closing quote.
func readString(b []byte, i int) ([]byte, int, error) {
	if i >= len(b) || b[i] != '"' {
		return nil, i, errJSON
	}
	end, err := stringEnd(b, i)
	if err != nil {
		return nil, i, err
	}
	return b[i+1 : end-1], end, nil
}

// stringEnd is the index after the closing quote of the string at b[i].
func stringEnd(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); {
		k := bytes.IndexAny(b[j:], `"\`)
		if k < 0 {
			return 0, errJSON
		}
		j += k
		if b[j] == '"' {
			return j + 1, nil
		}
		j += 2 // an escape: skip the backslash and the byte it escapes
	}
	return 0, errJSON
}

// skipValue is the index after the JSON value at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, errJSON
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := stringEnd(b, j)
				if err != nil {
					return i, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return i, errJSON
	default: // number, true, false, null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
			j++
		}
		if j == i {
			return i, errJSON
		}
		return j, nil
	}
}
