package wire

import (
	"fmt"
	"strings"
	"testing"
)

// The byte classes of RFC 9110 and RFC 9112, spelled out byte by byte, and
// checked through the parser for every one of the 256 bytes: a byte of a
// method or header name is accepted exactly when it is a tchar, a byte of a
// header value exactly when it is SP, HTAB, VCHAR or obs-text, a byte of a
// target exactly when it is VCHAR (but '#') or obs-text, and a byte after a
// '%' in a target exactly when it is a hex digit.
const (
	alnum        = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	tcharPunct   = "!#$%&'*+-.^_`|~"
	hexDigitsAll = "0123456789abcdefABCDEF"
)

func isVCHAR(b byte) bool   { return b >= 0x21 && b <= 0x7e }
func isObsText(b byte) bool { return b >= 0x80 }

func accepted(t *testing.T, raw string) bool {
	t.Helper()
	req, err := parseOne(t, raw)
	if err != nil {
		return false
	}
	if req == nil {
		t.Fatalf("%q: incomplete", raw)
	}
	return true
}

func TestByteClassesThroughTheParser(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		s := string([]byte{b})
		tchar := strings.Contains(alnum+tcharPunct, s)
		if got := accepted(t, "G"+s+"T / HTTP/1.1\r\n\r\n"); got != tchar {
			t.Errorf("method byte %#02x: accepted %v, want %v", b, got, tchar)
		}
		if b != ':' {
			if got := accepted(t, "GET / HTTP/1.1\r\nX-A"+s+"B: v\r\n\r\n"); got != tchar {
				t.Errorf("header name byte %#02x: accepted %v, want %v", b, got, tchar)
			}
		}
		value := b == ' ' || b == '\t' || isVCHAR(b) || isObsText(b)
		if got := accepted(t, "GET / HTTP/1.1\r\nX-A: a"+s+"b\r\n\r\n"); got != value {
			t.Errorf("header value byte %#02x: accepted %v, want %v", b, got, value)
		}
		if b != '%' {
			target := isVCHAR(b) && b != '#' || isObsText(b)
			if got := accepted(t, "GET /a"+s+"b HTTP/1.1\r\n\r\n"); got != target {
				t.Errorf("target byte %#02x: accepted %v, want %v", b, got, target)
			}
		}
		hex := strings.Contains(hexDigitsAll, s)
		if got := accepted(t, "GET /a%"+s+"0 HTTP/1.1\r\n\r\n"); got != hex {
			t.Errorf("percent-escape byte %#02x: accepted %v, want %v", b, got, hex)
		}
		if got := accepted(t, "GET /a%0"+s+" HTTP/1.1\r\n\r\n"); got != hex {
			t.Errorf("percent-escape second byte %#02x: accepted %v, want %v", b, got, hex)
		}
	}
}

// Every hex digit, in either case, has its value in a chunk size.
func TestChunkSizeHexDigits(t *testing.T) {
	for v, d := range "0123456789abcdef" {
		for _, digit := range []string{string(d), strings.ToUpper(string(d))} {
			// "1" + digit: a size of 16+v, so that "0" is a chunk too.
			data := strings.Repeat("x", 16+v)
			raw := fmt.Sprintf("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1%s\r\n%s\r\n0\r\n\r\n", digit, data)
			req, err := parseOne(t, raw)
			if err != nil || req == nil {
				t.Fatalf("size 1%s: %v", digit, err)
			}
			if string(req.Body) != data {
				t.Errorf("size 1%s: body of %d bytes, want %d", digit, len(req.Body), 16+v)
			}
		}
	}
}
