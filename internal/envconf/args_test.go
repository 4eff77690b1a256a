package envconf

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// The only arguments a command takes ask for its help or its version;
// anything else is a usage error (exit 2); none lets it run.
func TestArgs(t *testing.T) {
	help := func(w io.Writer) { io.WriteString(w, "HELP") }
	version := func(w io.Writer) { io.WriteString(w, "VERSION") }
	for _, c := range []struct {
		args          []string
		code          int
		handled       bool
		stdout, inErr string
	}{
		{nil, 0, false, "", ""},
		{[]string{"--help"}, 0, true, "HELP", ""},
		{[]string{"help"}, 0, true, "HELP", ""},
		{[]string{"-v"}, 0, true, "VERSION", ""},
		{[]string{"version"}, 0, true, "VERSION", ""},
		{[]string{"--port=1"}, 2, true, "", `cmd: unknown argument "--port=1" (see --help)`},
	} {
		var out, errb bytes.Buffer
		code, handled := Args("cmd", c.args, &out, &errb, help, version)
		if code != c.code || handled != c.handled || out.String() != c.stdout || !strings.Contains(errb.String(), c.inErr) {
			t.Errorf("%v: code %d handled %v stdout %q stderr %q", c.args, code, handled, out.String(), errb.String())
		}
	}
}
