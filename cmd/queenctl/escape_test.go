package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVisible: each kind of character a terminal acts on is shown in its
// escaped form, and text without one comes back as it is.
func TestVisible(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"jobs", "jobs"},
		{"café ▲ 東京 \\x1b", "café ▲ 東京 \\x1b"}, // printable; a backslash is left alone
		{"\x1b]52;c;cm0gLXJmIH4=\x07", `\x1b]52;c;cm0gLXJmIH4=\x07`},
		{"\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"a\x1b[2Jb", `a\x1b[2Jb`},
		{"line\r\nnext\ttab\x00\x7f", `line\x0d\x0anext\x09tab\x00\x7f`},
		{"\u009b31m\u0085", `\u009b31m\u0085`},
		{"\u202egpj.exe\u202a\u202b\u202c\u202d", `\u202egpj.exe\u202a\u202b\u202c\u202d`},
		{"\u2066\u2067\u2068\u2069\u200e\u200f\u061c", `\u2066\u2067\u2068\u2069\u200e\u200f\u061c`},
		{"\u2028\u2029", `\u2028\u2029`},
		{"raw \x9b byte \xff", `raw \x9b byte \xff`}, // not UTF-8
		{"\ufffd", "\ufffd"},                         // the replacement character itself is printable
	} {
		if got := visible(c.in); got != c.want {
			t.Errorf("visible(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestSafeJSON: a document with characters a terminal acts on comes back
// as JSON that parses to exactly the same value, holding none of them; a
// document without them comes back byte for byte; one that is not JSON is
// shown escaped.
func TestSafeJSON(t *testing.T) {
	for _, doc := range []string{
		"{\"t\":\"\u009b31m\u202egpj.exe\u2066\u061c\",\r\n \"n\":[1,\t2]}",
		"\"\x7f\u0085\"",
		"{\"bad\":\"\xff\x9b\"}", // not UTF-8: replaced, as encoding/json does for a Go string
	} {
		out := safeJSON([]byte(doc))
		inert(t, "safeJSON("+doc+")", string(out))
		var want, got any
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("safeJSON(%q) = %q: not JSON: %v", doc, out, err)
		}
		if w, g := mustJSON(t, want), mustJSON(t, got); w != g {
			t.Fatalf("safeJSON(%q) = %q parses to %s, want %s", doc, out, g, w)
		}
	}
	if got := safeJSON([]byte("{\"t\":\"\u202e\"}")); string(got) != `{"t":"\u202e"}` {
		t.Fatalf("safeJSON of a bidi override: %s", got)
	}
	clean := `{"a": [1, 2], "s": "\u001b]0;x\u0007 ▲"}`
	if got := safeJSON([]byte(clean)); string(got) != clean {
		t.Fatalf("safeJSON changed a clean document: %q", got)
	}
	if got := safeJSON([]byte("{\"x\":\"\x1b[2J")); string(got) != `{"x":"\x1b[2J` {
		t.Fatalf("safeJSON of a document that is not JSON: %q", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inert fails t if out holds anything a terminal would act on: a C0
// control other than the newline, DEL, a C1 control, a bidi or separator
// character, or a byte that is not UTF-8. It is written apart from acted,
// the code's own list, so that a character dropped from that list is
// caught here.
func inert(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		bad := r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f || r == 0xfffd && !strings.HasPrefix(out[i:], "\ufffd")
		switch r {
		case 0x061c, 0x200e, 0x200f, 0x2028, 0x2029, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069:
			bad = true
		}
		if bad {
			t.Fatalf("%s: %U reached the terminal raw at byte %d of %q", what, r, i, out)
		}
	}
}
