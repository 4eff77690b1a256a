package envconf

import (
	"bytes"
	"strings"
	"testing"
)

func TestReadsValuesDefaultsAndCollectsErrors(t *testing.T) {
	vars := map[string]string{"A": "12", "B": "-1", "C": "yes", "D": "true"}
	e := Env{Get: func(k string) string { return vars[k] }, Settings: []Setting{{Name: "E", Default: "7"}, {Name: "F"}}}
	if e.Int64("A") != 12 || e.Int64("E") != 7 || e.Int64("F") != 0 || !e.Bool("D", false) || e.Str("E") != "7" {
		t.Fatal("a value or a default was misread")
	}
	if e.Err() != nil {
		t.Fatalf("no bad value read yet: %v", e.Err())
	}
	e.Int64("B")
	e.Bool("C", true)
	err := e.Err()
	if err == nil || !strings.Contains(err.Error(), `B="-1" is not a non-negative integer`) || !strings.Contains(err.Error(), `C="yes" is not true or false`) {
		t.Fatalf("errors: %v", err)
	}
}

func TestPrintHelp(t *testing.T) {
	var b bytes.Buffer
	PrintHelp(&b, []Setting{{Name: "PORT", Default: "6632", Help: "the port"}, {Name: "X", Help: "unset by default"}})
	if !strings.Contains(b.String(), "PORT") || !strings.Contains(b.String(), "6632") || !strings.Contains(b.String(), "(unset)") {
		t.Fatalf("help:\n%s", b.String())
	}
}
