// Command queen is the broker of the ephemeral storage class: in-memory
// queues with durable declarations, HTTP/1.1 at /api/v1/ephemeral/* on port
// 6632, with an embedded store by default and PostgreSQL when a database URL
// is set. `queen --help` lists its environment variables.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/queenmq/ephemeral/internal/buildinfo"
	"github.com/queenmq/ephemeral/internal/envconf"
	"github.com/queenmq/ephemeral/internal/pprofserve"
)

func main() {
	printVersion := func(w io.Writer) { buildinfo.Print(w, "queen", buildinfo.Read(version, commit)) }
	if code, handled := envconf.Args("queen", os.Args[1:], os.Stdout, os.Stderr, printHelp, printVersion); handled {
		os.Exit(code)
	}
	if err := run(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}

// run is the broker's life: its configuration from the environment, its
// start (broker.go), and its stop on SIGTERM or SIGINT.
func run(getenv func(string) string) error {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	slog.SetDefault(log)
	if cfg.PprofAddr != "" {
		if err := pprofserve.Serve(cfg.PprofAddr, log); err != nil {
			return fmt.Errorf("QUEEN_PPROF_ADDR: %w", err)
		}
	}
	if cfg.RelayDelay > 0 {
		log.Warn("fault injection: relayed requests are delayed (a test setting)", "delay", cfg.RelayDelay)
	}
	logLimits(log, getenv, cfg.Engine.MaxBytes)
	bld := buildinfo.Read(version, commit)
	cfg.Server.Version, cfg.Server.Commit = bld.Version, bld.Commit
	b, err := startBroker(cfg, log)
	if err != nil {
		return err
	}
	log.Info("serving", "addr", cfg.Server.Addr, "incarnation", b.e.Incarnation(), "version", bld.Version, "commit", bld.Commit)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Info("shutting down: leaving the cell, answering parked pops and closing connections")
	return b.stop()
}

// logLimits logs the descriptor limit in force and sets the Go heap's
// soft limit from the budget unless GOMEMLIMIT is set (docs/server.md,
// memory and descriptors).
func logLimits(log *slog.Logger, getenv func(string) string, budget int64) {
	// The Go runtime already raised the soft descriptor limit toward the
	// hard one at start (syscall's init, since Go 1.19); this says what it
	// got, since a limit below the connections expected is an operator's
	// problem to see at boot.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		log.Info("descriptor limit", "soft", rl.Cur, "hard", rl.Max)
	}
	if getenv("GOMEMLIMIT") != "" {
		log.Info("heap limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	if budget <= 0 {
		budget = 256 << 20 // the engine's default
	}
	limit := memLimit(budget)
	debug.SetMemoryLimit(limit)
	log.Info("heap limit derived from QUEEN_EPHEMERAL_MAX_BYTES (set GOMEMLIMIT to choose another)", "bytes", limit)
}

// memLimit is the heap's soft limit for a budget: the budget (payloads and
// the objects and connections it charges), an eighth more for what it does
// not count (fragments of arena segments, request and answer buffers in
// flight), and 48 MiB for the rest of the process. Past it the collector
// runs harder instead of the heap growing to twice the live data, so a
// broker at its budget stays well inside 1.25 × budget + 64 MiB, the bound
// the reliability suite holds it to (docs/server.md, memory).
func memLimit(budget int64) int64 { return budget + budget/8 + 48<<20 }

// inflightDefault is QUEEN_MAX_INFLIGHT_BYTES's default: a quarter of the
// payload budget, at least 16 MiB. Bodies being read are held beside what
// the budget counts, so they get a share of the same memory.
func inflightDefault(budget int64) int64 {
	if budget <= 0 {
		budget = 256 << 20
	}
	return max(budget/4, 16<<20)
}

// servePprof serves net/http/pprof on its own listener, apart from the
// broker's port (D15), and turns on sampling of mutex contention and of
// blocking so that those two profiles have something in them.
