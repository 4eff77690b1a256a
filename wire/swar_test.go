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
