package server

import (
	"bytes"

	"github.com/queenmq/ephemeral/wire"
)

// The owner answers a relayed request as an HTTP/1.1 keep-alive request;
// the landing member adapts that answer's connection fields to its client's
// connection before writing it (relay.go, relayAnswered).

var connClose = []byte("\r\nConnection: close\r\n")

var contentLength = []byte("\r\nContent-Length: ")

// connectionFields adapts the owner's answer to this client's connection:
// the owner answers as to an HTTP/1.1 keep-alive request, so an HTTP/1.0
// keep-alive client gets "Connection: keep-alive" and a client that asked
// to close gets "Connection: close", where wire.AppendHead puts it (after
// Content-Length), so the bytes are exactly those this member would have
// written had it owned the queue. closeAfter: the connection ends after the
// answer (the client asked, or the owner's answer says so).
func connectionFields(raw []byte, h wire.Head) (out []byte, closeAfter bool) {
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 {
		return raw, true
	}
	if bytes.Contains(raw[:end+2], connClose) {
		return raw, true
	}
	var extra string
	switch {
	case h.Close:
		extra = "\r\nConnection: close"
	case h.KeepAlive:
		extra = "\r\nConnection: keep-alive"
	default:
		return raw, false
	}
	at := bytes.Index(raw[:end+2], contentLength)
	if at < 0 {
		return raw, true // not an answer of ours: pass it on and close
	}
	at += len(contentLength)
	at += bytes.Index(raw[at:], []byte("\r\n"))
	out = make([]byte, 0, len(raw)+len(extra))
	out = append(append(append(out, raw[:at]...), extra...), raw[at:]...)
	return out, h.Close
}
