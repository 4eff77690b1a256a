package engine

import "testing"

// TestParseID pins how an ack id is read (D6): ours, stale (another
// incarnation) or foreign, on both the prefix fast path and the general one.
func TestParseID(t *testing.T) {
	e := New(Config{})
	defer e.Close()
	ours := "e:" + e.Incarnation() + ":"
	other := "e:800000000001:"
	for _, tc := range []struct {
		id        string
		kind      idKind
		partition string
		seq       uint64
	}{
		{ours + "p0:42", idOurs, "p0", 42},
		{ours + "a:b:c:7", idOurs, "a:b:c", 7}, // partitions may hold colons
		{ours + "Default:0", idOurs, "Default", 0},
		{ours + "p:18446744073709551615", idOurs, "p", 1<<64 - 1},
		{ours + "p:18446744073709551616", idForeign, "", 0}, // overflows
		{ours + "p:1x", idForeign, "", 0},
		{ours + "p:-1", idForeign, "", 0},
		{ours + "p:", idForeign, "", 0},
		{ours + ":5", idForeign, "", 0},
		{ours + "5", idForeign, "", 0},
		{other + "p0:42", idStale, "", 0},
		{"e:zz:p0:42", idForeign, "", 0},
		{"x:" + e.Incarnation() + ":p0:42", idForeign, "", 0},
		{"", idForeign, "", 0},
		{ours, idForeign, "", 0},
	} {
		kind, partition, seq := e.parseID(tc.id)
		if kind != tc.kind || partition != tc.partition || seq != tc.seq {
			t.Errorf("parseID(%q) = %v, %q, %d; want %v, %q, %d", tc.id, kind, partition, seq, tc.kind, tc.partition, tc.seq)
		}
	}
	// Every id AppendID writes parses back.
	for _, seq := range []uint64{0, 9, 10, 1234567890123456789, 1<<64 - 1} {
		id := string(e.AppendID(nil, "room:7", seq))
		if kind, p, s := e.parseID(id); kind != idOurs || p != "room:7" || s != seq {
			t.Errorf("parseID(%q) = %v, %q, %d", id, kind, p, s)
		}
	}
}

func BenchmarkParseID(b *testing.B) {
	e := New(Config{})
	defer e.Close()
	id := string(e.AppendID(nil, "p0", 123456))
	for b.Loop() {
		if k, _, _ := e.parseID(id); k != idOurs {
			b.Fatal(k)
		}
	}
}

// D6: a stale id is told from a foreign one by its shape alone. An
// incarnation is lowercase hex of 1 to 16 digits ('f' and 16 digits
// included); an id without a partition does not parse.
func TestParseIDStaleShapes(t *testing.T) {
	e := New(Config{Incarnation: 0xabcdef123456, Clock: NewManualClock()})
	defer e.Close()
	for _, tc := range []struct {
		id   string
		kind idKind
	}{
		{"e:fff:p:1", idStale},
		{"e:0123456789abcdef:p:1", idStale},    // 16 digits
		{"e:0123456789abcdef0:p:1", idForeign}, // 17
		{"e:abc::5", idForeign},                // no partition
		{"e:abc:p:", idForeign},                // no seq
		{"e:a:b:1", idStale},
		{"e::p:1", idForeign}, // no incarnation
	} {
		if kind, _, _ := e.parseID(tc.id); kind != tc.kind {
			t.Errorf("parseID(%q) = %v, want %v", tc.id, kind, tc.kind)
		}
	}
}

// D6: the incarnation is 48 random bits, 12 hex digits, new at every start.
func TestIncarnationsAreRandom48Bits(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 16; i++ {
		e := New(Config{Clock: NewManualClock()})
		inc := e.Incarnation()
		e.Close()
		if len(inc) != 12 || !isHex(inc) {
			t.Fatalf("incarnation %q, want 12 hex digits", inc)
		}
		if seen[inc] {
			t.Fatalf("incarnation %q drawn twice in 16 starts", inc)
		}
		seen[inc] = true
	}
}
