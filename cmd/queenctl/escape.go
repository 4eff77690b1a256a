package main

// What the server sends is shown, never obeyed: every string of the
// broker's (or of whatever answers at --url: a proxy, an intercepted
// connection) that queenctl prints goes through visible (text for people)
// or safeJSON (documents for machines) first. A terminal acts on control
// characters: OSC 52 writes the clipboard, OSC 0 the window title, CSI 2J
// clears the screen, a C1 byte is a CSI of its own to some terminals, and
// the bidi overrides reorder what the eye reads (a queue name that shows
// one thing and is another). docs/cli.md, "Output, errors and exit status".

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// acted reports whether a terminal acts on r rather than draws it: the C0
// controls and DEL, the C1 controls, the bidi embeddings, overrides,
// isolates and marks (U+061C, U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069), and the line and paragraph separators (U+2028, U+2029),
// which some terminals and editors take for a line break.
func acted(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x2028 && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// visible answers s with every character a terminal acts on escaped: a C0
// control, DEL or a byte that is not UTF-8 as \xNN, a C1 control or a bidi
// or separator character as \uNNNN. A backslash is left as it is, so a
// string without such characters is shown unchanged (and not copied).
func visible(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if acted(r) || r == utf8.RuneError && n == 1 {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && acted(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case acted(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safeJSON answers doc, a JSON document, as the same JSON value with
// nothing a terminal acts on: the C1, bidi and separator characters as
// \uNNNN escapes and the bytes that are not UTF-8 as \ufffd (as
// encoding/json does for a Go string). In valid JSON those can only stand
// inside strings, where the escapes mean the same characters, so a parser
// reads back exactly the strings the server sent. A raw C0 control can
// only be whitespace between values in valid JSON; it is removed
// (json.Compact). doc that is not valid JSON is answered as visible would
// show it, which no parser mistakes for the server's document.
func safeJSON(doc []byte) []byte {
	if !json.Valid(doc) {
		return []byte(visible(string(doc)))
	}
	clean := true
	for i := 0; i < len(doc); {
		r, n := utf8.DecodeRune(doc[i:])
		if acted(r) || r == utf8.RuneError && n == 1 {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return doc
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return []byte(visible(string(doc))) // unreachable: doc is valid
	}
	b := make([]byte, 0, compact.Len()+16)
	for s := compact.Bytes(); len(s) > 0; {
		r, n := utf8.DecodeRune(s)
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case acted(r):
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
	return b
}
