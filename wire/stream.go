package wire

import "strconv"

// Answers written as they are produced, for a body too large to hold whole
// (the queue listing of a tenant with a million queues).

// AppendStreamHead appends the head of an answer whose length is not known
// when it starts. With chunked (HTTP/1.1) it says "Transfer-Encoding:
// chunked" and the body is written with AppendChunk and LastChunk. Without
// (an HTTP/1.0 client, which does not read chunks), it has no length at all
// and says "Connection: close": the end of the connection ends the body
// (RFC 9112 6.3). h.ContentLength is ignored.
func AppendStreamHead(dst []byte, h Head, chunked bool) []byte {
	dst = appendStatusLine(dst, h.Status)
	dst = append(dst, "Content-Type: "...)
	if h.ContentType == "" {
		dst = append(dst, "application/json"...)
	} else {
		dst = append(dst, h.ContentType...)
	}
	switch {
	case !chunked:
		dst = append(dst, "\r\nConnection: close"...)
	case h.Close:
		dst = append(dst, "\r\nTransfer-Encoding: chunked\r\nConnection: close"...)
	default:
		dst = append(dst, "\r\nTransfer-Encoding: chunked"...)
	}
	if len(h.Date) > 0 {
		dst = append(dst, "\r\nDate: "...)
		dst = append(dst, h.Date...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, h.Extra...)
	return append(dst, "\r\n"...)
}

// AppendChunk appends data as one chunk of a chunked body (RFC 9112 7.1).
// Empty data appends nothing: an empty chunk would end the body.
func AppendChunk(dst, data []byte) []byte {
	if len(data) == 0 {
		return dst
	}
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, data...)
	return append(dst, "\r\n"...)
}

// LastChunk ends a chunked body, with no trailer.
const LastChunk = "0\r\n\r\n"
