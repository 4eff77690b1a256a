package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Bodies and queries written by hand into the call's pooled buffers, so a
// push or a pop allocates nothing of its own (P2): the JSON string escaping
// is encoding/json's (without its HTML escaping, which the broker does not
// need: it stores names and payloads verbatim).

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			// Valid JSON either way; escaped as encoding/json does, for
			// JavaScript readers.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendPayload appends one payload: a json.RawMessage as is (checked, and
// compacted when it holds whitespace, as json.Marshal would), anything else
// marshalled.
func appendPayload(dst []byte, i int, p any) ([]byte, error) {
	if raw, ok := p.(json.RawMessage); ok {
		return appendRaw(dst, i, raw)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return dst, fmt.Errorf("queen: encoding payload %d: %w", i, err)
	}
	return append(dst, b...), nil
}

func appendRaw(dst []byte, i int, raw json.RawMessage) ([]byte, error) {
	if bytes.ContainsAny(raw, " \t\r\n") {
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, raw); err != nil {
			return dst, fmt.Errorf("queen: payload %d is not valid JSON", i)
		}
		return buf.Bytes(), nil
	}
	if !json.Valid(raw) {
		return dst, fmt.Errorf("queen: payload %d is not valid JSON", i)
	}
	return append(dst, raw...), nil
}

// appendPushHead and appendPushTail frame a push body around its messages:
// {"queue":Q,"partition":P,"messages":[{"payload":...},...]}.
func appendPushHead(dst []byte, queue, partition string) []byte {
	dst = append(dst, `{"queue":`...)
	dst = appendJSONString(dst, queue)
	if partition != "" {
		dst = append(dst, `,"partition":`...)
		dst = appendJSONString(dst, partition)
	}
	return append(dst, `,"messages":[`...)
}

func appendMessageOpen(dst []byte, i int) []byte {
	if i > 0 {
		dst = append(dst, ',')
	}
	return append(dst, `{"payload":`...)
}

func appendPushTail(dst []byte) []byte { return append(dst, "]}"...) }

// appendQuery appends "&key=value" (or "?key=value" for the first, first
// true) with value escaped as url.QueryEscape does.
func appendQuery(dst []byte, first bool, key, value string) []byte {
	if first {
		dst = append(dst, '?')
	} else {
		dst = append(dst, '&')
	}
	dst = append(dst, key...)
	dst = append(dst, '=')
	for i := 0; i < len(value); i++ {
		c := value[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			dst = append(dst, c)
		case c == ' ':
			dst = append(dst, '+')
		default:
			dst = append(dst, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&0xF])
		}
	}
	return dst
}
