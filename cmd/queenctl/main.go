// Command queenctl is the operator's command line for the ephemeral storage
// class: push, pop, ack, request and reply, follow a queue, read the
// gauges, watch them live (top), pause the surface, manage grants and mint
// development tokens. It is built on the Go SDK (package client) and
// documented in docs/cli.md.
//
// It is a binary of its own rather than subcommands of queen so that the
// broker stays free of the command-line and terminal libraries it would
// never use (docs/cli.md, "Why a separate binary").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/buildinfo"
)

// version and commit are stamped by `make build` (-ldflags -X main.version,
// -X main.commit), as the broker's are; unstamped, internal/buildinfo reads
// the toolchain's build information.
var (
	version = "dev"
	commit  = ""
)

// The exit statuses (docs/cli.md, "Exit status"): a script branches on them
// to tell "the broker said no" from "I typed it wrong" from "nobody answered".
const (
	exitOK         = 0
	exitRefused    = 1 // the broker answered with a refusal (4xx, 5xx)
	exitUsage      = 2 // bad arguments, flags or input
	exitConnection = 3 // the broker could not be reached, or the connection failed
	exitNoReply    = 4 // request: no reply came within --timeout
	exitPartial    = 5 // queues, top --once: a member of the cell did not answer
	// exitInterrupted: a call cut short by SIGINT or SIGTERM (tail and
	// reply, which run until interrupted, exit 0 then).
	exitInterrupted = 130
)

// usageError is a mistake of the caller's: a wrong flag, argument or input
// line. Exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// connError is an SDK call that failed without a refusal: no connection, a
// connection lost, an answer that did not come in time. Exit status 3.
type connError struct{ err error }

func (e connError) Error() string { return e.err.Error() }
func (e connError) Unwrap() error { return e.err }

// sdk classifies the error of an SDK call: refusals (*client.Error) and a
// request's missing reply keep their identity, anything else is the
// transport's.
func sdk(err error) error {
	var ce *client.Error
	switch {
	case err == nil, errors.As(err, &ce), errors.Is(err, client.ErrRequestTimeout),
		errors.Is(err, context.Canceled):
		return err
	}
	return connError{err}
}

// globals are the flags every command takes.
type globals struct {
	url     string
	token   string
	headers []string
	timeout time.Duration
	json    bool
}

// app is what a command runs with: its streams and the client built from
// the global flags.
type app struct {
	g      globals
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	c      *client.Client
}

// client builds the SDK client once, on the first command that needs it
// (help and usage errors never dial).
func (a *app) client() (*client.Client, error) {
	if a.c != nil {
		return a.c, nil
	}
	opts, err := a.options()
	if err != nil {
		return nil, err
	}
	c, err := client.New(a.g.url, opts...)
	if err != nil {
		return nil, usageError{err}
	}
	a.c = c
	return c, nil
}

// options are the SDK options the global flags ask for: the same identity
// for the URL given and for every member of its cell (cellread.go).
func (a *app) options() ([]client.Option, error) {
	opts := []client.Option{client.WithTimeout(a.g.timeout)}
	if a.g.token != "" {
		opts = append(opts, client.WithToken(a.g.token))
	}
	for _, h := range a.g.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return nil, usagef("--header %q: want name=value", h)
		}
		opts = append(opts, client.WithHeader(k, v))
	}
	return opts, nil
}

// printJSON writes v as one line of JSON, with the characters a terminal
// would act on escaped as JSON escapes (safeJSON): a parser reads the
// server's strings back exactly.
func (a *app) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "%s\n", safeJSON(b))
	return err
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// newRoot builds the command tree; tests build their own with other streams.
func newRoot(a *app) *cobra.Command {
	bi := buildinfo.Read(version, commit)
	root := &cobra.Command{
		Use:   "queenctl",
		Short: "Operate a Queen ephemeral broker: push, pop, request, tail, gauges, top, kill switch, grants",
		Long: `queenctl speaks to a Queen ephemeral broker through the Go SDK.

Every refusal is printed to stderr as "error: <status> <code>: <message>".
Exit status: 0 success, 1 refused by the broker, 2 usage error,
3 broker unreachable or connection failed, 4 request without a reply,
5 a listing of a cell that lacks a member that did not answer.
See docs/cli.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       bi.Version,
	}
	// --version prints what `queen --version` prints (internal/buildinfo);
	// the text holds no template action, so cobra prints it as it is.
	var vt strings.Builder
	buildinfo.Print(&vt, "queenctl", bi)
	root.SetVersionTemplate(vt.String())
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.g.url, "url", envOr("QUEEN_URL", "http://localhost:6632"), "broker URL (env QUEEN_URL)")
	pf.StringVar(&a.g.token, "token", os.Getenv("QUEEN_TOKEN"), "bearer token: a JWT, or the admin token for the system routes (env QUEEN_TOKEN)")
	pf.StringArrayVar(&a.g.headers, "header", nil, "header sent on every request, name=value (repeatable; e.g. gateway tenancy headers)")
	pf.DurationVar(&a.g.timeout, "timeout", 30*time.Second, "bound on each call to the broker (pop and request: see their own --timeout)")
	pf.BoolVar(&a.g.json, "json", false, "print JSON for machines instead of text")

	root.AddCommand(
		pushCmd(a), popCmd(a), ackCmd(a), tailCmd(a),
		requestCmd(a), replyCmd(a),
		queuesCmd(a), depthCmd(a), topCmd(a),
		pauseCmd(a), resumeCmd(a), grantCmd(a),
		tokenCmd(a),
	)
	return root
}

// exactArgs, rangeArgs: cobra's validators whose errors are usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MinimumNArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// run executes the command line args and answers the exit status; the
// error, if any, is printed to stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if a.c != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.c.Close(cctx)
		cancel()
	}
	return report(stderr, err)
}

// report prints err as the documented error line and answers its exit
// status. What came from the server (a refusal's code and message, the
// transport's errors, which may quote an answer) is shown through visible;
// a usage error holds only the caller's input and queenctl's own text, and
// keeps the line breaks of cobra's suggestions.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, context.Canceled) {
		// Interrupted mid-call (tail and reply end on an interrupt with
		// nil): the shell's convention for SIGINT.
		fmt.Fprintln(stderr, "error: interrupted")
		return exitInterrupted
	}
	var ce *client.Error
	var ue usageError
	var ne connError
	var pe partialError
	switch {
	case errors.As(err, &pe):
		fmt.Fprintf(stderr, "warning: %s\n", visible(err.Error()))
		return exitPartial
	case errors.As(err, &ce):
		msg := ce.Message
		if ce.RetryAfter > 0 {
			msg += fmt.Sprintf(" (retry after %s)", ce.RetryAfter)
		}
		fmt.Fprintf(stderr, "error: %d %s: %s\n", ce.Status, visible(ce.Code), visible(msg))
		return exitRefused
	case errors.Is(err, client.ErrRequestTimeout):
		fmt.Fprintf(stderr, "error: %s\n", visible(err.Error()))
		return exitNoReply
	case errors.As(err, &ne):
		fmt.Fprintf(stderr, "error: %s\n", visible(err.Error()))
		return exitConnection
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	// What cobra answers itself (an unknown command) is a usage error too.
	fmt.Fprintf(stderr, "error: %v\n", err)
	return exitUsage
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
