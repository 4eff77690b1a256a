package identity

import "strconv"

// Level is a credential's access level as bits (D14): levels nest, so a
// need is met when every bit of it is held (Allows). Bits rather than an
// ordered number because read-only and write-only are not comparable:
// neither contains the other, and read-write contains both.
type Level uint8

const (
	Read     Level = 1 << iota // the two status reads
	Write                      // push
	adminBit                   // unexported: admin is only ever held with read and write

	ReadOnly  = Read
	WriteOnly = Write
	ReadWrite = Read | Write // pop, ack, configure, reset, delete
	Admin     = Read | Write | adminBit
)

// ParseLevel maps a role name ("read-only", "write-only", "read-write",
// "admin") to its level; ok is false for any other name. It takes bytes so
// that a header's value is looked up without a copy.
func ParseLevel(b []byte) (Level, bool) {
	switch string(b) {
	case "read-only":
		return ReadOnly, true
	case "write-only":
		return WriteOnly, true
	case "read-write":
		return ReadWrite, true
	case "admin":
		return Admin, true
	}
	return 0, false
}

// String is the level's role name, as ParseLevel reads it; "" for 0 (no
// level), and "level(n)" for a set of bits that is not one of the four (a
// level only comes from ParseLevel, but a relayed frame carries a byte).
func (l Level) String() string {
	switch l {
	case 0:
		return ""
	case ReadOnly:
		return "read-only"
	case WriteOnly:
		return "write-only"
	case ReadWrite:
		return "read-write"
	case Admin:
		return "admin"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// Allows reports whether l holds every bit of need.
func (l Level) Allows(need Level) bool { return l&need == need }

// rank orders the levels for a roles array, whose highest wins (D14). The
// bits do not order read-only and write-only, so the order is spelled out.
func rank(l Level) int {
	switch l {
	case Admin:
		return 4
	case ReadWrite:
		return 3
	case WriteOnly:
		return 2
	case ReadOnly:
		return 1
	}
	return 0
}
