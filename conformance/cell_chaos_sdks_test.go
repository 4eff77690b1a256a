package conformance

// The SDKs as the chaos run drives them (TestCellChaos): the same five
// calls made through the Go SDK, or through the JS SDK's clients in a Node
// process (testdata/chaos_js.mjs) that makes each call the test sends it and
// reports the outcome, which the test then checks as it checks the Go SDK's.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// chaosSDK is one client of the chaos run, whichever SDK it is: its calls,
// bounded by the client's own bounds, and the prefix of their kinds in the
// chaos log ("" for the Go SDK, "js " for the JS SDK).
type chaosSDK struct {
	kind      string
	request   func(svc, payload string) (string, error)
	push      func(queue string, payloads []string) (int, error)
	pop       func(queue, group string) ([]client.Message, error)
	ack       func(queue, group string, ids []string) ([]client.AckOutcome, error)
	configure func(queue string, o client.QueueOptions) (client.ConfigureResult, error)
}

// goChaosSDK is cl as the chaos run drives it.
func goChaosSDK(cl *client.Client) chaosSDK {
	bg := context.Background() // calls are bounded by the SDK's own bounds, never by a context
	return chaosSDK{
		request: func(svc, payload string) (string, error) {
			m, err := cl.Request(bg, svc, json.RawMessage(payload), client.RequestOptions{Timeout: chaosRequestTimeout})
			if err != nil {
				return "", err
			}
			return string(m.Payload), nil
		},
		push: func(queue string, payloads []string) (int, error) {
			msgs := make([]any, len(payloads))
			for i, p := range payloads {
				msgs[i] = json.RawMessage(p)
			}
			res, err := cl.Push(bg, queue, msgs, client.PushOptions{})
			if err != nil {
				return 0, err
			}
			return res.Pushed, nil
		},
		pop: func(queue, group string) ([]client.Message, error) {
			res, err := cl.Pop(bg, queue, client.PopOptions{Group: group, Batch: chaosPopBatch, Wait: true, Timeout: chaosPopWait})
			if err != nil {
				return nil, err
			}
			return res.Messages, nil
		},
		ack: func(queue, group string, ids []string) ([]client.AckOutcome, error) {
			res, err := cl.AckIDs(bg, queue, ids, client.AckOptions{Group: group, Status: client.StatusCompleted})
			if err != nil {
				return nil, err
			}
			return res.Results, nil
		},
		configure: func(queue string, o client.QueueOptions) (client.ConfigureResult, error) {
			res, err := cl.Configure(bg, queue, o)
			if err != nil {
				return client.ConfigureResult{}, err
			}
			return *res, nil
		},
	}
}

// jsNodeIfAny answers node's path as jsNode does, or "" when there is none
// (logged; a failure with QUEEN_TEST_REQUIRE_NODE=1), for a test that runs
// its Go half without it.
func jsNodeIfAny(t *testing.T) string {
	t.Helper()
	node, why := findNode()
	if why == "" {
		return node
	}
	if os.Getenv("QUEEN_TEST_REQUIRE_NODE") == "1" {
		t.Fatal(why + " (QUEEN_TEST_REQUIRE_NODE=1)")
	}
	t.Log(why + ": the run drives the Go SDK only")
	return ""
}

// jsChaos is the Node process of testdata/chaos_js.mjs.
type jsChaos struct {
	cmd    *exec.Cmd
	stderr *brokertest.LockedBuffer
	mu     sync.Mutex // guards stdin's lines, next and waiting
	stdin  io.WriteCloser
	next   int64
	// waiting: each call sent and not yet answered, by id.
	waiting map[int64]chan jsOutcome
	// ended is closed when the script's output ends (after its "closed").
	ended chan struct{}
}

// jsChaosEvents are what the script reports of its responders: a request
// one took (queue, the request's payload), and an error one survived or,
// ended, did not.
type jsChaosEvents struct {
	served     func(queue, payload string)
	serveError func(err error, ended bool)
}

// startJSChaos starts the script with one queen-mq client per list of
// URLs, each built with timeout (the client's call bound), for at most
// limit.
func startJSChaos(t *testing.T, node string, clients [][]string, timeout, limit time.Duration, ev jsChaosEvents) *jsChaos {
	t.Helper()
	cfg, err := json.Marshal(map[string]any{"clients": clients, "timeout": timeout.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	j := &jsChaos{waiting: map[int64]chan jsOutcome{}, ended: make(chan struct{}), stderr: &brokertest.LockedBuffer{}}
	j.cmd = exec.CommandContext(ctx, node, filepath.Join("testdata", "chaos_js.mjs"))
	j.cmd.Env = append(os.Environ(), "QUEEN_CHAOS_JS="+string(cfg))
	j.cmd.Stderr = j.stderr
	if j.stdin, err = j.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = j.cmd.Process.Kill()
		_ = j.cmd.Wait()
	})
	go j.read(stdout, ev)
	return j
}

// jsChaosLine is one line of the script's output: a call's outcome (ID not
// 0) or an event.
type jsChaosLine struct {
	ID      int64           `json:"id"`
	Value   json.RawMessage `json:"value"`
	Error   *jsError        `json:"error"`
	Event   string          `json:"event"`
	Queue   string          `json:"queue"`
	Payload string          `json:"payload"`
	Ended   bool            `json:"ended"`
}

// read hands each outcome to its call and each event to ev until the
// script's output ends; calls still waiting then fail.
func (j *jsChaos) read(stdout io.Reader, ev jsChaosEvents) {
	defer func() {
		j.mu.Lock()
		for id, ch := range j.waiting {
			ch <- jsOutcome{Error: &jsError{Name: "ScriptEnded", Message: "the chaos script ended: " + j.stderr.String()}}
			delete(j.waiting, id)
		}
		j.mu.Unlock()
		close(j.ended)
	}()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var l jsChaosLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			ev.serveError(fmt.Errorf("the chaos script wrote %q: %w", sc.Bytes(), err), false)
			continue
		}
		switch {
		case l.ID != 0:
			j.mu.Lock()
			ch := j.waiting[l.ID]
			delete(j.waiting, l.ID)
			j.mu.Unlock()
			if ch != nil {
				ch <- jsOutcome{Value: l.Value, Error: l.Error}
			}
		case l.Event == "served":
			ev.served(l.Queue, l.Payload)
		case l.Event == "serveError" && l.Error != nil:
			ev.serveError(l.Error, l.Ended)
		}
	}
}

// call sends op (with its fields) to the script for client i and waits for
// its outcome, decoding a value into v.
func (j *jsChaos) call(i int, op string, fields map[string]any, v any) error {
	ch := make(chan jsOutcome, 1)
	j.mu.Lock()
	j.next++
	id := j.next
	fields["id"], fields["client"], fields["op"] = id, i, op
	line, err := json.Marshal(fields)
	if err == nil {
		j.waiting[id] = ch
		_, err = j.stdin.Write(append(line, '\n'))
		if err != nil {
			delete(j.waiting, id)
		}
	}
	j.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sending %s to the chaos script: %w", op, err)
	}
	o := <-ch
	if o.Error != nil {
		return o.Error
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(o.Value, v); err != nil {
		return fmt.Errorf("js: malformed JSON answer to %s: %v in %s", op, err, o.Value)
	}
	return nil
}

// serve starts a responder on client i for svc.
func (j *jsChaos) serve(i int, svc string) error {
	return j.call(i, "serve", map[string]any{"queue": svc, "wait": chaosPopWait.Milliseconds()}, nil)
}

// close stops the responders and closes the clients, and waits (at most
// bound) for the script to end: Node exits once nothing of the SDK's is
// left running (a socket, a timer) and its stdin has ended.
func (j *jsChaos) close(bound time.Duration) error {
	j.mu.Lock()
	_, err := io.WriteString(j.stdin, `{"op":"close"}`+"\n")
	if err == nil {
		err = j.stdin.Close()
	}
	j.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-j.ended:
		return nil
	case <-time.After(bound):
		return errors.New("the chaos script did not close within " + bound.String() + ": " + j.stderr.String())
	}
}

// sdk is client i of the script as the chaos run drives it.
func (j *jsChaos) sdk(i int) chaosSDK {
	return chaosSDK{
		kind: "js ",
		request: func(svc, payload string) (string, error) {
			var m client.Message
			err := j.call(i, "request", map[string]any{"queue": svc, "payload": payload, "timeout": chaosRequestTimeout.Milliseconds()}, &m)
			return string(m.Payload), err
		},
		push: func(queue string, payloads []string) (int, error) {
			var res client.PushResult
			err := j.call(i, "push", map[string]any{"queue": queue, "payloads": payloads}, &res)
			return res.Pushed, err
		},
		pop: func(queue, group string) ([]client.Message, error) {
			var res client.PopResult
			err := j.call(i, "pop", map[string]any{"queue": queue, "group": group, "batch": chaosPopBatch, "wait": chaosPopWait.Milliseconds()}, &res)
			return res.Messages, err
		},
		ack: func(queue, group string, ids []string) ([]client.AckOutcome, error) {
			var res client.AckResult
			err := j.call(i, "ack", map[string]any{"queue": queue, "group": group, "ids": ids}, &res)
			return res.Results, err
		},
		configure: func(queue string, o client.QueueOptions) (client.ConfigureResult, error) {
			var res client.ConfigureResult
			err := j.call(i, "configure", map[string]any{"queue": queue, "options": o}, &res)
			return res, err
		},
	}
}

func (e *jsError) Error() string {
	s := "js " + e.Name + ": " + e.Message
	if e.Status != 0 {
		s += " (" + strconv.Itoa(e.Status) + " " + e.Code + ")"
	}
	return s
}

// classifyJS is classify for an error the JS SDK threw: a refusal
// (QueenError) by its status and code, anything else by its class. It
// answers the class of an error outside the contract, or "". It is called
// with l.mu held.
func (l *chaosLog) classifyJS(what, req string, e *jsError) string {
	switch {
	case e.Name == "QueenError":
		l.refusals[what+": "+strconv.Itoa(e.Status)+" "+e.Code]++
		if st, ok := specCodes[e.Code]; !ok || st != e.Status {
			return "refusal outside the specification"
		}
	case e.Name == "RequestTimeoutError":
		l.errs["request timed out"]++
	case e.Name == "ConnectionError" && e.Dial:
		l.errs["unreachable"]++
	case e.Name == "ConnectionError":
		l.errs["closed unanswered"]++
	case e.Name == "TimeoutError":
		l.errs["timed out"]++
	case e.Name == "SyntaxError" || strings.Contains(e.Message, "malformed"):
		l.errs["undecodable answer"]++
		l.wrong = append(l.wrong, req+": "+e.Error())
	default:
		return "other error"
	}
	return ""
}
