package brokertest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalT records Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Eventually returns once the condition holds, and fails saying what when
// it never does within the bound.
func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, "three calls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("the condition was called %d times, want 3", n)
	}

	f := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(f, 30*time.Millisecond, "never", func() bool { return false })
	}()
	<-done
	if !strings.Contains(f.msg, "never") || !strings.Contains(f.msg, "30ms") {
		t.Fatalf("the failure says %q, want the bound and what was waited for", f.msg)
	}
}

func TestMetric(t *testing.T) {
	text := `# HELP queen_x x
# TYPE queen_x counter
queen_x{tenant="acme",code="a"} 2
queen_x{tenant="acme",code="b"} 3
queen_x{tenant="other"} 5
queen_xy 7
queen_y 1.5e+00
`
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"queen_x", "", 10},
		{"queen_x", `tenant="acme"`, 5},
		{"queen_x", `code="b"`, 3},
		{"queen_xy", "", 7},
		{"queen_y", "", 1.5},
		{"queen_z", "", 0},
	} {
		if got := Metric(text, c.name, c.label); got != c.want {
			t.Errorf("Metric(%s, %q) = %v, want %v", c.name, c.label, got, c.want)
		}
	}
}
