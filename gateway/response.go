package gateway

import (
	"bytes"
	"errors"

	"github.com/queenmq/ephemeral/wire/httpline"
)

// Reading the brokers' answers (docs/gateway.md, "Answers pass through").
//
// The gateway returns a broker's answer byte for byte, so it only needs to
// know where each answer ends, its status, whether the broker closes the
// connection after it, and, for a pop, how many messages it carries. A
// respReader finds those by reading the status line and the headers and
// then counting the body's bytes (Content-Length) or walking its chunks
// (the broker's queue listing is chunked); the body itself is never
// decoded.

// respStage is where a respReader is in the answer it reads.
type respStage uint8

const (
	rsHead      respStage = iota // status line and headers, read whole
	rsBody                       // a Content-Length body: left bytes to go
	rsChunkSize                  // a chunk-size line
	rsChunkData                  // chunk data: left bytes, then its CRLF
	rsTrailers                   // after the last chunk: lines until an empty one
)

// maxRespHead bounds an answer's head; a broker's is about 150 bytes.
const maxRespHead = 16 << 10

var errRespFraming = errors.New("gateway: the broker's answer could not be framed")

// respReader frames one answer after another on an upstream connection.
type respReader struct {
	stage respStage
	left  int64 // body or chunk bytes still to come

	// Of the answer being read, known once its head is.
	status    int
	close     bool // Connection: close
	chunked   bool // Transfer-Encoding: chunked
	delivered int  // X-Queen-Delivered (the broker's count of a pop answer's messages, gateway mode), -1 when absent

	// bodyFrom is where, in the bytes the last feed took, the body began:
	// after the head when the head was read in that call, else 0.
	bodyFrom int
}

// feed reads as much of the current answer as buf holds: n bytes of it
// (the head only once it is whole), and done when they end it. After done,
// the next call starts the next answer.
func (r *respReader) feed(buf []byte) (n int, done bool, err error) {
	r.bodyFrom = 0
	for {
		switch r.stage {
		case rsHead:
			end := bytes.Index(buf[n:], []byte("\r\n\r\n"))
			if end < 0 {
				if len(buf)-n > maxRespHead {
					return n, false, errRespFraming
				}
				return n, false, nil
			}
			chunked, length, err := r.head(buf[n : n+end+2])
			if err != nil {
				return n, false, err
			}
			n += end + 4
			r.bodyFrom = n
			r.chunked = chunked
			switch {
			case chunked:
				r.stage = rsChunkSize
			case length > 0:
				r.stage, r.left = rsBody, length
			default:
				return n, r.finish(), nil
			}
		case rsBody:
			take := min(r.left, int64(len(buf)-n))
			n += int(take)
			r.left -= take
			if r.left > 0 {
				return n, false, nil
			}
			return n, r.finish(), nil
		case rsChunkSize, rsTrailers:
			lf := bytes.IndexByte(buf[n:], '\n')
			if lf < 0 {
				if len(buf)-n > maxRespHead {
					return n, false, errRespFraming
				}
				return n, false, nil
			}
			line := bytes.TrimRight(buf[n:n+lf], "\r")
			n += lf + 1
			if r.stage == rsTrailers {
				if len(line) == 0 {
					return n, r.finish(), nil
				}
				continue
			}
			size, ok := chunkSize(line)
			if !ok {
				return n, false, errRespFraming
			}
			if size == 0 {
				r.stage = rsTrailers
				continue
			}
			r.stage, r.left = rsChunkData, size+2 // and its CRLF
		case rsChunkData:
			take := min(r.left, int64(len(buf)-n))
			n += int(take)
			r.left -= take
			if r.left > 0 {
				return n, false, nil
			}
			r.stage = rsChunkSize
		}
	}
}

// finish ends the current answer: reports done, resets for the next one.
func (r *respReader) finish() bool {
	r.stage, r.left = rsHead, 0
	return true
}

// head reads the status line and the headers the gateway acts on.
func (r *respReader) head(h []byte) (chunked bool, length int64, err error) {
	lf := bytes.IndexByte(h, '\n')
	line := bytes.TrimRight(h[:lf], "\r")
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return false, 0, errRespFraming
	}
	status, ok := httpline.ParseLength(line[9:12])
	if !ok {
		return false, 0, errRespFraming
	}
	r.status, r.close, r.delivered = status, false, -1
	length = -1
	for rest := h[lf+1:]; len(rest) > 0; {
		lf := bytes.IndexByte(rest, '\n')
		if lf < 0 {
			lf = len(rest) - 1
		}
		field := httpline.TrimCRLF(rest[:lf+1])
		rest = rest[lf+1:]
		colon := bytes.IndexByte(field, ':')
		if colon <= 0 {
			continue
		}
		name, value := field[:colon], bytes.TrimSpace(field[colon+1:])
		switch {
		case httpline.EqualFold(name, "content-length"):
			v, ok := httpline.ParseLength(value)
			if !ok {
				return false, 0, errRespFraming
			}
			length = int64(v)
		case httpline.EqualFold(name, "transfer-encoding"):
			chunked = httpline.EqualFold(value, "chunked")
		case httpline.EqualFold(name, "connection"):
			r.close = httpline.EqualFold(value, "close")
		case httpline.EqualFold(name, "x-queen-delivered"):
			if v, ok := httpline.ParseLength(value); ok {
				r.delivered = v
			}
		}
	}
	if !chunked && length < 0 {
		// Every answer of the broker says its length or is chunked; one
		// ended by closing cannot share a connection.
		return false, 0, errRespFraming
	}
	return chunked, length, nil
}

// chunkSize reads a chunk-size line (hex, optional extensions).
func chunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var v int64
	for _, c := range line {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// countMessages counts the elements of the top-level "messages" array of a
// pop answer's body without decoding them: the fallback for an answer
// without X-Queen-Delivered. It tracks depth and strings only; -1 when the
// body has no such array.
func countMessages(body []byte) int {
	depth, inString, escaped := 0, false, false
	inArray, count, sawValue := false, 0, false
	key := []byte(`"messages"`)
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			if depth == 1 && !inArray && bytes.HasPrefix(body[i:], key) {
				// The key at the top level: find its array.
				j := i + len(key)
				for j < len(body) && (body[j] == ' ' || body[j] == ':' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
					j++
				}
				if j < len(body) && body[j] == '[' {
					inArray, depth, i = true, 2, j
					continue
				}
			}
			inString = true
			if inArray && depth == 2 {
				sawValue = true
			}
		case '{', '[':
			if inArray && depth == 2 {
				sawValue = true
			}
			depth++
		case '}', ']':
			depth--
			if inArray && depth == 1 {
				if sawValue {
					count++
				}
				return count
			}
		case ',':
			if inArray && depth == 2 {
				count++
				sawValue = false
			}
		case ' ', '\t', '\n', '\r':
		default:
			if inArray && depth == 2 {
				sawValue = true
			}
		}
	}
	return -1
}
