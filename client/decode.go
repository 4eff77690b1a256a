package client

import (
	"encoding/json"
	"errors"
	"strconv"
	"unsafe"
)

// The push and pop answers are read by hand, so that reading them costs
// the results the caller gets and nothing more (P2): a pop answer is
// copied once into a string (the messages' ids and partitions are slices
// of it) and once into bytes (their payloads are slices of that), whatever
// the batch. Keys other than the ones read are skipped (the spec lets the
// broker add keys). encoding/json reads every other answer.

var errAnswer = errors.New("malformed JSON answer")

// decodePushed reads the push answer {"pushed": n}.
func decodePushed(data []byte) (int, error) {
	n := -1
	_, err := eachKey(data, 0, func(key []byte, at int) (int, error) {
		if string(key) != "pushed" {
			return skipValue(data, at)
		}
		end := at
		for end < len(data) && data[end] >= '0' && data[end] <= '9' {
			end++
		}
		v, err := strconv.Atoi(string(data[at:end]))
		if err != nil {
			return 0, errAnswer
		}
		n = v
		return end, nil
	})
	if err == nil && n < 0 {
		err = errAnswer
	}
	return max(n, 0), err
}

// decodePop reads a pop answer into out; every message gets Queue = queue
// (as does out), and no messages is an empty, non-nil slice.
func decodePop(data []byte, queue string, out *PopResult) error {
	out.Queue = queue
	out.Messages = []Message{}
	var str string // the answer as a string, made on the first message
	var raw []byte // the answer copied, made on the first message
	_, err := eachKey(data, 0, func(key []byte, at int) (int, error) {
		if string(key) != "messages" {
			return skipValue(data, at)
		}
		if at >= len(data) || data[at] != '[' {
			return 0, errAnswer
		}
		out.Messages = []Message{}
		count := countElements(data, at)
		if count == 0 {
			// Empty, or malformed: the messages would be slices of
			// copies not made, so a malformed array is refused here.
			return eachElement(data, at, func(int) (int, error) { return 0, errAnswer })
		}
		out.Messages = make([]Message, 0, count)
		// One copy of the answer serves as the payloads' bytes and,
		// viewed as a string, the ids' and partitions': a message's
		// payload never overlaps another field's bytes, and it is
		// capped, so writing into it (even appending) changes no
		// string (P2: a pop answer is copied once).
		raw = append([]byte(nil), data...)
		str = unsafe.String(unsafe.SliceData(raw), len(raw))
		return eachElement(data, at, func(at int) (int, error) {
			var m Message
			m.Queue = queue
			next, err := eachKey(data, at, func(key []byte, at int) (int, error) {
				switch string(key) {
				case "id", "partition":
					s, next, err := readString(data, str, at)
					if key[0] == 'i' {
						m.ID = s
					} else {
						m.Partition = s
					}
					return next, err
				case "attempts":
					end := at
					if end < len(data) && data[end] == '-' {
						end++
					}
					for end < len(data) && data[end] >= '0' && data[end] <= '9' {
						end++
					}
					v, err := strconv.Atoi(string(data[at:end]))
					m.Attempts = v
					return end, err
				case "payload":
					end, err := skipValue(data, at)
					if err != nil {
						return 0, err
					}
					m.Payload = json.RawMessage(raw[at:end:end])
					return end, nil
				}
				return skipValue(data, at)
			})
			out.Messages = append(out.Messages, m)
			return next, err
		})
	})
	return err
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// eachKey walks the object at data[i:] (after white space), calling f with
// each key and the index of its value; f answers the index after the
// value. It answers the index after the object.
func eachKey(data []byte, i int, f func(key []byte, at int) (int, error)) (int, error) {
	i = skipWS(data, i)
	if i >= len(data) || data[i] != '{' {
		return 0, errAnswer
	}
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return 0, errAnswer
		}
		end, escaped := stringEnd(data, i)
		if end < 0 {
			return 0, errAnswer
		}
		key := data[i+1 : end]
		if escaped {
			// The broker writes its keys plain, but JSON lets a key be
			// escaped: it is read decoded, as encoding/json reads it, so
			// that an escaped form of a key read here is that key and
			// any other is skipped. (Refusing every escaped key refused
			// a whole answer for a key nobody reads: FuzzDecodePop,
			// {"\\":"","messages":[]}.)
			var k string
			if json.Unmarshal(data[i:end+1], &k) != nil {
				return 0, errAnswer
			}
			key = []byte(k)
		}
		i = skipWS(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return 0, errAnswer
		}
		next, err := f(key, skipWS(data, i+1))
		if err != nil {
			return 0, err
		}
		i = skipWS(data, next)
		if i >= len(data) {
			return 0, errAnswer
		}
		if data[i] == '}' {
			return i + 1, nil
		}
		if data[i] != ',' {
			return 0, errAnswer
		}
		i = skipWS(data, i+1)
	}
}

// eachElement walks the array at data[i], calling f with each element's
// index; f answers the index after it.
func eachElement(data []byte, i int, f func(at int) (int, error)) (int, error) {
	i = skipWS(data, i+1)
	if i < len(data) && data[i] == ']' {
		return i + 1, nil
	}
	for {
		next, err := f(i)
		if err != nil {
			return 0, err
		}
		i = skipWS(data, next)
		if i >= len(data) {
			return 0, errAnswer
		}
		if data[i] == ']' {
			return i + 1, nil
		}
		if data[i] != ',' {
			return 0, errAnswer
		}
		i = skipWS(data, i+1)
	}
}

// countElements counts the elements of the array at data[i] (0 when it is
// empty or malformed; the walk that follows finds the malformation).
func countElements(data []byte, i int) int {
	n := 0
	_, err := eachElement(data, i, func(at int) (int, error) {
		n++
		return skipValue(data, at)
	})
	if err != nil {
		return 0
	}
	return n
}

// stringEnd answers the index of the quote closing the string at data[i]
// (-1 if none) and whether the string holds escapes.
func stringEnd(data []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j, escaped
		}
	}
	return -1, escaped
}

// readString reads the string at data[i]: a slice of str (the same bytes
// as data) when it holds no escape, else decoded.
func readString(data []byte, str string, i int) (string, int, error) {
	if i >= len(data) || data[i] != '"' {
		return "", 0, errAnswer
	}
	end, escaped := stringEnd(data, i)
	if end < 0 {
		return "", 0, errAnswer
	}
	if !escaped {
		return str[i+1 : end], end + 1, nil
	}
	var s string
	if err := json.Unmarshal(data[i:end+1], &s); err != nil {
		return "", 0, errAnswer
	}
	return s, end + 1, nil
}

// skipValue answers the index after the JSON value at data[i]. It checks
// structure (brackets, strings), not every literal: the answer comes from
// the broker, which validated the payloads it stores.
func skipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errAnswer
	}
	switch data[i] {
	case '"':
		end, _ := stringEnd(data, i)
		if end < 0 {
			return 0, errAnswer
		}
		return end + 1, nil
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, _ := stringEnd(data, j)
				if end < 0 {
					return 0, errAnswer
				}
				j = end
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errAnswer
	default:
		j := i
		for j < len(data) {
			c := data[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			j++
		}
		if j == i {
			return 0, errAnswer
		}
		return j, nil
	}
}
