package main

import (
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// An argument that starts like JSON but does not parse is a usage error
// that says where it fails, and nothing of the push goes in; --raw sends
// such text as a string on purpose, from arguments and from stdin.
func TestPushBrokenJSONArgument(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{`{"id":`}, `error: payload 1 starts like JSON but is not: unexpected end of JSON input at byte 6 of "{\"id\":"; fix it, or send it as a string with --raw`},
		{[]string{`{"ok":1}`, `[1,2`}, `error: payload 2 starts like JSON but is not: unexpected end of JSON input at byte 4`},
		{[]string{`"abc`}, `error: payload 1 starts like JSON but is not: unexpected end of JSON input`},
		{[]string{`{"a":1}}`}, `error: payload 1 starts like JSON but is not: invalid character '}' after top-level value at byte 8`},
		{[]string{` {'a':1}`}, `error: payload 1 starts like JSON but is not: invalid character '\'' looking for beginning of object key string at byte 3`},
	} {
		r := ctl(t, url, "", append([]string{"push", "jobs"}, c.args...)...).want(t, "push "+strings.Join(c.args, " "), 2, c.want)
		if r.stdout != "" {
			t.Errorf("push %v: stdout %q, want nothing", c.args, r.stdout)
		}
	}
	// Nothing went in: not even the valid payload before the broken one.
	ctl(t, url, "", "depth", "jobs").want(t, "depth after refused pushes", 1, "404 ephemeral_queue_not_found")
	ctl(t, url, "", "request", "calc", `{"a":`, "--timeout", "1s").want(t, "request with a broken payload", 2, "error: the payload starts like JSON but is not")
	ctl(t, url, `{"a":`+"\n", "request", "calc", "--timeout", "1s").want(t, "request with a broken stdin", 2, "error: stdin starts like JSON but is not")

	// Words are still strings, and --raw sends anything as a string.
	ctl(t, url, "", "push", "jobs", "hello", "--raw", `{"id":`, `{"ok":1}`).ok(t, "push --raw")
	ctl(t, url, "{\"n\":\n", "push", "jobs", "--raw").ok(t, "push --raw stdin")
	r := ctl(t, url, "", "pop", "jobs", "--batch", "10", "--auto-ack", "--json").ok(t, "pop the raw payloads")
	for _, p := range []string{`"payload":"hello"`, `"payload":"{\"id\":"`, `"payload":"{\"ok\":1}"`, `"payload":"{\"n\":"`} {
		if !strings.Contains(r.stdout, p) {
			t.Errorf("pop: no %s in\n%s", p, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "\n"); n != 4 {
		t.Errorf("pop: %d messages, want 4\n%s", n, r.stdout)
	}
}

// A pop of a queue that does not exist says so on stderr and still pops
// (the broker makes an implicit queue); a pop of one that exists says
// nothing. README's "push two, then pop them with --ack" acks both.
func TestPopSaysWhenTheQueueIsMissing(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()
	r := ctl(t, url, "", "pop", "nosuch").want(t, "pop nosuch", 0, "queenctl: queue nosuch does not exist; this pop creates it as an implicit queue")
	if r.stdout != "" {
		t.Fatalf("pop nosuch: stdout %q", r.stdout)
	}
	ctl(t, url, "", "depth", "nosuch").ok(t, "the pop made the queue")
	ctl(t, url, "", "pop", "nosuch").ok(t, "a second pop of the now implicit queue")

	ctl(t, url, "", "push", "jobs", `{"id":1}`, `{"id":2}`).ok(t, "push two")
	r = ctl(t, url, "", "pop", "jobs", "--group", "workers", "--batch", "10", "--ack").want(t, "pop --batch 10 --ack", 0, "acked 2 of 2")
	if n := len(fields(r.stdout)); n != 3 {
		t.Fatalf("pop --ack printed %d lines, want a header and 2 messages:\n%s", n, r.stdout)
	}
}
