package client_test

import (
	"bufio"
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// readmeBlock answers the fenced block that follows the line
// "<!-- readme:name -->" in client/README.md: its lines, fences excluded.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	marker := "<!-- readme:" + name + " -->"
	for sc.Scan() {
		if sc.Text() != marker {
			continue
		}
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "```") {
			t.Fatalf("README.md: %s is not followed by a fence", marker)
		}
		var b strings.Builder
		for sc.Scan() {
			if sc.Text() == "```" {
				return b.String()
			}
			b.WriteString(sc.Text() + "\n")
		}
		t.Fatalf("README.md: the block after %s is not closed", marker)
	}
	t.Fatalf("README.md has no %s", marker)
	return ""
}

// README.md's install lines and first program run as written: in a fresh
// module, the install block (with /path/to/ephemeral this checkout, and no
// module proxy: nothing is downloaded), the program saved as main.go, then
// the run block (go mod tidy, go run .) against a real broker, printing
// exactly the output the README shows.
func TestReadmeFirstProgram(t *testing.T) {
	t.Parallel()
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.StartQueen(t, nil)
	dir := t.TempDir()
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local", "GOSUMDB=off") // offline: the module cache has the dependencies (xxhash, for owner routing), sum.golang.org is not reachable
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(what string, cmd *exec.Cmd) string {
		t.Helper()
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	install := strings.ReplaceAll(readmeBlock(t, "install"), "/path/to/ephemeral", root)
	run("the install lines", exec.CommandContext(ctx, "sh", "-e", "-c", install))
	program := readmeBlock(t, "first-program")
	if formatted, err := format.Source([]byte(program)); err != nil || string(formatted) != program {
		t.Errorf("README.md's first program is not gofmt'd (%v):\n%s", err, formatted)
	}
	program = strings.ReplaceAll(program, "http://localhost:6632", b.URL())
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", readmeBlock(t, "run"))
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod tidy, go run: %v\n%s%s", err, out, stderr.String())
	}
	if want := readmeBlock(t, "first-program-output"); string(out) != want {
		t.Fatalf("the first program printed:\n%s\nREADME.md says:\n%s", out, want)
	}
}
