package link

import (
	"encoding/binary"
	"errors"
)

// Frames. Every frame is a 13-byte header, then the payload:
//
//	length uint32 (payload bytes) | type uint8 | stream id uint64
//
// all big-endian. Stream ids are chosen by the side that opened the
// connection (the client) and echoed by the server. A frame longer than the
// receiver's limit is a protocol error that closes the connection.
//
// Every hop speaks these frames: a client's link (docs/link.md), the
// gateway's link to a broker and the cell's relay between members; they
// differ only in how a connection becomes a link and where a request's
// identity comes from.
const HeaderLen = 13

// MaxFrame is the longest frame any hop reads or writes by default: the
// broker's largest body (64 MiB) and room for its head, 80 MiB. A client's
// link is bounded tighter, by the broker's body limit (docs/link.md).
const MaxFrame = 80 << 20

// Frame types.
const (
	FrameRequest byte = 1 // client → server: an encoded Request
	FrameAnswer  byte = 2 // server → client: the owner's answer, raw
	FrameCancel  byte = 3 // client → server: the caller gave up on the stream
	FrameRefuse  byte = 4 // server → client: not taken (payload: one reason byte)
	FramePing    byte = 5 // client → server, no payload
	FramePong    byte = 6 // server → client, no payload
	// FrameToken: client → server on a client link (docs/link.md): a fresh
	// bearer token extending the link's identity; answered by a
	// FrameAnswer on its stream.
	FrameToken byte = 7
)

// Refusal reasons (FrameRefuse payload).
const (
	RefuseBusy     byte = 1 // the connection's stream bound is reached
	RefuseClosing  byte = 2 // the server is shutting down
	RefuseTooLarge byte = 3 // the answer is over the frame limit
	// RefuseLost: the request went on to another member, which may have
	// served it, and its answer was lost on the way (a gateway link's
	// frame that a cell member relayed to the queue's owner).
	RefuseLost byte = 4
)

// PutHeader writes a frame header for a payload of n bytes into b[:HeaderLen].
func PutHeader(b []byte, typ byte, id uint64, n int) {
	binary.BigEndian.PutUint32(b[0:4], uint32(n))
	b[4] = typ
	binary.BigEndian.PutUint64(b[5:13], id)
}

// Request is what the landing member relays. The byte slices are opaque to
// the relay: Header is whatever header lines the owner needs to serve the
// request as if it had landed there ("Name: value\r\n" each, by
// convention), Body the request's content. On the owner the slices point
// into the frame the request came in, which the handler owns.
type Request struct {
	Tenant []byte // the identity's tenant, established where it landed
	Access uint8  // the identity's access level, established where it landed
	Method []byte
	Target []byte // request-target: path and query, still encoded
	Header []byte
	Body   []byte
}

// Response is the owner's whole HTTP answer, status line to the last body
// byte, exactly as it would have written it on its own socket.
type Response struct {
	Raw []byte
}

// AppendHeader appends a frame header for a payload of n bytes.
func AppendHeader(b []byte, typ byte, id uint64, n int) []byte {
	var h [HeaderLen]byte
	PutHeader(h[:], typ, id, n)
	return append(b, h[:]...)
}

// ParseHeader reads the frame header at the start of b (len(b) >= HeaderLen).
func ParseHeader(b []byte) (typ byte, id uint64, n int) {
	return b[4], binary.BigEndian.Uint64(b[5:13]), int(binary.BigEndian.Uint32(b[0:4]))
}

// EncodedLen is the length of r's request payload: tenant(u16 len)
// access(u8) method(u8 len) target(u32 len) header(u32 len) body(rest).
func (r *Request) EncodedLen() int {
	return 2 + len(r.Tenant) + 1 + 1 + len(r.Method) + 4 + len(r.Target) + 4 + len(r.Header) + len(r.Body)
}

// Fits reports whether r encodes into a request frame whose payload is at
// most limit bytes: its tenant and method within their length fields, and
// the whole within the limit.
func (r *Request) Fits(limit int) bool {
	return len(r.Tenant) <= 0xffff && len(r.Method) <= 0xff && r.EncodedLen() <= limit
}

var errBadRequest = errors.New("link: malformed request frame")

// AppendRequest encodes r after a frame header for stream id.
func AppendRequest(b []byte, id uint64, r *Request) ([]byte, error) {
	if len(r.Tenant) > 0xffff || len(r.Method) > 0xff {
		return b, errBadRequest
	}
	n := r.EncodedLen()
	var h [HeaderLen]byte
	PutHeader(h[:], FrameRequest, id, n)
	b = append(b, h[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Tenant)))
	b = append(b, r.Tenant...)
	b = append(b, r.Access, byte(len(r.Method)))
	b = append(b, r.Method...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Target)))
	b = append(b, r.Target...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Header)))
	b = append(b, r.Header...)
	return append(b, r.Body...), nil
}

// DecodeRequest slices p (a FrameRequest payload) into r without copying.
func DecodeRequest(p []byte, r *Request) error {
	take := func(n int) ([]byte, bool) {
		if n < 0 || n > len(p) {
			return nil, false
		}
		s := p[:n:n]
		p = p[n:]
		return s, true
	}
	var ok bool
	if len(p) < 2 {
		return errBadRequest
	}
	n := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	if r.Tenant, ok = take(n); !ok || len(p) < 2 {
		return errBadRequest
	}
	r.Access, n, p = p[0], int(p[1]), p[2:]
	if r.Method, ok = take(n); !ok || len(p) < 4 {
		return errBadRequest
	}
	n, p = int(binary.BigEndian.Uint32(p)), p[4:]
	if r.Target, ok = take(n); !ok || len(p) < 4 {
		return errBadRequest
	}
	n, p = int(binary.BigEndian.Uint32(p)), p[4:]
	if r.Header, ok = take(n); !ok {
		return errBadRequest
	}
	r.Body = p
	return nil
}
