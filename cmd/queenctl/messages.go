package main

// The message verbs: push, pop, ack and tail.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/client"
)

// maxPushBatch is the most messages one push carries: the broker's limit
// per call (10,000) would make a single refusal cost a large batch, and a
// thousand keeps the all-or-nothing unit small enough to reason about.
const maxPushBatch = 1000

// payloadArg reads a payload the user typed (what names it in an error):
// valid JSON is sent as it is; anything else is sent as a JSON string, so
// that `queenctl push q hello` needs no quoting of quotes. Text that starts
// like JSON (`{`, `[` or `"`) but does not parse is almost surely a typo,
// and sending it as a string would store the broken text without a word:
// it is a usage error that says where it fails. raw sends the text as a
// JSON string whatever it holds (--raw).
func payloadArg(what, s string, raw bool) (json.RawMessage, error) {
	if raw {
		b, _ := json.Marshal(s)
		return b, nil
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s), nil
	}
	if t := strings.TrimLeft(s, " \t\r\n"); t != "" && strings.ContainsRune(`{["`, rune(t[0])) {
		var v any
		err := json.Unmarshal([]byte(s), &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, usagef("%s starts like JSON but is not: %v at byte %d of %.60q; fix it, or send it as a string with --raw", what, se, se.Offset, s)
		}
		return nil, usagef("%s starts like JSON but is not: %v; fix it, or send it as a string with --raw", what, err)
	}
	return textPayload(s), nil
}

// textPayload is s as JSON when it is, else as a JSON string: what a
// program printed (reply's command), where there is no one to tell.
func textPayload(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// stdinLine is one line of push's standard input, or the error that ended
// the reading.
type stdinLine struct {
	payload json.RawMessage
	err     error
}

// readLines sends every non-empty line of r, each of which must be one JSON
// value (raw: each is sent as a JSON string), and closes out at the end of
// input or after the first error.
func readLines(r io.Reader, raw bool, out chan<- stdinLine) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a payload may be as large as a push body
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if raw {
			b, _ := json.Marshal(line)
			out <- stdinLine{payload: b}
			continue
		}
		if !json.Valid([]byte(line)) {
			out <- stdinLine{err: usagef("stdin line %d: not one JSON value: %.60q (--raw sends each line as a string)", n, line)}
			return
		}
		out <- stdinLine{payload: json.RawMessage(line)}
	}
	if err := sc.Err(); err != nil {
		out <- stdinLine{err: fmt.Errorf("reading stdin: %w", err)}
	}
}

func pushCmd(a *app) *cobra.Command {
	var partition string
	var raw bool
	cmd := &cobra.Command{
		Use:   "push <queue> [payload...]",
		Short: "Push payloads given as arguments, or one JSON value per line of stdin",
		Example: `  queenctl push presence '{"user":"alice","typing":true}'
  queenctl push jobs hello world            # two string payloads
  queenctl push logs --raw '{"not json'     # a string, on purpose
  printf '{"n":1}\n{"n":2}\n' | queenctl push jobs --partition p1`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, queue := cmd.Context(), args[0]
			total := 0
			push := func(batch []any) error {
				if len(batch) == 0 {
					return nil
				}
				res, err := c.Push(ctx, queue, batch, client.PushOptions{Partition: partition})
				if err != nil {
					return sdk(err)
				}
				total += res.Pushed
				return nil
			}
			var pushErr error
			if len(args) > 1 {
				// Every argument is read before anything is pushed: one
				// that is refused leaves the queue as it was.
				batch := make([]any, 0, len(args)-1)
				for i, s := range args[1:] {
					p, err := payloadArg(fmt.Sprintf("payload %d", i+1), s, raw)
					if err != nil {
						return err
					}
					batch = append(batch, p)
				}
				pushErr = push(batch)
			} else {
				pushErr = pushStdin(a.stdin, raw, push)
			}
			if pushErr != nil && total == 0 {
				return pushErr
			}
			// Stdin is pushed as it comes: what went in before a
			// failure is reported with it.
			if a.g.json {
				if err := a.printJSON(map[string]int{"pushed": total}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(a.stdout, "pushed %d\n", total)
			}
			return pushErr
		},
	}
	cmd.Flags().StringVar(&partition, "partition", "", `partition to push to (default: the broker's "Default")`)
	cmd.Flags().BoolVar(&raw, "raw", false, "send each payload (argument or stdin line) as a JSON string, as it is")
	return cmd
}

// pushStdin pushes stdin's lines as they come: each push takes the lines
// already read (up to maxPushBatch), so a file goes in large batches and a
// slow producer's line is not held back waiting for the next one.
func pushStdin(r io.Reader, raw bool, push func([]any) error) error {
	lines := make(chan stdinLine, maxPushBatch)
	go readLines(r, raw, lines)
	batch := make([]any, 0, maxPushBatch)
	for l := range lines {
		if l.err != nil {
			if err := push(batch); err != nil {
				return err
			}
			return l.err
		}
		batch = append(batch, l.payload)
	drain:
		for len(batch) < maxPushBatch {
			select {
			case l, ok := <-lines:
				if !ok || l.err != nil {
					if err := push(batch); err != nil {
						return err
					}
					if ok {
						return l.err
					}
					return nil
				}
				batch = append(batch, l.payload)
			default:
				break drain
			}
		}
		if err := push(batch); err != nil {
			return err
		}
		batch = batch[:0]
	}
	return push(batch)
}

// printedMessage is a message as --json prints it: one object per line.
type printedMessage struct {
	Queue     string          `json:"queue"`
	ID        string          `json:"id"`
	Partition string          `json:"partition"`
	Attempts  int             `json:"attempts"`
	Payload   json.RawMessage `json:"payload"`
}

func (a *app) printMessagesJSON(queue string, msgs []client.Message) error {
	for _, m := range msgs {
		if !json.Valid(m.Payload) {
			// The broker stores only JSON: this answer is not the
			// broker's, and there is no exact JSON to print for it.
			return connError{fmt.Errorf("message %s: the server sent a payload that is not JSON: %.60q", m.ID, m.Payload)}
		}
		if err := a.printJSON(printedMessage{queue, m.ID, m.Partition, m.Attempts, m.Payload}); err != nil {
			return err
		}
	}
	return nil
}

func popCmd(a *app) *cobra.Command {
	var o client.PopOptions
	var ack bool
	cmd := &cobra.Command{
		Use:   "pop <queue>",
		Short: "Take messages (leased until acked, unless --auto-ack or --ack)",
		Example: `  queenctl pop jobs --group workers --batch 10
  queenctl pop jobs --wait --timeout 10s --ack
  queenctl pop jobs --json | jq .payload`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ack && o.AutoAck {
				return usagef("--ack and --auto-ack exclude each other: --auto-ack keeps no lease to ack")
			}
			if o.Batch < 0 {
				return usagef("--batch %d: want a positive count", o.Batch)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx, queue := cmd.Context(), args[0]
			warnIfMissing(ctx, c, a.stderr, queue)
			res, err := c.Pop(ctx, queue, o)
			if err != nil {
				return sdk(err)
			}
			if a.g.json {
				err = a.printMessagesJSON(queue, res.Messages)
			} else if len(res.Messages) > 0 {
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tPARTITION\tATTEMPTS\tPAYLOAD")
				for _, m := range res.Messages {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", visible(m.ID), visible(m.Partition), m.Attempts, safeJSON(m.Payload))
				}
				err = tw.Flush()
			}
			if err != nil || !ack || len(res.Messages) == 0 {
				return err
			}
			out, err := c.Ack(ctx, queue, res.Messages, client.AckOptions{Group: o.Group})
			if err != nil {
				return sdk(err)
			}
			acked := 0
			for _, r := range out.Results {
				if r.Outcome == client.OutcomeAcked {
					acked++
				}
			}
			// The acks' outcomes go to stderr so that stdout stays the
			// messages, for a pipe.
			fmt.Fprintf(a.stderr, "acked %d of %d\n", acked, len(out.Results))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Group, "group", "", "consumer group (default: queue mode, one shared cursor)")
	f.StringVar(&o.Partition, "partition", "", "pop from this partition only (default: every partition)")
	f.IntVar(&o.Batch, "batch", 1, "most messages to take")
	f.BoolVar(&o.Wait, "wait", false, "park until a message arrives or --timeout passes")
	f.DurationVar(&o.Timeout, "timeout", 0, "with --wait, how long to park (default: the broker's, 30 s)")
	f.BoolVar(&o.AutoAck, "auto-ack", false, "advance the cursor at delivery and keep no lease (at-most-once)")
	f.BoolVar(&ack, "ack", false, "ack what was popped (completed) once it is printed")
	return cmd
}

// missingCheckTimeout bounds the depth read before a pop: a note must not
// hold up the pop it is about.
const missingCheckTimeout = 5 * time.Second

// warnIfMissing says on stderr when queue does not exist: the broker lets a
// pop create it as an implicit queue (D8), so a mistyped name would
// otherwise read as an empty queue. One depth read before the pop decides
// it (a pop's answer does not say whether it made the queue); any answer
// but 404 ephemeral_queue_not_found, a failure included, says nothing and
// the pop goes ahead as the broker allows.
func warnIfMissing(ctx context.Context, c *client.Client, stderr io.Writer, queue string) {
	ctx, cancel := context.WithTimeout(ctx, missingCheckTimeout)
	defer cancel()
	_, err := c.Depth(ctx, queue, client.DepthOptions{})
	if client.CodeOf(err) == client.CodeQueueNotFound {
		fmt.Fprintf(stderr, "queenctl: queue %s does not exist; this pop creates it as an implicit queue (collected once idle)\n", visible(queue))
	}
}

func ackCmd(a *app) *cobra.Command {
	var o client.AckOptions
	cmd := &cobra.Command{
		Use:   "ack <queue> <id>...",
		Short: "Settle popped messages by id (- reads ids from stdin, one a line)",
		Example: `  queenctl ack jobs 'e:9f3a1c:Default:41' --group workers
  queenctl ack jobs 'e:9f3a1c:Default:41' --status retry
  queenctl pop jobs --batch 100 --json | jq -r .id | queenctl ack jobs -`,
		Args: minArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch o.Status {
			case client.StatusCompleted, client.StatusFailed, client.StatusRetry:
			default:
				return usagef("--status %q: want completed, failed or retry", o.Status)
			}
			var ids []string
			for _, id := range args[1:] {
				if id != "-" {
					ids = append(ids, id)
					continue
				}
				sc := bufio.NewScanner(a.stdin)
				for sc.Scan() {
					if id := strings.TrimSpace(sc.Text()); id != "" {
						ids = append(ids, id)
					}
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
			}
			if len(ids) == 0 {
				return nil // "-" on an empty stdin: nothing to settle
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.AckIDs(cmd.Context(), args[0], ids, o)
			if err != nil {
				return sdk(err)
			}
			if a.g.json {
				return a.printJSON(res)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tOUTCOME")
			for _, r := range res.Results {
				fmt.Fprintf(tw, "%s\t%s\n", visible(r.ID), visible(r.Outcome))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&o.Group, "group", "", "the group the pop used (default: queue mode)")
	cmd.Flags().StringVar(&o.Status, "status", client.StatusCompleted, "completed, failed or retry (failed and retry redeliver)")
	return cmd
}

func tailCmd(a *app) *cobra.Command {
	var partition, group string
	var count int
	cmd := &cobra.Command{
		Use:   "tail <queue>",
		Short: "Follow a queue as a fresh consumer group, printing each payload, until interrupted",
		Long: `tail reads the queue as a group of its own (queenctl-tail-<random>, unless --group),
so it takes nothing from the queue's consumers: they keep receiving everything.
A new group starts at the oldest message the queue holds, so tail first prints
what is retained, then each message as it arrives. It reads with autoAck.
Text output is one payload per line; --json prints whole messages.`,
		Example: `  queenctl tail presence
  queenctl tail jobs --json | jq -c .payload
  queenctl tail jobs --count 1                  # wait for one message, print it, exit`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if group == "" {
				group = "queenctl-tail-" + strings.ToLower(rand.Text()[:10])
			}
			ctx, queue := cmd.Context(), args[0]
			seen := 0
			for {
				res, err := c.Pop(ctx, queue, client.PopOptions{
					Partition: partition, Group: group, Batch: 100, Wait: true,
					Timeout: 10 * time.Second, AutoAck: true,
				})
				if ctx.Err() != nil {
					return nil // interrupted: the way tail ends
				}
				if err != nil {
					return sdk(err)
				}
				msgs := res.Messages
				if count > 0 && seen+len(msgs) > count {
					msgs = msgs[:count-seen]
				}
				if a.g.json {
					err = a.printMessagesJSON(queue, msgs)
				} else {
					for _, m := range msgs {
						if _, err = fmt.Fprintf(a.stdout, "%s\n", safeJSON(m.Payload)); err != nil {
							break
						}
					}
				}
				if err != nil {
					return err
				}
				seen += len(msgs)
				if count > 0 && seen >= count {
					return nil
				}
			}
		},
	}
	cmd.Flags().StringVar(&partition, "partition", "", "follow this partition only")
	cmd.Flags().StringVar(&group, "group", "", "group name (default: a fresh queenctl-tail-<random>)")
	cmd.Flags().IntVar(&count, "count", 0, "exit after this many messages (0: until interrupted)")
	return cmd
}
