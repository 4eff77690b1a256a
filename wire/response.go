package wire

import (
	"strconv"
	"time"
)

// Head is a response's status line and headers. Every response carries
// Content-Type and Content-Length; the status line always says HTTP/1.1
// (RFC 9110 6.2: a server sends its own version, to HTTP/1.0 clients too).
type Head struct {
	Status        int
	ContentLength int
	// ContentType defaults to application/json, which every route answers.
	ContentType string
	// Close adds "Connection: close": the server closes after this
	// response. KeepAlive adds "Connection: keep-alive", which an HTTP/1.0
	// client needs to keep the connection (Request.Head sets both).
	Close     bool
	KeepAlive bool
	// RetryAfter, when positive, adds "Retry-After: <seconds>".
	RetryAfter int
	// Date, when set, adds "Date: <value>" (see AppendDate; a loop can
	// format it once a second).
	Date []byte
	// Extra is appended verbatim after the other headers: whole lines,
	// each ending in CRLF (WWW-Authenticate on a 401, for instance).
	Extra []byte
}

// AppendHead appends the status line and headers, blank line included.
func AppendHead(dst []byte, h Head) []byte {
	dst = appendStatusLine(dst, h.Status)
	dst = append(dst, "Content-Type: "...)
	if h.ContentType == "" {
		dst = append(dst, "application/json"...)
	} else {
		dst = append(dst, h.ContentType...)
	}
	dst = append(dst, "\r\nContent-Length: "...)
	dst = strconv.AppendInt(dst, int64(h.ContentLength), 10)
	switch {
	case h.Close:
		dst = append(dst, "\r\nConnection: close"...)
	case h.KeepAlive:
		dst = append(dst, "\r\nConnection: keep-alive"...)
	}
	if h.RetryAfter > 0 {
		dst = append(dst, "\r\nRetry-After: "...)
		dst = strconv.AppendInt(dst, int64(h.RetryAfter), 10)
	}
	if len(h.Date) > 0 {
		dst = append(dst, "\r\nDate: "...)
		dst = append(dst, h.Date...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, h.Extra...)
	return append(dst, "\r\n"...)
}

// AppendResponse appends a whole response: h with Content-Length set to
// len(body), then body. To send a large body without copying it again,
// write AppendHead and the body with one vectored write instead (gnet's
// Writev).
func AppendResponse(dst []byte, h Head, body []byte) []byte {
	h.ContentLength = len(body)
	return append(AppendHead(dst, h), body...)
}

// AppendError appends a whole error response for e: status e.Status, body
// exactly {"error":"<e.Msg>","code":"<e.Code>"}, and "Connection: close"
// when e or h asks for it.
func AppendError(dst []byte, h Head, e *Error) []byte {
	h.Status = e.Status
	h.Close = h.Close || e.Close
	h.ContentLength = ErrorBodyLen(e.Msg, e.Code)
	return AppendErrorBody(AppendHead(dst, h), e.Msg, e.Code)
}

// AppendErrorBody appends {"error":"<msg>","code":"<code>"}, the one shape
// of every refusal on this family.
func AppendErrorBody(dst []byte, msg, code string) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendString(dst, msg)
	dst = append(dst, `,"code":`...)
	dst = appendString(dst, code)
	return append(dst, '}')
}

// ErrorBodyLen is len(AppendErrorBody(nil, msg, code)).
func ErrorBodyLen(msg, code string) int {
	return len(`{"error":`) + StringLen(msg) + len(`,"code":`) + StringLen(code) + len(`}`)
}

// AppendContinue appends the interim response to "Expect: 100-continue".
func AppendContinue(dst []byte) []byte {
	return append(dst, "HTTP/1.1 100 Continue\r\n\r\n"...)
}

// AppendDate appends t in the HTTP date format (RFC 9110 5.6.7).
func AppendDate(dst []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(dst, "Mon, 02 Jan 2006 15:04:05 GMT")
}

func appendStatusLine(dst []byte, status int) []byte {
	if line := statusLines(status); line != "" {
		return append(dst, line...)
	}
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = append(dst, reasonPhrase(status)...)
	return append(dst, "\r\n"...)
}

// statusLines holds the status lines the broker sends most, whole.
func statusLines(status int) string {
	switch status {
	case 200:
		return "HTTP/1.1 200 OK\r\n"
	case 201:
		return "HTTP/1.1 201 Created\r\n"
	case 400:
		return "HTTP/1.1 400 Bad Request\r\n"
	case 429:
		return "HTTP/1.1 429 Too Many Requests\r\n"
	case 503:
		return "HTTP/1.1 503 Service Unavailable\r\n"
	}
	return ""
}

func reasonPhrase(status int) string {
	switch status {
	case 304:
		return "Not Modified"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 413:
		return "Content Too Large"
	case 417:
		return "Expectation Failed"
	case 431:
		return "Request Header Fields Too Large"
	case 500:
		return "Internal Server Error"
	case 501:
		return "Not Implemented"
	case 502:
		return "Bad Gateway"
	case 504:
		return "Gateway Timeout"
	case 505:
		return "HTTP Version Not Supported"
	}
	return "" // the reason phrase may be empty (RFC 9112 4)
}
