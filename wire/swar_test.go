package wire

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// plainByTable is plain8 written the slow way.
func plainByTable(x uint64) bool {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], x)
	for _, c := range b {
		if !strPlain[c] {
			return false
		}
	}
	return true
}

// TestPlain8 holds the bit trick to the table for every byte value in
// every position of an otherwise plain word, and for random words.
func TestPlain8(t *testing.T) {
	const base = 0x6162636465666768 // "hgfedcba"
	for pos := 0; pos < 8; pos++ {
		for c := 0; c < 256; c++ {
			x := base&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			if got, want := plain8(x), plainByTable(x); got != want {
				t.Fatalf("byte %#x at %d: plain8 = %v, the table says %v", c, pos, got, want)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		x := r.Uint64()
		if r.IntN(2) == 0 {
			x &^= swarHigh // mostly ASCII, where the tricks could go wrong
		}
		if got, want := plain8(x), plainByTable(x); got != want {
			t.Fatalf("%#016x: plain8 = %v, the table says %v", x, got, want)
		}
	}
	if got := load8("abcdefgh", 0); got != binary.LittleEndian.Uint64([]byte("abcdefgh")) {
		t.Fatalf("load8 = %#x", got)
	}
}

// The word tests pass a word exactly when every byte of it would pass the
// tables' byte-by-byte test without special handling: a word they pass is
// skipped unchecked, so one that slips a refused byte through would let a
// control character into a header value or a fragment into a target.
func TestWordTestsAgreeWithTheTables(t *testing.T) {
	valueByte := func(c byte) bool { return isFieldValue[c] && c != '\t' }
	targetByte := func(c byte) bool { return isTarget[c] && c != '%' }
	check := func(w uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], w)
		wantValue, wantTarget := true, true
		for _, c := range b {
			wantValue = wantValue && valueByte(c)
			wantTarget = wantTarget && targetByte(c)
		}
		if got := plainValue(w); got != wantValue {
			t.Fatalf("plainValue(%q) = %v, want %v", b, got, wantValue)
		}
		if got := plainTarget(w); got != wantTarget {
			t.Fatalf("plainTarget(%q) = %v, want %v", b, got, wantTarget)
		}
	}
	// Every byte value at every position of an otherwise plain word, and
	// beside every other value (the borrow of one byte's subtraction can
	// reach its neighbour).
	for _, base := range []byte{'a', '~', 0x21, 0x80, 0xff} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				for d := 0; d < 256; d++ {
					var b [8]byte
					for i := range b {
						b[i] = base
					}
					b[pos] = byte(c)
					b[(pos+1)%8] = byte(d)
					check(binary.LittleEndian.Uint64(b[:]))
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 1_000_000 {
		check(r.Uint64())
	}
}

// A header value and a target with a refused byte at every offset are
// refused, whichever word it falls in; without it they parse.
func TestRefusedByteAtEveryOffset(t *testing.T) {
	value := "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4In0.sig-abcdefgh"
	for _, bad := range []byte{0, 0x01, '\r', '\n', 0x1f, 0x7f} {
		for i := 0; i <= len(value); i++ {
			line := []byte("Authorization: Bearer " + value[:i] + string(bad) + value[i:])
			if _, _, _, err := fieldLine(line, "header"); err == nil {
				t.Fatalf("byte %#x at %d of a value: accepted", bad, i)
			}
		}
	}
	if _, _, _, err := fieldLine([]byte("Authorization: Bearer "+value+"\tx"), "header"); err != nil {
		t.Fatalf("a tab in a value: %v", err)
	}
	target := "/api/v1/ephemeral/pop?queue=inbox-7&wait=true&timeout=30000"
	for _, bad := range []byte{' ', 0x01, 0x7f, '#'} {
		for i := 1; i <= len(target); i++ {
			raw := "GET " + target[:i] + string(bad) + target[i:] + " HTTP/1.1\r\nHost: x\r\n\r\n"
			if bad == ' ' {
				continue // a space ends the target: a malformed request line, another refusal
			}
			p := NewParser(Limits{})
			if _, _, err := p.Parse([]byte(raw)); err == nil {
				t.Fatalf("byte %#x at %d of a target: accepted", bad, i)
			}
		}
	}
	p := NewParser(Limits{})
	if req, _, err := p.Parse([]byte("GET " + target + "&name=a%20b HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil || req == nil {
		t.Fatalf("a target with an escape: %v", err)
	}
	if _, _, err := NewParser(Limits{}).Parse([]byte("GET " + target + "&name=a%2 HTTP/1.1\r\nHost: x\r\n\r\n")); err == nil {
		t.Fatal("a malformed escape at the end: accepted")
	}
}
