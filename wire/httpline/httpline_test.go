package httpline

import "testing"

func TestParseLength(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "42": 42, "999999999999999": 999999999999999} {
		if n, ok := ParseLength([]byte(in)); !ok || n != want {
			t.Errorf("ParseLength(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "1a", " 1", "1000000000000000"} {
		if _, ok := ParseLength([]byte(in)); ok {
			t.Errorf("ParseLength(%q) accepted", in)
		}
	}
}

func TestTrimCRLFAndEqualFold(t *testing.T) {
	for in, want := range map[string]string{"a\r\n": "a", "a\n": "a", "a": "a", "\r\n": "", "a\r": "a", "": "", "\n": "", "\r": ""} {
		if got := string(TrimCRLF([]byte(in))); got != want {
			t.Errorf("TrimCRLF(%q) = %q, want %q", in, got, want)
		}
	}
	if !EqualFold([]byte("Content-LENGTH"), "content-length") || EqualFold([]byte("content-lengthx"), "content-length") || EqualFold([]byte("Connection"), "close") {
		t.Error("EqualFold")
	}
	// Every letter folds, A and Z included; the bytes beside them do not.
	if !EqualFold([]byte("AZaz"), "azaz") || EqualFold([]byte("@"), "`") || EqualFold([]byte("["), "{") {
		t.Error("EqualFold at the ends of the alphabet")
	}
}
