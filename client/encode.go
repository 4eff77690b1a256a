package client

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/queenmq/ephemeral/wire"
)

// Bodies and queries written by hand into the call's pooled buffers, so a
// push or a pop allocates nothing of its own (P2). Strings are escaped by
// the broker's own encoder (wire.AppendString: encoding/json's escaping
// without its HTML escaping, which the broker does not need: it stores
// names and payloads verbatim).

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
	dst = wire.AppendString(dst, queue)
	if partition != "" {
		dst = append(dst, `,"partition":`...)
		dst = wire.AppendString(dst, partition)
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
