package wire

// Eight bytes at a time: the strings the broker writes are mostly plain
// ASCII (ids, partition and queue names), and testing a word for the few
// bytes that need attention beats a table lookup per byte (escaping was 8 %
// of the broker's CPU in the throughput profile; BenchmarkWritePop100 went
// from 3.71 to 3.13 µs). The readers keep their per-byte tables: their
// strings are mostly short keys, where a word test that fails at the
// closing quote only adds work (measured: push decoding 28 % slower).

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// plain8 reports whether all eight bytes of x stand for themselves in a
// JSON string, both read (strPlain) and written (jsonSafe): each is in
// 0x20..0x7f and is neither '"' nor '\\'. The tests are the classic
// "has a byte less than n" and "has a zero byte" bit tricks, exact as a
// yes/no answer for the whole word.
func plain8(x uint64) bool {
	control := (x - 0x20*swarOnes) & ^x & swarHigh
	q := x ^ ('"' * swarOnes)
	quote := (q - swarOnes) & ^q & swarHigh
	s := x ^ ('\\' * swarOnes)
	backslash := (s - swarOnes) & ^s & swarHigh
	return (control | quote | backslash | x&swarHigh) == 0
}

// load8 reads s[i:i+8] as a little-endian word (one load once compiled).
func load8[T string | []byte](s T, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

// The request head's long runs, a bearer token above all (about 200 bytes,
// most of a request's head), are checked a word per step too: a word that
// holds any byte the byte tables treat specially falls back to them.
// BenchmarkParsePopGETWithJWT: 378 → 315 ns (BENCHMARKS.md, "Parts measured
// since that run").

// hasLess reports whether a byte of x is below n (n ≤ 128), exactly.
func hasLess(x uint64, n byte) bool { return (x-uint64(n)*swarOnes)&^x&swarHigh != 0 }

// hasByte reports whether a byte of x is c, exactly.
func hasByte(x uint64, c byte) bool { return hasLess(x^(uint64(c)*swarOnes), 1) }

// plainValue reports whether the eight bytes of x are field-value bytes
// (isFieldValue) other than HTAB, which the table accepts byte by byte.
func plainValue(x uint64) bool { return !hasLess(x, 0x20) && !hasByte(x, 0x7f) }

// plainTarget reports whether the eight bytes of x are request-target bytes
// (isTarget) other than '%', whose escape is checked byte by byte.
func plainTarget(x uint64) bool {
	return !hasLess(x, 0x21) && !hasByte(x, 0x7f) && !hasByte(x, '#') && !hasByte(x, '%')
}
