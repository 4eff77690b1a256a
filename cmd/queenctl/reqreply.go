package main

// Request/reply: request sends one request and prints its reply; reply is
// a responder that runs a command per request.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/client"
)

// replyPayload turns what a program printed into a reply payload: JSON
// as it is, anything else as a JSON string (without its final newline), so
// that `tr`, `sed` or `date` can answer.
func replyPayload(out []byte) json.RawMessage {
	out = bytes.TrimRight(out, " \t\r\n")
	return textPayload(string(out))
}

// replyGrace is how long after its --timeout a request gives up on the
// broker's own answer that no reply came: the broker answers the parked
// inbox pop when the timeout passes, and that answer needs a round trip
// to arrive. Within it the outcome is exit 4 (delivered, no reply);
// beyond it, exit 3 (the broker did not answer).
const replyGrace = time.Second

func requestCmd(a *app) *cobra.Command {
	var o client.RequestOptions
	var raw bool
	cmd := &cobra.Command{
		Use:   "request <queue> [payload]",
		Short: "Send a request (the payload, or stdin when none is given) and print the reply's payload",
		Example: `  queenctl request upper '"hello"'
  echo '{"a":1}' | queenctl request calc --timeout 2s`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Timeout <= 0 {
				return usagef("--timeout %s: want a positive duration (the bound on the whole request)", o.Timeout)
			}
			var payload json.RawMessage
			var err error
			if len(args) == 2 {
				payload, err = payloadArg("the payload", args[1], raw)
			} else {
				in, rerr := io.ReadAll(a.stdin)
				if rerr != nil {
					return fmt.Errorf("reading stdin: %w", rerr)
				}
				payload, err = payloadArg("stdin", strings.TrimRight(string(in), " \t\r\n"), raw)
			}
			if err != nil {
				return err
			}
			// --timeout bounds the whole request, not only the wait for
			// the reply: each call the SDK makes (the push first) gets it
			// as its own bound, where the default (30 s) would hold a
			// silent broker's push that long, and the context ends the
			// whole call replyGrace after it.
			a.g.timeout = o.Timeout // request's --timeout shadows the global one
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout+replyGrace)
			defer cancel()
			m, err := c.Request(ctx, args[0], payload, o)
			if err != nil {
				var ne net.Error
				switch {
				case errors.Is(err, client.ErrRequestTimeout):
					return fmt.Errorf("no reply within %s: %w", o.Timeout, err)
				case cmd.Context().Err() == nil && errors.As(err, &ne) && ne.Timeout():
					// The broker did not answer a call in time (the
					// request may not have been delivered): exit 3.
					return connError{fmt.Errorf("no answer from the broker within --timeout %s: %w", o.Timeout, err)}
				}
				return sdk(err)
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", safeJSON(m.Payload))
			return err
		},
	}
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 30*time.Second, "bound on the whole request: the push and the wait for the reply")
	cmd.Flags().StringVar(&o.Partition, "partition", "", "partition of the queue to send the request to")
	cmd.Flags().BoolVar(&raw, "raw", false, "send the payload (argument or stdin) as a JSON string, as it is")
	return cmd
}

func replyCmd(a *app) *cobra.Command {
	var o client.ServeOptions
	var concurrency, maxReplies int
	cmd := &cobra.Command{
		Use:   "reply <queue> <command> [arg...]",
		Short: "Answer requests by running a command per request: payload on its stdin, its stdout the reply",
		Long: `reply serves the requests sent to <queue> (by queenctl request or the SDKs' Request)
until interrupted. For each request it runs <command> (directly, not through a
shell: use sh -c '...' for pipes) with the request's payload and a newline on
its standard input. What the command prints on standard output is the reply:
sent as it is when it is JSON, else as a JSON string without its final newline.
A command that exits non-zero sends no reply (the requester times out) and is
reported on stderr. Requests are read with autoAck: each is delivered once.`,
		Example: `  queenctl reply upper tr a-z A-Z
  queenctl reply echo cat --concurrency 4
  queenctl reply calc sh -c 'jq ".a + 1"'`,
		Args: minArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if concurrency < 1 {
				return usagef("--concurrency %d: want at least 1", concurrency)
			}
			if _, err := exec.LookPath(args[1]); err != nil {
				return usageError{err}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var errMu sync.Mutex
			o.OnError = func(err error) {
				errMu.Lock()
				defer errMu.Unlock()
				fmt.Fprintf(a.stderr, "queenctl reply: %s\n", visible(err.Error()))
			}
			var answered atomic.Int64
			respond := func(rctx context.Context, m client.Message) (any, error) {
				env, err := client.ParseRequest(m)
				if err != nil {
					return nil, err
				}
				out, err := runCommand(rctx, args[1:], env.Payload, a.stderr)
				if err != nil {
					return nil, fmt.Errorf("request %s: %w", m.ID, err)
				}
				if n := answered.Add(1); maxReplies > 0 && n >= int64(maxReplies) {
					cancel() // Serve sends the replies made before it stops
				}
				return out, nil
			}
			errs := make(chan error, concurrency)
			for range concurrency {
				go func() { errs <- c.Serve(ctx, args[0], o, respond) }()
			}
			var first error
			for range concurrency {
				if err := <-errs; err != nil && first == nil {
					first = err
					cancel()
				}
			}
			return sdk(first)
		},
	}
	f := cmd.Flags()
	f.IntVar(&concurrency, "concurrency", 1, "requests answered at once (one serve loop each)")
	f.IntVar(&o.Batch, "batch", 16, "most requests one pop takes")
	f.StringVar(&o.Partition, "partition", "", "serve this partition only")
	f.IntVar(&maxReplies, "max", 0, "exit after this many replies (0: until interrupted)")
	// Flags after the command are the command's, not queenctl's.
	f.SetInterspersed(false)
	return cmd
}

// runCommand runs argv with payload on its stdin and answers its stdout as
// a reply payload; its stderr goes to ours.
func runCommand(ctx context.Context, argv []string, payload []byte, stderr io.Writer) (json.RawMessage, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = io.MultiReader(bytes.NewReader(payload), strings.NewReader("\n"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second // a command that leaves a child holding its pipes
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w", argv[0], err)
	}
	return replyPayload(out.Bytes()), nil
}
