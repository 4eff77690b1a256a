package names

import (
	"strings"
	"testing"
)

func TestProblem(t *testing.T) {
	for _, tc := range []struct {
		name, want string
	}{
		{"presence", ""},
		{"room-7/ü:日本", ""},
		{strings.Repeat("a", 512), ""},
		{"", "queue is required"},
		{strings.Repeat("a", 513), "queue is 513 bytes; at most 512 are allowed"},
		{"a\x00", "queue carries a control character at byte 1"},
		{"a\x7f", "queue carries a control character at byte 1"},
		{"a\u0085", "queue carries a control character at byte 1"},
		{"a\xff", "queue is not valid UTF-8 (byte 1)"},
	} {
		if got := Problem("queue", tc.name); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.name, got, tc.want)
		}
		if got := Problem("queue", []byte(tc.name)); got != tc.want {
			t.Errorf("%q as bytes: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestProblemOfAValidNameAllocatesNothing(t *testing.T) {
	b := []byte("room-7/ü")
	if n := testing.AllocsPerRun(100, func() { _ = Problem("queue", b) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
