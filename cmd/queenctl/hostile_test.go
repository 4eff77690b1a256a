package main

// queenctl against a server that is not a broker, or not an honest one: a
// fake (httptest) that puts terminal escape sequences in every string it
// answers, and servers that never answer.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// What a hostile server sends: OSC 52 writes the clipboard (here
// "rm -rf ~"), OSC 0 sets the window title, CSI 2J clears the screen,
// U+009B is the C1 form of CSI, U+202E reverses what follows.
const (
	osc52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
	osc0  = "\x1b]0;owned\x07"
	cls   = "\x1b[2J"
	c1csi = "\u009b31m"
	rlo   = "\u202e"
)

// The strings the fake answers, and how queenctl must show them.
var (
	evilQueue     = "jobs" + osc52 + cls + c1csi + rlo + "gpj.exe"
	evilQueueSeen = `jobs\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u009b31m\u202egpj.exe`
	evilTier      = osc0
	evilTierSeen  = `\x1b]0;owned\x07`
	evilText      = "refused" + cls + osc52 + rlo + "\r\n" + c1csi
	evilTextSeen  = `refused\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\u202e\x0d\x0a\u009b31m`
	// evilPayload is valid JSON: its escape sequences are JSON escapes
	// (harmless as text), but the C1 CSI and the override are raw UTF-8
	// inside a string and a carriage return stands between two values.
	evilPayload     = "{\"t\":\"\\u001b]52;c;cm0gLXJmIH4=\\u0007\",\r\"c1\":\"\u009b31m\",\"b\":\"" + rlo + "gpj.exe\"}"
	evilPayloadSeen = `{"t":"\u001b]52;c;cm0gLXJmIH4=\u0007","c1":"\u009b31m","b":"\u202egpj.exe"}`
	// A message id with a raw escape sequence (the SDK takes an id without
	// JSON escapes as it stands).
	evilID     = "e:1:" + osc0
	evilIDSeen = `e:1:\x1b]0;owned\x07`
	// A payload that is not JSON at all.
	rawPayload     = "\x1b]52;c;cm0gLXJmIH4=\x07"
	rawPayloadSeen = `\x1b]52;c;cm0gLXJmIH4=\x07`
)

// hostileServer answers every route queenctl calls with evil strings. The
// queue named in a push or pop picks the answer: "refused" a JSON refusal,
// "proxy" a refusal that is not JSON, "raw" a payload that is not JSON,
// "held" (and its inbox) no answer until the client goes; any other queue
// is answered. queuesFail makes every listing after the first a refusal.
func hostileServer(t *testing.T, queuesFail bool) *httptest.Server {
	t.Helper()
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	answer := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	refuse := func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "7")
		answer(w, 503, js(map[string]string{"error": evilText, "code": "queue_full" + cls}))
	}
	message := func(payload string) string {
		return `{"messages":[{"id":"` + evilID + `","partition":` + js(evilQueue) + `,"attempts":2,"payload":` + payload + `}]}`
	}
	var listings, heldPush atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/ephemeral/queues", func(w http.ResponseWriter, r *http.Request) {
		if listings.Add(1) > 1 && queuesFail {
			refuse(w)
			return
		}
		answer(w, 200, js(map[string]any{"queues": []map[string]any{{
			"queue": evilQueue, "tier": evilTier, "depth": 3, "bytes": 42, "partitions": 1, "groups": 1,
			"drops": map[string]int{"bounds": 0, "ttl": 1, "retry": 0},
		}}, "count": 1, "cellBytes": 4096}))
	})
	mux.HandleFunc("GET /api/v1/ephemeral/queues/{queue}/depth", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, js(map[string]any{"queue": evilQueue, "group": evilText, "tier": evilTier, "pending": 3,
			"partitionsPending": 1, "bytes": 42,
			"partitions": []map[string]any{{"partition": evilQueue, "pending": 3, "bytes": 42}},
			"groups":     []map[string]any{{"group": evilTier, "pending": 3, "skipped": 0}}}))
	})
	mux.HandleFunc("POST /api/v1/ephemeral/push", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Queue string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch body.Queue {
		case "refused":
			refuse(w)
		case "proxy":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, "Bad Gateway "+osc0+cls)
		case "silent":
			<-r.Context().Done()
		default:
			if body.Queue == "held" {
				heldPush.Add(1)
			}
			answer(w, 200, `{"pushed":1}`)
		}
	})
	mux.HandleFunc("GET /api/v1/ephemeral/pop", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query().Get("queue")
		switch {
		case q == "raw":
			answer(w, 200, message(`"`+rawPayload+`"`))
		case strings.HasPrefix(q, "inbox-") && heldPush.Load() > 0:
			<-r.Context().Done() // the request's reply never comes, nor an empty answer
		case q == "serve" && r.URL.Query().Get("group") == "":
			// A request whose command fails: the responder reports it.
			answer(w, 200, message(`{"replyTo":"inbox-x","payload":1}`))
		default:
			answer(w, 200, message(evilPayload))
		}
	})
	mux.HandleFunc("POST /api/v1/ephemeral/ack", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, js(map[string]any{"results": []map[string]string{{"id": evilID, "outcome": evilTier}}}))
	})
	mux.HandleFunc("GET /api/v1/system/ephemeral", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, `{"enabled":true,"retryAfterSeconds":0}`)
	})
	mux.HandleFunc("GET /api/v1/system/ephemeral/grants/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, js(map[string]any{"tenant": evilQueue, "maxBytes": 1, "maxQueues": 0, "messagesPerSecond": 0}))
	})
	mux.HandleFunc("DELETE /api/v1/system/ephemeral/grants/{tenant}", func(w http.ResponseWriter, r *http.Request) {
		answer(w, 200, js(map[string]any{"tenant": evilQueue, "deleted": true}))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// shows fails t unless r's output (stdout and stderr) holds nothing a
// terminal acts on and contains each of seen.
func (r result) shows(t *testing.T, what string, seen ...string) result {
	t.Helper()
	inert(t, what+" (stdout)", r.stdout)
	inert(t, what+" (stderr)", r.stderr)
	for _, s := range seen {
		if !strings.Contains(r.stdout+r.stderr, s) {
			t.Fatalf("%s: the output does not show %s\nstdout %s\nstderr %s", what, s, r.stdout, r.stderr)
		}
	}
	return r
}

// TestHostileServerText: every command that prints the server's strings
// for people shows their escape sequences, C1 controls and bidi overrides
// escaped, in tables, payloads, the top frame and error lines alike.
func TestHostileServerText(t *testing.T) {
	t.Parallel()
	url := hostileServer(t, false).URL

	ctl(t, url, "", "queues").ok(t, "queues").shows(t, "queues", evilQueueSeen, evilTierSeen)
	ctl(t, url, "", "depth", "jobs").ok(t, "depth").shows(t, "depth", evilQueueSeen, evilTierSeen, evilTextSeen)
	ctl(t, url, "", "pop", "jobs").ok(t, "pop").shows(t, "pop", evilIDSeen, evilQueueSeen, evilPayloadSeen)
	ctl(t, url, "", "pop", "raw").ok(t, "pop of a payload that is not JSON").shows(t, "pop raw", `"`+rawPayloadSeen+`"`)
	r := ctl(t, url, "", "pop", "jobs", "--ack").want(t, "pop --ack", 0, "acked 0 of 1")
	r.shows(t, "pop --ack", evilPayloadSeen)
	ctl(t, url, "", "ack", "jobs", "e:1").ok(t, "ack").shows(t, "ack", evilIDSeen, evilTierSeen)
	r = ctl(t, url, "", "tail", "jobs", "--count", "1").ok(t, "tail").shows(t, "tail", evilPayloadSeen)
	if r.stdout != evilPayloadSeen+"\n" {
		t.Fatalf("tail printed %q, want %q", r.stdout, evilPayloadSeen+"\n")
	}
	r = ctl(t, url, "", "request", "rpc", "1").ok(t, "request").shows(t, "request")
	if r.stdout != evilPayloadSeen+"\n" {
		t.Fatalf("request printed %q, want %q", r.stdout, evilPayloadSeen+"\n")
	}
	ctl(t, url, "", "grant", "get", "acme").ok(t, "grant get").shows(t, "grant get", evilQueueSeen)
	ctl(t, url, "", "grant", "delete", "acme").ok(t, "grant delete").shows(t, "grant delete", "grant of "+evilQueueSeen+" deleted")
	ctl(t, url, "", "top", "--once", "--width", "200").ok(t, "top --once").
		shows(t, "top --once", evilQueueSeen[:38], evilTierSeen)

	// Error lines: a refusal's code and message, a body that is not JSON.
	ctl(t, url, "", "push", "refused", "x").want(t, "a refused push", 1,
		"error: 503 queue_full"+`\x1b[2J`+": "+evilTextSeen+" (retry after 7s)\n").shows(t, "a refused push")
	ctl(t, url, "", "push", "proxy", "x").want(t, "a refusal that is not JSON", 1,
		"error: 502 : Bad Gateway "+evilTierSeen+`\x1b[2J`+"\n").shows(t, "a refusal that is not JSON")
	ctl(t, url, "", "request", "refused", "x").want(t, "a refused request", 1, evilTextSeen).shows(t, "a refused request")

	// The responder's report of a request its command failed.
	reply := startCtl(t, url, "reply", "serve", "false")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(reply.stderr.String(), "request "+evilIDSeen+": false: exit status 1") {
		if time.Now().After(deadline) {
			t.Fatalf("reply never reported the failed command; stderr %q", reply.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	inert(t, "reply's stderr", reply.stderr.String())
}

// TestHostileServerJSON: --json prints exact JSON, escaped where a
// terminal would act on a character, that parses back to the very
// strings the server sent; a payload that is not JSON is not passed off
// as one (exit 3).
func TestHostileServerJSON(t *testing.T) {
	t.Parallel()
	url := hostileServer(t, false).URL

	var list struct {
		Queues []struct{ Queue, Tier string }
	}
	r := ctl(t, url, "", "queues", "--json").ok(t, "queues --json").shows(t, "queues --json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Queues) != 1 ||
		list.Queues[0].Queue != evilQueue || list.Queues[0].Tier != evilTier {
		t.Fatalf("queues --json %q: %v %+v", r.stdout, err, list)
	}
	var depth struct {
		Queue, Group string
		Partitions   []struct{ Partition string }
	}
	r = ctl(t, url, "", "depth", "jobs", "--json").ok(t, "depth --json").shows(t, "depth --json")
	if err := json.Unmarshal([]byte(r.stdout), &depth); err != nil || depth.Queue != evilQueue ||
		depth.Group != evilText || len(depth.Partitions) != 1 || depth.Partitions[0].Partition != evilQueue {
		t.Fatalf("depth --json %q: %v %+v", r.stdout, err, depth)
	}
	wantPayload := map[string]string{"t": osc52, "c1": c1csi, "b": rlo + "gpj.exe"}
	for _, args := range [][]string{{"pop", "jobs", "--json"}, {"tail", "jobs", "--count", "1", "--json"}} {
		r = ctl(t, url, "", args...).ok(t, strings.Join(args, " ")).shows(t, strings.Join(args, " "))
		var m struct {
			ID, Partition string
			Payload       map[string]string
		}
		if err := json.Unmarshal([]byte(r.stdout), &m); err != nil || m.ID != evilID || m.Partition != evilQueue ||
			fmt.Sprint(m.Payload) != fmt.Sprint(wantPayload) {
			t.Fatalf("%s printed %q: %v %+v", strings.Join(args, " "), r.stdout, err, m)
		}
	}
	var acks struct {
		Results []struct{ ID, Outcome string }
	}
	r = ctl(t, url, "", "ack", "jobs", "e:1", "--json").ok(t, "ack --json").shows(t, "ack --json")
	if err := json.Unmarshal([]byte(r.stdout), &acks); err != nil || len(acks.Results) != 1 ||
		acks.Results[0].ID != evilID || acks.Results[0].Outcome != evilTier {
		t.Fatalf("ack --json %q: %v %+v", r.stdout, err, acks)
	}
	var grant struct{ Tenant string }
	r = ctl(t, url, "", "grant", "get", "acme", "--json").ok(t, "grant get --json").shows(t, "grant get --json")
	if err := json.Unmarshal([]byte(r.stdout), &grant); err != nil || grant.Tenant != evilQueue {
		t.Fatalf("grant get --json %q: %v", r.stdout, err)
	}
	r = ctl(t, url, "", "pop", "raw", "--json").want(t, "pop --json of a payload that is not JSON", 3,
		"the server sent a payload that is not JSON").shows(t, "pop raw --json")
	if r.stdout != "" {
		t.Fatalf("pop raw --json printed %q", r.stdout)
	}
}

// TestHostileServerTop runs top in a pseudo-terminal against the fake:
// what reaches the terminal holds none of the server's sequences (nor a
// C1 control or a bidi override), the screen shows them escaped, and a
// refresh refused with an evil message shows it escaped too.
func TestHostileServerTop(t *testing.T) {
	t.Parallel()
	url := hostileServer(t, true).URL
	cmd := exec.Command(brokertest.Binary(t, queenctl), "top")
	cmd.Env = append(ctlEnv(url), "TERM=xterm-256color")
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 20, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		term.Close()
	})
	out := &brokertest.LockedBuffer{}
	go emulate(out, term)

	readUntil(t, out, regexp.MustCompile(regexp.QuoteMeta(evilQueueSeen[:38])+".*"+regexp.QuoteMeta(evilTierSeen)), "the evil row")
	readUntil(t, out, regexp.MustCompile(regexp.QuoteMeta("error: queen: GET /api/v1/ephemeral/queues: 503 queue_full"+`\x1b[2J`+": "+evilTextSeen)), "the evil refusal")
	if _, err := term.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("top after q: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("top did not quit on q")
	}
	raw := out.String()
	for _, s := range []string{"\x1b]52;", "\x1b]0;owned", "\u009b", rlo, "\r\n\u009b"} {
		if strings.Contains(raw, s) {
			t.Fatalf("the terminal received %q raw:\n%q", s, raw)
		}
	}
}

// TestRequestTimeoutBoundsTheCall: request's --timeout bounds the whole
// request. A server that accepts and never answers the push (which the
// default call bound held for 30 s) ends it at the timeout, exit 3; one
// that takes the push and never answers the reply's wait ends it within
// replyGrace after, exit 3 too; a request delivered and not answered by
// any responder is exit 4 (TestRequestReply). A timeout that is not
// positive is a usage error.
func TestRequestTimeoutBoundsTheCall(t *testing.T) {
	t.Parallel()
	silent := "http://" + brokertest.SilentServer(t)
	held := hostileServer(t, false).URL
	for _, c := range []struct {
		what, url, queue string
		least, most      time.Duration
	}{
		{"a silent server", silent, "q", time.Second, time.Second + replyGrace + 2*time.Second},
		{"a push never answered", held, "silent", time.Second, time.Second + replyGrace + 2*time.Second},
		{"a reply's wait never answered", held, "held", time.Second, time.Second + replyGrace + 2*time.Second},
	} {
		start := time.Now()
		ctl(t, c.url, "", "request", c.queue, "x", "--timeout", "1s").
			want(t, "request to "+c.what, 3, "error: no answer from the broker within --timeout 1s: ")
		if took := time.Since(start); took < c.least || took > c.most {
			t.Fatalf("request --timeout 1s to %s took %s, want between %s and %s", c.what, took, c.least, c.most)
		}
	}
	ctl(t, held, "", "request", "q", "x", "--timeout", "0s").want(t, "request --timeout 0s", 2, "--timeout 0s: want a positive duration")
}
