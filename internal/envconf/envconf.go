// Package envconf reads a command's settings from environment variables:
// the list a command declares (name, default, help), its --help text, and
// typed reads that check every value and collect what is wrong, each
// message naming its variable. cmd/queen and cmd/queen-gateway use it.
package envconf

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Setting is one environment variable a command reads.
type Setting struct {
	Name, Default, Help string
}

// PrintHelp writes the settings, one a line, with their defaults.
func PrintHelp(w io.Writer, settings []Setting) {
	for _, s := range settings {
		def := s.Default
		if def == "" {
			def = "(unset)"
		}
		fmt.Fprintf(w, "  %-36s %-12s %s\n", s.Name, def, s.Help)
	}
}

// Env reads settings through Get (os.Getenv, or a test's map).
type Env struct {
	Get      func(string) string
	Settings []Setting
	errs     []string
}

// Str is the variable's value, or its default when it is unset or empty.
func (e *Env) Str(name string) string {
	if v := e.Get(name); v != "" {
		return v
	}
	for _, s := range e.Settings {
		if s.Name == name {
			return s.Default
		}
	}
	return ""
}

// Int64 reads a non-negative integer; "" (with no default) is 0.
func (e *Env) Int64(name string) int64 {
	v := strings.TrimSpace(e.Str(name))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a non-negative integer", name, v))
		return 0
	}
	return n
}

// Bool reads true|false; "" means def.
func (e *Env) Bool(name string, def bool) bool {
	switch v := strings.TrimSpace(e.Str(name)); v {
	case "":
		return def
	case "true":
		return true
	case "false":
		return false
	default:
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not true or false", name, v))
		return def
	}
}

// Err says every value read that was wrong, nil when none was.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("bad configuration: %s", strings.Join(e.errs, "; "))
}

// Args handles a command's arguments, which are only ever asking for its
// help or its version (everything else is the environment's): it prints
// what was asked for with help or version and reports handled, with the
// exit code to end with; an unknown argument is exit code 2. No argument:
// handled is false, and the command runs.
func Args(name string, args []string, stdout, stderr io.Writer, help, version func(io.Writer)) (code int, handled bool) {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "help":
			help(stdout)
			return 0, true
		case "-v", "-version", "--version", "version":
			version(stdout)
			return 0, true
		default:
			fmt.Fprintf(stderr, "%s: unknown argument %q (see --help)\n", name, a)
			return 2, true
		}
	}
	return 0, false
}
