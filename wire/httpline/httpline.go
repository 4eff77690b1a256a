// Package httpline is shared plumbing, not part of the SDK's API: the small
// pieces of reading an HTTP/1.1 answer's head that the Go SDK's transport
// (package client), the gateway's reading of the brokers' answers (package
// gateway) and the load tool's raw client (bench/internal/rawhttp, in the
// bench module) use: a header line without its line end, a
// case-insensitive header name, a decimal Content-Length. It sits under
// wire, the HTTP/1.1 layer, rather than under internal/ because the load
// tool is a module of its own (so that the root module requires none of the
// peers' clients), and Go lets no other module import an internal package.
// It imports nothing of this repository, and its API may change with the
// readers that use it.
package httpline

// ParseLength reads a decimal Content-Length (at most 15 digits, so it
// cannot overflow).
func ParseLength(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// TrimCRLF drops a line's LF and the CR before it, either being optional.
func TrimCRLF(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// EqualFold compares ASCII b with lower-case s, ignoring b's case.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
