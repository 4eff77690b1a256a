// Command queen is the broker of the ephemeral storage class: in-memory
// queues with durable declarations, HTTP/1.1 at /api/v1/ephemeral/* on port
// 6632, with an embedded store by default and PostgreSQL when a database URL
// is set. `queen --help` lists its environment variables.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/buildinfo"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/internal/pprofserve"
	"github.com/queenmq/ephemeral/server"
	"github.com/queenmq/ephemeral/store/storeenv"
)

func main() {
	for _, a := range os.Args[1:] {
		switch a {
		case "-h", "-help", "--help", "help":
			printHelp(os.Stdout)
			return
		case "-v", "-version", "--version", "version":
			buildinfo.Print(os.Stdout, "queen", buildinfo.Read(version, commit))
			return
		default:
			fmt.Fprintf(os.Stderr, "queen: unknown argument %q (see --help)\n", a)
			os.Exit(2)
		}
	}
	if err := run(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "queen:", err)
		os.Exit(1)
	}
}

func run(getenv func(string) string) error {
	ev := newEnv(getenv)
	var level slog.Level
	if err := level.UnmarshalText([]byte(ev.Str("QUEEN_LOG_LEVEL"))); err != nil {
		return fmt.Errorf("QUEEN_LOG_LEVEL: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	bld := buildinfo.Read(version, commit)
	ecfg := engine.Config{
		MaxBytes: ev.Int64("QUEEN_EPHEMERAL_MAX_BYTES"),
		Defaults: engine.Options{
			MaxBytes:     ev.Int64("QUEEN_EPHEMERAL_QUEUE_MAX_BYTES"),
			MaxLength:    ev.Int64("QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH"),
			TTLSeconds:   ev.Int64("QUEEN_EPHEMERAL_TTL_S"),
			LeaseSeconds: ev.Int64("QUEEN_EPHEMERAL_LEASE_S"),
			RetryLimit:   ev.Int64("QUEEN_EPHEMERAL_RETRY_LIMIT"),
		},
		Ceilings: engine.Ceilings{
			MaxBytes:     ev.Int64("QUEEN_EPHEMERAL_CEILING_MAX_BYTES"),
			MaxLength:    ev.Int64("QUEEN_EPHEMERAL_CEILING_MAX_LENGTH"),
			LeaseSeconds: ev.Int64("QUEEN_EPHEMERAL_CEILING_LEASE_S"),
			TTLSeconds:   ev.Int64("QUEEN_EPHEMERAL_CEILING_TTL_S"),
			RetryLimit:   ev.Int64("QUEEN_EPHEMERAL_CEILING_RETRY_LIMIT"),
		},
		GroupIdle:       time.Duration(ev.Int64("QUEEN_EPHEMERAL_GROUP_IDLE_S")) * time.Second,
		ImplicitIdle:    time.Duration(ev.Int64("QUEEN_EPHEMERAL_IMPLICIT_IDLE_S")) * time.Second,
		TenantMaxBytes:  ev.Int64("QUEEN_EPHEMERAL_TENANT_MAX_BYTES"),
		TenantMaxQueues: ev.Int64("QUEEN_EPHEMERAL_TENANT_MAX_QUEUES"),
	}
	scfg := server.Config{
		Addr:         net.JoinHostPort(ev.Str("HOST"), ev.Str("PORT")),
		Logger:       log,
		Version:      bld.Version,
		Commit:       bld.Commit,
		MaxBodyBytes: ev.Int64("QUEEN_MAX_BODY_BYTES"),
		// The variable always has a value (its default is in env.go), so
		// 0 is meant: waiting pops without a timeout answer at once.
		PopTimeout:       time.Duration(ev.Int64("QUEEN_EPHEMERAL_POP_TIMEOUT_MS")) * time.Millisecond,
		PopTimeoutSet:    true,
		HeaderTimeout:    time.Duration(ev.Int64("QUEEN_HEADER_TIMEOUT_MS")) * time.Millisecond,
		BodyTimeout:      time.Duration(ev.Int64("QUEEN_BODY_TIMEOUT_MS")) * time.Millisecond,
		OutboundSoft:     int(ev.Int64("QUEEN_OUTBOUND_SOFT_BYTES")),
		OutboundHard:     int(ev.Int64("QUEEN_OUTBOUND_HARD_BYTES")),
		OutboundSoftTime: time.Duration(ev.Int64("QUEEN_OUTBOUND_SOFT_S")) * time.Second,
		MaxInflightBytes: ev.Int64("QUEEN_MAX_INFLIGHT_BYTES"),
		ConnCharge:       ev.Int64("QUEEN_CONNECTION_CHARGE_BYTES"),
		IdleTimeout:      time.Duration(ev.Int64("QUEEN_IDLE_TIMEOUT_S")) * time.Second,
		Loops:            int(ev.Int64("QUEEN_EVENT_LOOPS")),
	}
	scfg.TenantMsgsPerSecond = ev.Int64("QUEEN_EPHEMERAL_TENANT_MSGS_PER_S")
	if scfg.MaxInflightBytes == 0 {
		scfg.MaxInflightBytes = inflightDefault(ecfg.MaxBytes)
	}
	acfg := identity.Config{
		Mode:          strings.TrimSpace(ev.Str("QUEEN_AUTH_MODE")),
		JWTSecret:     []byte(ev.Str("QUEEN_JWT_SECRET")),
		Issuer:        ev.Str("QUEEN_JWT_ISSUER"),
		Audience:      ev.Str("QUEEN_JWT_AUDIENCE"),
		TenantClaim:   ev.Str("QUEEN_JWT_TENANT_CLAIM"),
		GatewaySecret: ev.Str("QUEEN_GATEWAY_SECRET"),
		JWKSURL:       ev.Str("QUEEN_JWT_JWKS_URL"),
		JWKSRefresh:   time.Duration(ev.Int64("QUEEN_JWT_JWKS_REFRESH_S")) * time.Second,
		AllowNoExp:    ev.Bool("QUEEN_JWT_ALLOW_NO_EXP", false),
	}
	scfg.AdminToken = []byte(ev.Str("QUEEN_ADMIN_TOKEN"))
	scfg.OperatorTenant = strings.TrimSpace(ev.Str("QUEEN_OPERATOR_TENANT"))
	scfg.MetricsPublic = ev.Bool("QUEEN_METRICS_PUBLIC", false)
	browsers, err := crossorigin.New(crossorigin.Split(ev.Str("QUEEN_TRUSTED_ORIGINS")), crossorigin.Split(ev.Str("QUEEN_TRUSTED_HOSTS")))
	if err != nil {
		return fmt.Errorf("QUEEN_TRUSTED_ORIGINS or QUEEN_TRUSTED_HOSTS: %w", err)
	}
	scfg.Browsers = browsers
	if p := ev.Str("QUEEN_JWT_PUBLIC_KEY"); p != "" {
		pem, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("QUEEN_JWT_PUBLIC_KEY: %w", err)
		}
		acfg.JWTPublicKey = pem
	}
	auth, err := identity.New(acfg)
	if err != nil {
		return err
	}
	scfg.Auth = auth
	scfg.RequireGrant = ev.Bool("QUEEN_EPHEMERAL_REQUIRE_GRANT", auth.Mode() == identity.ModeGateway)
	if err := ev.Err(); err != nil {
		return err
	}

	if a := ev.Str("QUEEN_PPROF_ADDR"); a != "" {
		if err := pprofserve.Serve(a, log); err != nil {
			return fmt.Errorf("QUEEN_PPROF_ADDR: %w", err)
		}
	}

	stcfg, err := storeenv.FromEnv(getenv)
	if err != nil {
		return err
	}
	cellCfg, err := cellConfig(getenv, ev.Str("PORT"))
	if err != nil {
		return err
	}
	st, err := storeenv.Open(context.Background(), stcfg, log)
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer st.Close()

	logLimits(log, getenv, ecfg.MaxBytes)

	e := engine.New(ecfg)
	defer e.Close()
	scfg.Engine, scfg.Store = e, st
	if cellCfg.Enabled() {
		// Declarations, grants and the kill switch written by another
		// member are looked for at least once a heartbeat (D17).
		scfg.SyncInterval = cellCfg.Heartbeat
	}
	srv := server.New(scfg)
	var cp *cellParts
	if cellCfg.Enabled() {
		if cp, err = startCell(cellCfg, getenv, stcfg, e, srv, log); err != nil {
			return err
		}
	}
	if err := srv.Start(); err != nil {
		cp.stop(context.Background())
		return err
	}
	cp.serve()
	log.Info("serving", "addr", scfg.Addr, "incarnation", e.Incarnation(), "version", bld.Version, "commit", bld.Commit)
	if auth.Mode() == identity.ModeNone && len(scfg.AdminToken) == 0 {
		log.Info("protected mode: the admin routes and /metrics answer loopback clients only; set QUEEN_ADMIN_TOKEN to administer remotely")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Info("shutting down: leaving the cell, answering parked pops and closing connections")
	// Leave the cell first, with a bound of its own: the others own this
	// member's queues at once, and while the server stops, requests that
	// still land here are relayed to them instead of refused.
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	cp.leave(cctx)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx)
	cp.stop(cctx) // the relay closes before the store (deferred above)
	return err
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
