package main

// The CLI's tests run the real queenctl binary against a real broker (T1):
// both are built once in TestMain, each test starts the broker it needs
// through internal/brokertest, and every case asserts stdout, stderr and
// the exit status.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// queenctl is the package the tests build and run beside the broker.
const queenctl = "./cmd/queenctl"

func TestMain(m *testing.M) { brokertest.Main(m, brokertest.Queen, queenctl) }

// result is one run of queenctl.
type result struct {
	stdout, stderr string
	code           int
}

// ctl runs queenctl with args against url (through QUEEN_URL, so the
// environment variable is what every test exercises), stdin as its
// standard input, and answers what it printed and its exit status.
func ctl(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t, queenctl), args...)
	cmd.Env = ctlEnv(url)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("queenctl %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ctlEnv is the environment queenctl runs with: none of the caller's
// QUEEN_ variables, and QUEEN_URL set to url.
func ctlEnv(url string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEEN_") {
			env = append(env, kv)
		}
	}
	return append(env, "QUEEN_URL="+url)
}

// want fails t unless r exited with code and its stderr contains errPart
// (when not empty).
func (r result) want(t *testing.T, what string, code int, errPart string) result {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, errPart) {
		t.Fatalf("%s: exit %d, stderr %q (stdout %q); want exit %d and stderr containing %q",
			what, r.code, r.stderr, r.stdout, code, errPart)
	}
	return r
}

// ok fails t unless r exited 0 with nothing on stderr.
func (r result) ok(t *testing.T, what string) result {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("%s: exit %d, stderr %q (stdout %q); want success", what, r.code, r.stderr, r.stdout)
	}
	return r
}

// fields splits the lines of a table into their columns.
func fields(s string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

// aligned fails t unless every line of the table tab starts its columns at
// the header's columns (what an aligned table is).
func aligned(t *testing.T, table string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	starts := func(l string) []int {
		var at []int
		for i := range l {
			if l[i] != ' ' && (i == 0 || (i >= 2 && l[i-1] == ' ' && l[i-2] == ' ')) {
				at = append(at, i)
			}
		}
		return at
	}
	head := starts(lines[0])
	for _, l := range lines[1:] {
		if got := starts(l); fmt.Sprint(got) != fmt.Sprint(head) {
			t.Fatalf("table not aligned: header columns at %v, line %q at %v\n%s", head, l, got, table)
		}
	}
}

func TestMessagesAndGauges(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()

	// push: arguments (JSON as it is, anything else as a string), then stdin.
	r := ctl(t, url, "", "push", "jobs", `{"a":1}`, "hello", "42").ok(t, "push args")
	if r.stdout != "pushed 3\n" {
		t.Fatalf("push stdout %q", r.stdout)
	}
	r = ctl(t, url, "{\"n\":1}\n\n{\"n\":2}\n", "push", "jobs", "--partition", "p1", "--json").ok(t, "push stdin")
	if r.stdout != `{"pushed":2}`+"\n" {
		t.Fatalf("push --json stdout %q", r.stdout)
	}
	// A line that is not JSON ends the push: what came before went in.
	r = ctl(t, url, "{\"n\":3}\nnot json\n{\"n\":4}\n", "push", "jobs", "--partition", "p2").
		want(t, "push bad stdin", 2, "error: stdin line 2: not one JSON value")
	if r.stdout != "pushed 1\n" {
		t.Fatalf("push bad stdin stdout %q", r.stdout)
	}
	ctl(t, url, "", "push", "jobs\x01", "x").want(t, "push bad name", 1, "error: 400 ephemeral_bad_request: ")

	// queues: an aligned table, and --json for machines.
	r = ctl(t, url, "", "queues").ok(t, "queues")
	rows := fields(r.stdout)
	if got := strings.Join(rows[0], " "); got != "QUEUE TIER DEPTH BYTES PARTITIONS GROUPS DROPS(BOUNDS/TTL/RETRY)" {
		t.Fatalf("queues header %q", got)
	}
	if got := strings.Join(rows[1], " "); !strings.HasPrefix(got, "jobs implicit 6 ") || !strings.HasSuffix(got, " 3 0 0/0/0") {
		t.Fatalf("queues row %q\n%s", got, r.stdout)
	}
	if !strings.HasPrefix(rows[2][0], "1") || rows[2][1] != "queues;" {
		t.Fatalf("queues footer %q", rows[2])
	}
	aligned(t, strings.Join(strings.Split(r.stdout, "\n")[:2], "\n"))
	r = ctl(t, url, "", "queues", "--json").ok(t, "queues --json")
	var list struct {
		Queues []struct {
			Queue string `json:"queue"`
			Depth int    `json:"depth"`
		} `json:"queues"`
		Count int `json:"count"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || list.Count != 1 || list.Queues[0].Depth != 6 {
		t.Fatalf("queues --json: %v %+v\n%s", err, list, r.stdout)
	}

	// depth: the queue, its partitions; 404 for a queue that is not there.
	r = ctl(t, url, "", "depth", "jobs").ok(t, "depth")
	blocks := strings.Split(r.stdout, "\n\n")
	if len(blocks) != 2 || !strings.Contains(blocks[0], "jobs   implicit  (none)  6") {
		t.Fatalf("depth stdout:\n%s", r.stdout)
	}
	aligned(t, blocks[1])
	if p := fields(blocks[1]); len(p) != 4 || strings.Join(p[1], " ") != "Default 3 16" || p[2][0] != "p1" || p[3][0] != "p2" {
		t.Fatalf("depth partitions %q", p)
	}
	ctl(t, url, "", "depth", "nope").want(t, "depth of a missing queue", 1, "error: 404 ephemeral_queue_not_found: ")
	ctl(t, url, "", "depth", "jobs", "--json").ok(t, "depth --json")

	// pop: refusals and usage errors first.
	ctl(t, url, "", "pop", "bad\nname").want(t, "pop bad queue name", 1, "error: 400 ephemeral_bad_request: ")
	ctl(t, url, "", "pop", "jobs", "--group", strings.Repeat("g", 600)).want(t, "pop long group", 1, "error: 400 ephemeral_bad_request: ")
	ctl(t, url, "", "pop").want(t, "pop without a queue", 2, "error: accepts 1 arg(s), received 0")
	ctl(t, url, "", "pop", "jobs", "--ack", "--auto-ack").want(t, "pop --ack --auto-ack", 2, "exclude each other")
	ctl(t, url, "", "pop", "jobs", "--batch", "x").want(t, "pop --batch x", 2, `invalid argument "x" for "--batch"`)

	// pop with a group, leased; the ids acked by ack.
	r = ctl(t, url, "", "pop", "jobs", "--group", "g1", "--batch", "10", "--partition", "Default", "--json").ok(t, "pop --json")
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m printedMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil || m.Queue != "jobs" || m.Partition != "Default" {
			t.Fatalf("pop --json line %q: %v", l, err)
		}
		ids = append(ids, m.ID)
	}
	if len(ids) != 3 {
		t.Fatalf("pop --json: %d messages, want 3\n%s", len(ids), r.stdout)
	}
	r = ctl(t, url, "", append([]string{"ack", "jobs", "--group", "g1"}, ids[:2]...)...).ok(t, "ack")
	aligned(t, r.stdout)
	if want := fmt.Sprintf("ID OUTCOME\n%s acked\n%s acked", ids[0], ids[1]); tableText(r.stdout) != want {
		t.Fatalf("ack stdout %q, want %q", tableText(r.stdout), want)
	}
	r = ctl(t, url, ids[2]+"\n"+ids[0]+"\n", "ack", "jobs", "--group", "g1", "--status", "retry", "--json", "-").ok(t, "ack - --json")
	if r.stdout != fmt.Sprintf(`{"results":[{"id":%q,"outcome":"redelivered"},{"id":%q,"outcome":"unknown"}]}`+"\n", ids[2], ids[0]) {
		t.Fatalf("ack --json stdout %q", r.stdout)
	}
	ctl(t, url, "", "ack", "jobs", ids[2], "--status", "done").want(t, "ack --status done", 2, `--status "done": want completed, failed or retry`)

	// The redelivered message, as a table, acked by --ack.
	r = ctl(t, url, "", "pop", "jobs", "--group", "g1", "--partition", "Default", "--ack")
	r.want(t, "pop --ack", 0, "acked 1 of 1")
	if rows := fields(r.stdout); len(rows) != 2 || strings.Join(rows[0], " ") != "ID PARTITION ATTEMPTS PAYLOAD" ||
		rows[1][0] != ids[2] || rows[1][2] != "1" || rows[1][3] != "42" {
		t.Fatalf("pop --ack stdout %q", r.stdout)
	}
	// Queue mode with autoAck, then a waiting pop that finds nothing.
	r = ctl(t, url, "", "pop", "jobs", "--auto-ack", "--batch", "100", "--json").ok(t, "pop --auto-ack")
	if n := strings.Count(r.stdout, "\n"); n != 6 {
		t.Fatalf("pop --auto-ack: %d messages, want 6\n%s", n, r.stdout)
	}
	start := time.Now()
	r = ctl(t, url, "", "pop", "jobs", "--wait", "--timeout", "300ms").ok(t, "pop --wait on an empty queue")
	if r.stdout != "" || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("pop --wait: stdout %q after %s", r.stdout, time.Since(start))
	}

	// Usage errors and a broker that is not there.
	ctl(t, url, "", "frobnicate").want(t, "unknown command", 2, `error: unknown command "frobnicate"`)
	ctl(t, url, "", "queues", "--header", "novalue").want(t, "--header without =", 2, `--header "novalue": want name=value`)
	ctl(t, url, "", "--url", "ftp://x", "queues").want(t, "bad --url", 2, "want http(s)://host[:port]")
	dead := "http://127.0.0.1:" + fmt.Sprint(brokertest.Port(t))
	ctl(t, dead, "", "queues").want(t, "no broker", 3, "connection refused")
	ctl(t, url, "", "--url", dead, "push", "q", "x").want(t, "--url wins over QUEEN_URL", 3, "connection refused")

	// A server that accepts and never answers: --timeout bounds the call.
	silent := brokertest.SilentServer(t)
	start = time.Now()
	ctl(t, "http://"+silent, "", "--timeout", "300ms", "queues").want(t, "silent server", 3, "timeout")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("--timeout 300ms took %s", d)
	}
}

// tableText is a table with its runs of spaces collapsed to one.
func tableText(s string) string {
	var lines []string
	for _, f := range fields(s) {
		lines = append(lines, strings.Join(f, " "))
	}
	return strings.Join(lines, "\n")
}

// started is a queenctl left running: its stdout read line by line.
type started struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *brokertest.LockedBuffer
	done   chan struct{}
}

// startCtl starts queenctl with args and leaves it running; it is killed
// when the test ends.
func startCtl(t *testing.T, url string, args ...string) *started {
	t.Helper()
	cmd := exec.Command(brokertest.Binary(t, queenctl), args...)
	cmd.Env = ctlEnv(url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &started{cmd: cmd, lines: make(chan string, 100), stderr: &brokertest.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	go func() { _ = cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *started) line(t *testing.T, what string) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			t.Fatalf("%s: queenctl ended (stderr %q)", what, s.stderr.String())
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no line within 10 s (stderr %q)", what, s.stderr.String())
	}
	return ""
}

// exit waits for the process and answers its exit status.
func (s *started) exit(t *testing.T, what string) int {
	t.Helper()
	select {
	case <-s.done:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: queenctl did not exit within 10 s (stderr %q)", what, s.stderr.String())
	}
	return -1
}

func TestTail(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()
	ctl(t, url, "", "push", "feed", `"before"`).ok(t, "push before tail")

	tail := startCtl(t, url, "tail", "feed")
	tailJSON := startCtl(t, url, "--json", "tail", "feed", "--partition", "p")
	// A fresh group starts at the oldest message held.
	if l := tail.line(t, "retained message"); l != `"before"` {
		t.Fatalf("tail printed %q, want the retained message", l)
	}
	for i := range 3 {
		ctl(t, url, "", "push", "feed", "--partition", "p", fmt.Sprintf(`{"i":%d}`, i)).ok(t, "push while tailing")
		if l := tail.line(t, "pushed message"); l != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("tail printed %q after push %d", l, i)
		}
		var m printedMessage
		if l := tailJSON.line(t, "pushed message (json)"); json.Unmarshal([]byte(l), &m) != nil ||
			m.Queue != "feed" || m.Partition != "p" || string(m.Payload) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("tail --json printed %q after push %d", l, i)
		}
	}
	// An interrupt is how tail ends: exit 0.
	_ = tail.cmd.Process.Signal(syscall.SIGINT)
	if code := tail.exit(t, "tail after SIGINT"); code != 0 {
		t.Fatalf("tail exited %d after SIGINT (stderr %q)", code, tail.stderr.String())
	}
	// tail took nothing from the queue's consumers: a group of its own
	// still receives every message.
	r := ctl(t, url, "", "pop", "feed", "--group", "workers", "--batch", "10", "--json").ok(t, "workers pop")
	if n := strings.Count(r.stdout, "\n"); n != 4 {
		t.Fatalf("workers received %d messages after tail, want 4", n)
	}
	// --count: exit after that many.
	r = ctl(t, url, "", "tail", "feed", "--partition", "p", "--count", "2").ok(t, "tail --count")
	if r.stdout != "{\"i\":0}\n{\"i\":1}\n" {
		t.Fatalf("tail --count 2 stdout %q", r.stdout)
	}
	ctl(t, url, "", "tail", "bad\x7fname").want(t, "tail a bad name", 1, "error: 400 ephemeral_bad_request: ")
}

func TestRequestReply(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()

	upper := startCtl(t, url, "reply", "--max", "3", "upper", "tr", "a-z", "A-Z")
	echo := startCtl(t, url, "reply", "echo", "cat")
	words := startCtl(t, url, "reply", "words", "sh", "-c", "wc -c | tr -d ' '")
	failing := startCtl(t, url, "reply", "broken", "false")

	// The responders are parked before the requests go (a request to a
	// queue nobody serves yet would wait in it anyway, within --timeout).
	r := ctl(t, url, "", "request", "upper", `"hello"`).ok(t, "request upper")
	if r.stdout != "\"HELLO\"\n" {
		t.Fatalf("request upper: %q", r.stdout)
	}
	r = ctl(t, url, `{"name":"queen"}`, "request", "upper").ok(t, "request upper from stdin")
	if r.stdout != "{\"NAME\":\"QUEEN\"}\n" {
		t.Fatalf("request upper (stdin): %q", r.stdout)
	}
	r = ctl(t, url, "", "request", "echo", `{"a":[1,2]}`).ok(t, "request echo")
	if r.stdout != "{\"a\":[1,2]}\n" {
		t.Fatalf("request echo: %q", r.stdout)
	}
	// Output that is not JSON comes back as a string; wc counts the
	// payload and the newline reply adds.
	r = ctl(t, url, "", "request", "words", "abc").ok(t, "request words")
	if r.stdout != "6\n" { // `"abc"` and a newline: 6 bytes, and 6 is JSON
		t.Fatalf("request words: %q", r.stdout)
	}
	// --max 3: the third reply ends the responder, exit 0.
	ctl(t, url, "", "request", "upper", "x").ok(t, "third request")
	if code := upper.exit(t, "reply --max 3"); code != 0 {
		t.Fatalf("reply --max exited %d (stderr %q)", code, upper.stderr.String())
	}

	// A command that fails sends no reply: the request exits 4, and the
	// responder reports it and goes on.
	ctl(t, url, "", "request", "broken", "x", "--timeout", "500ms").want(t, "request to a failing command", 4, "error: no reply within 500ms")
	ctl(t, url, "", "request", "nobody", "x", "--timeout", "200ms").want(t, "request nobody serves", 4, "no reply within 200ms")
	ctl(t, url, "", "request", "bad\x01q", "x").want(t, "request to a bad name", 1, "error: 400 ephemeral_bad_request: ")
	ctl(t, url, "", "reply", "q", "no-such-command-here").want(t, "reply with a missing command", 2, "no-such-command-here")

	_ = echo.cmd.Process.Signal(syscall.SIGTERM)
	if code := echo.exit(t, "reply after SIGTERM"); code != 0 {
		t.Fatalf("reply exited %d after SIGTERM", code)
	}
	_ = words.cmd.Process.Signal(syscall.SIGINT)
	words.exit(t, "reply after SIGINT")
	if !strings.Contains(failing.stderr.String(), "exit status 1") {
		t.Fatalf("the failing responder's stderr %q does not report the command's failure", failing.stderr.String())
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	// Mode none without an admin token: a loopback client is the operator.
	url := brokertest.StartQueen(t, nil).URL()
	r := ctl(t, url, "", "pause", "--retry-after", "2s").ok(t, "pause")
	if r.stdout != "ephemeral surface paused (clients told to retry after 2 s)\n" {
		t.Fatalf("pause stdout %q", r.stdout)
	}
	ctl(t, url, "", "push", "q", "x").want(t, "push while paused", 1, "error: 503 ephemeral_disabled: ")
	ctl(t, url, "", "pop", "q").want(t, "pop while paused", 1, "(retry after 2s)")
	r = ctl(t, url, "", "resume", "--json").ok(t, "resume")
	if r.stdout != `{"enabled":true,"retryAfterSeconds":0}`+"\n" {
		t.Fatalf("resume --json stdout %q", r.stdout)
	}
	ctl(t, url, "", "push", "q", "x").ok(t, "push after resume")

	// A waiting pop cut short by Ctrl-C: 130, the shell's convention.
	pop := startCtl(t, url, "pop", "empty", "--wait", "--timeout", "20s")
	time.Sleep(300 * time.Millisecond) // parked
	_ = pop.cmd.Process.Signal(syscall.SIGINT)
	if code := pop.exit(t, "pop after SIGINT"); code != 130 || !strings.Contains(pop.stderr.String(), "error: interrupted") {
		t.Fatalf("interrupted pop: exit %d, stderr %q; want 130 and error: interrupted", code, pop.stderr.String())
	}
	ctl(t, url, "", "pause", "extra").want(t, "pause with an argument", 2, "accepts 0 arg(s), received 1")
}

func TestGrantsAndGatewayHeaders(t *testing.T) {
	t.Parallel()
	// Gateway mode: the tenant comes from the --header flags, a grant is
	// required, and the system routes need the admin token (--token or
	// QUEEN_TOKEN).
	url := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE": "gateway", "QUEEN_GATEWAY_SECRET": "gw", "QUEEN_ADMIN_TOKEN": "adm",
	}).URL()
	acme := []string{"--header", "X-Queen-Gateway-Secret=gw", "--header", "X-Queen-Tenant=acme", "--header", "X-Queen-Access=read-write"}
	as := func(args ...string) []string { return append(append([]string{}, acme...), args...) }

	ctl(t, url, "", "push", "q", "x").want(t, "push without the gateway's headers", 1, "error: 401 unauthorized: ")
	ctl(t, url, "", as("push", "q", "x")...).want(t, "push without a grant", 1, "error: 403 feature_gated: ")
	ctl(t, url, "", "grant", "get", "acme").want(t, "grant get without the token", 1, "error: 401 unauthorized: ")
	ctl(t, url, "", "--token", "adm", "grant", "get", "acme").want(t, "grant get of none", 1, "error: 404 grant_not_found: ")

	r := ctl(t, url, "", "--token", "adm", "grant", "set", "acme", "--max-queues", "1", "--max-bytes", "1048576").ok(t, "grant set")
	aligned(t, r.stdout)
	if got := tableText(r.stdout); got != "TENANT MAX BYTES MAX QUEUES MESSAGES/S\nacme 1048576 1 unlimited" {
		t.Fatalf("grant set stdout %q", got)
	}
	ctl(t, url, "", as("push", "q", "x")...).ok(t, "push with a grant")
	// The allowance of one queue holds.
	ctl(t, url, "", as("push", "q2", "x")...).want(t, "push past maxQueues", 1, "error: 403 ephemeral_quota_exceeded: ")

	// QUEEN_TOKEN works as --token does.
	cmd := exec.Command(brokertest.Binary(t, queenctl), "grant", "get", "acme", "--json")
	cmd.Env = append(ctlEnv(url), "QUEEN_TOKEN=adm")
	out, err := cmd.Output()
	if err != nil || string(out) != `{"tenant":"acme","maxBytes":1048576,"maxQueues":1,"messagesPerSecond":0}`+"\n" {
		t.Fatalf("grant get with QUEEN_TOKEN: %q, %v", out, err)
	}
	ctl(t, url, "", "--token", "adm", "grant", "set", "acme", "--max-queues", "-1").want(t, "negative allowance", 2, "non-negative")
	ctl(t, url, "", "--token", "adm", "grant", "set", "bad\x01tenant").want(t, "bad tenant name", 1, "error: 400 bad_request: ")

	r = ctl(t, url, "", "--token", "adm", "grant", "delete", "acme").ok(t, "grant delete")
	if r.stdout != "grant of acme deleted\n" {
		t.Fatalf("grant delete stdout %q", r.stdout)
	}
	r = ctl(t, url, "", "--token", "adm", "grant", "delete", "acme").ok(t, "grant delete again")
	if r.stdout != "acme had no grant\n" {
		t.Fatalf("grant delete again stdout %q", r.stdout)
	}
	ctl(t, url, "", as("push", "q", "x")...).want(t, "push after the grant is deleted", 1, "error: 403 feature_gated: ")

	// The kill switch needs the operator here too; a tenant's read-write
	// credential is not enough.
	ctl(t, url, "", as("pause")...).want(t, "pause as a tenant", 1, "error: 403 forbidden: ")
	ctl(t, url, "", "--token", "adm", "pause").ok(t, "pause with the token")
	ctl(t, url, "", as("push", "q", "x")...).want(t, "push while paused", 1, "error: 503 ephemeral_disabled: ")
	ctl(t, url, "", "--token", "adm", "resume").ok(t, "resume with the token")
}

// ansi matches the escape sequences a terminal program writes: CSI (colours,
// cursor moves, modes) and OSC (titles, queries).
var ansi = regexp.MustCompile(`\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>78M]`)

func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// readUntil reads r (a terminal's output) into buf until the stripped text
// matches re, and answers that text.
func readUntil(t *testing.T, out *brokertest.LockedBuffer, re *regexp.Regexp, what string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s := stripANSI(out.String()); re.MatchString(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: the terminal never showed %s; it showed:\n%s", what, re, stripANSI(out.String()))
	return ""
}

// emulate reads a program's terminal output into b until the terminal
// closes, answering the one query a terminal must answer: the cursor
// position report (ESC [ 6 n). Bubble Tea (through termenv) asks for the
// background colour and then the cursor position at start, and waits up
// to 5 s for an answer; a real terminal answers at once, and a CPR with no
// colour report says "no OSC support", which ends the wait.
func emulate(b *brokertest.LockedBuffer, term io.ReadWriter) {
	buf := make([]byte, 4096)
	var tail []byte // the last bytes read, for a query split across reads
	for {
		n, err := term.Read(buf)
		if n > 0 {
			_, _ = b.Write(buf[:n])
			tail = append(tail, buf[:n]...)
			for {
				i := bytes.Index(tail, []byte("\x1b[6n"))
				if i < 0 {
					break
				}
				_, _ = term.Write([]byte("\x1b[1;1R"))
				tail = tail[i+4:]
			}
			if len(tail) > 3 {
				tail = tail[len(tail)-3:]
			}
		}
		if err != nil {
			return
		}
	}
}

// --version prints the CLI's build as `queen --version` prints the
// broker's (internal/buildinfo): name and version, commit, toolchain.
func TestVersion(t *testing.T) {
	r := ctl(t, "http://127.0.0.1:1", "", "--version").ok(t, "queenctl --version")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "queenctl ") || !strings.HasPrefix(lines[1], "commit ") ||
		lines[2] != "go "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("queenctl --version printed %q", r.stdout)
	}
}
