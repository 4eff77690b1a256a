// Package examples_test runs the example programs against a fresh broker
// each (started on a free loopback port, the URL passed in QUEEN_URL) and
// checks what they print.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// The example programs, built with the broker before the tests.
const (
	basics   = "./examples/35-ephemeral-basics"
	reqReply = "./examples/36-ephemeral-reqreply"
)

func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen, basics, reqReply) }

// startBroker starts a broker with a fresh data directory on a free port
// and answers its URL; it is killed when the test ends.
func startBroker(t *testing.T) string {
	t.Helper()
	return brokertest.StartQueen(t, nil).URL()
}

// run runs argv with QUEEN_URL=url and answers its standard output lines.
func run(t *testing.T, url string, argv ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "."
	cmd.Env = append(os.Environ(), "QUEEN_URL="+url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, stdout.String(), stderr.String())
	}
	return strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
}

// checkBasics checks the output of example 35 in either language: the
// listing and the depth read are JSON in Go and may be anything (Node's
// util.inspect) in JavaScript, so only their mention of the queue is
// checked there.
func checkBasics(t *testing.T, lines []string, jsonLines bool) {
	t.Helper()
	if len(lines) < 7 {
		t.Fatalf("%d lines, want at least 7:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	head, tail := lines[0], lines[len(lines)-4:]
	if head != "pushed 2" {
		t.Fatalf("first line %q, want %q", head, "pushed 2")
	}
	want := []string{"popped alice, bob", "outcomes acked, acked", "the audit group saw 2", "reset dropped 2"}
	for i := range want {
		if tail[i] != want[i] {
			t.Fatalf("line %q, want %q; output:\n%s", tail[i], want[i], strings.Join(lines, "\n"))
		}
	}
	middle := strings.Join(lines[1:len(lines)-4], "\n")
	if !strings.Contains(middle, "presence") || !strings.Contains(middle, "room-7") {
		t.Fatalf("the listing and the depth read do not show the queue and its partition:\n%s", middle)
	}
	if !jsonLines {
		return
	}
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	var listing struct {
		Queues []struct {
			Queue string
			Tier  string
			Depth int
		}
		Count int
	}
	if err := json.Unmarshal([]byte(lines[1]), &listing); err != nil || listing.Count != 1 || listing.Queues[0].Queue != "presence" || listing.Queues[0].Tier != "declared" || listing.Queues[0].Depth != 2 {
		t.Fatalf("listing line %s (%v)", lines[1], err)
	}
	var depth struct {
		Queue      string
		Pending    int
		Partitions []struct{ Partition string }
	}
	if err := json.Unmarshal([]byte(lines[2]), &depth); err != nil || depth.Queue != "presence" || depth.Pending != 2 || len(depth.Partitions) != 1 || depth.Partitions[0].Partition != "room-7" {
		t.Fatalf("depth line %s (%v)", lines[2], err)
	}
}

var reqReplyOutput = []string{
	"reply hello, alice",
	"reply hello, bob",
	"5 concurrent replies",
	"no reply from nobody: timed out",
}

func checkReqReply(t *testing.T, lines []string) {
	t.Helper()
	if strings.Join(lines, "\n") != strings.Join(reqReplyOutput, "\n") {
		t.Fatalf("output:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(reqReplyOutput, "\n"))
	}
}

func TestGoBasics(t *testing.T) {
	t.Parallel()
	url := startBroker(t)
	checkBasics(t, run(t, url, brokertest.Binary(t, basics)), true)
}

func TestGoReqReply(t *testing.T) {
	t.Parallel()
	url := startBroker(t)
	checkReqReply(t, run(t, url, brokertest.Binary(t, reqReply)))
}

// findNode answers node's path, or why it cannot run the examples: queen-mq
// needs Node 20.3 or later (AbortSignal.any).
func findNode() (path, why string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "node is not on PATH"
	}
	out, err := exec.Command(node, "-e", "process.stdout.write(typeof AbortSignal.any)").Output()
	if err != nil || string(out) != "function" {
		return "", "node is older than 20.3"
	}
	return node, ""
}

// nodeExample prepares a directory where `import 'queen-mq'` resolves to
// ../clients/js (what `npm install` in examples/ does with a link) and
// answers the command that runs the example there.
func nodeExample(t *testing.T, file string) []string {
	t.Helper()
	node, why := findNode()
	if why != "" {
		if os.Getenv("QUEEN_TEST_REQUIRE_NODE") == "1" {
			t.Fatal(why)
		}
		t.Skip(why + " (QUEEN_TEST_REQUIRE_NODE=1 makes this a failure)")
	}
	pkg, err := filepath.Abs(filepath.Join("..", "clients", "js"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pkg, filepath.Join(dir, "node_modules", "queen-mq")); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(dst, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{node, dst}
}

func TestJSBasics(t *testing.T) {
	t.Parallel()
	argv := nodeExample(t, "35-ephemeral-basics.js")
	url := startBroker(t)
	checkBasics(t, run(t, url, argv...), false)
}

func TestJSReqReply(t *testing.T) {
	t.Parallel()
	argv := nodeExample(t, "36-ephemeral-reqreply.js")
	url := startBroker(t)
	checkReqReply(t, run(t, url, argv...))
}
