package engine

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"strings"
)

// Message ids look like e:<incarnation>:<partition>:<seq> (D6). The
// incarnation is random per engine (48 bits, hex), so an id minted before a
// restart answers stale; seq is unique per (queue, partition) name within an
// incarnation, never reused after reset or delete (see Engine.seqFloor).

func newIncarnation() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("engine: no randomness for the incarnation: " + err.Error())
	}
	v := binary.LittleEndian.Uint64(b[:]) & (1<<48 - 1)
	return v | 1<<47 // always 12 hex digits
}

// AppendID appends the id of message seq of partition to dst.
func (e *Engine) AppendID(dst []byte, partition string, seq uint64) []byte {
	dst = append(dst, "e:"...)
	dst = append(dst, e.incHex...)
	dst = append(dst, ':')
	dst = append(dst, partition...)
	dst = append(dst, ':')
	return strconv.AppendUint(dst, seq, 10)
}

// idKind is what parsing an ack id found.
type idKind uint8

const (
	idForeign idKind = iota // does not parse as one of ours: unknown
	idStale                 // minted by another incarnation: stale
	idOurs
)

// parseID splits id into partition and seq. The partition may itself hold
// colons, so the incarnation ends at the second colon and seq starts after
// the last one.
func (e *Engine) parseID(id string) (kind idKind, partition string, seq uint64) {
	// The common case first: an id of this incarnation, matched as a
	// prefix, so its incarnation needs no further look.
	if pre := e.idPrefix; strings.HasPrefix(id, pre) {
		rest := id[len(pre):]
		c := strings.LastIndexByte(rest, ':')
		if c <= 0 {
			return idForeign, "", 0
		}
		s, ok := parseSeq(rest[c+1:])
		if !ok {
			return idForeign, "", 0
		}
		return idOurs, rest[:c], s
	}
	if !strings.HasPrefix(id, "e:") {
		return idForeign, "", 0
	}
	rest := id[2:]
	c1 := strings.IndexByte(rest, ':')
	if c1 <= 0 { // no incarnation
		return idForeign, "", 0
	}
	inc := rest[:c1]
	rest = rest[c1+1:]
	c2 := strings.LastIndexByte(rest, ':')
	if c2 <= 0 { // no partition; an empty seq fails ParseUint
		return idForeign, "", 0
	}
	s, err := strconv.ParseUint(rest[c2+1:], 10, 64)
	if err != nil || !isHex(inc) {
		return idForeign, "", 0
	}
	if inc != e.incHex {
		return idStale, "", 0
	}
	return idOurs, rest[:c2], s
}

// parseSeq reads a seq: decimal digits only, as AppendID writes them.
func parseSeq(s string) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	if len(s) > 19 { // 19 digits always fit in 64 bits; more may not
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i] - '0'
		if c > 9 {
			return 0, false
		}
		v = v*10 + uint64(c)
	}
	return v, true
}

// isHex reports whether s is at most 16 lowercase hex digits (parseID has
// refused an empty incarnation before).
func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return len(s) <= 16
}
