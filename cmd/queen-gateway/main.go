// Command queen-gateway is the multi-tenant gateway in front of the
// brokers (package gateway, docs/gateway.md). It is configured by
// environment variables; --help lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queenmq/ephemeral/gateway"
	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/buildinfo"
)

// setting is one environment variable the gateway reads.
type setting struct{ name, def, help string }

var settings = []setting{
	{"PORT", "6630", "TCP port to listen on"},
	{"HOST", "0.0.0.0", "address to listen on"},
	{"QUEEN_GATEWAY_UPSTREAMS", "", "comma-separated broker base URLs (http://host:port), any of which may answer: one broker or the members of a cell"},
	{"QUEEN_GATEWAY_SECRET", "", "sent to the brokers as X-Queen-Gateway-Secret; they run with QUEEN_AUTH_MODE=gateway and the same secret"},
	{"QUEEN_GATEWAY_ROUTES_FILE", "", "a route classification to use instead of the built-in one (GET /api/v1/gateway/routes shows its shape)"},
	{"QUEEN_GATEWAY_POLL_MS", "1000", "how often the catalog's revision is read: plan and tenant changes apply within this"},
	{"QUEEN_GATEWAY_USAGE_FLUSH_MS", "5000", "how often usage is written to the catalog (a crash loses at most this much)"},
	{"QUEEN_DATABASE_URL", "", "PostgreSQL URL for plans, tenants and usage; unset: the embedded store under QUEEN_DATA_DIR"},
	{"QUEEN_DATA_DIR", "./queen-gateway-data", "directory of the embedded store"},
	{"QUEEN_JWT_SECRET", "", "end clients: HS256 secret (with any QUEEN_JWT_* key set, clients need a JWT)"},
	{"QUEEN_JWT_PUBLIC_KEY", "", "end clients: path of a PEM public key (RSA for RS256, Ed25519 for EdDSA)"},
	{"QUEEN_JWT_JWKS_URL", "", "end clients: URL of a JWK Set"},
	{"QUEEN_JWT_ISSUER", "", "end clients: required iss (unset = not checked)"},
	{"QUEEN_JWT_AUDIENCE", "", "end clients: required aud (unset = not checked)"},
	{"QUEEN_JWT_TENANT_CLAIM", "tenant", "end clients: the claim naming the tenant"},
	{"QUEEN_JWT_ALLOW_NO_EXP", "false", "end clients: true accepts tokens without an exp claim"},
	{"QUEEN_EVENT_LOOPS", "0", "event loops (0 = GOMAXPROCS)"},
	{"QUEEN_IDLE_TIMEOUT_S", "120", "close a client connection idle this long"},
	{"QUEEN_MAX_BODY_BYTES", "67108864", "largest request body (64 MiB)"},
	{"QUEEN_LOG_LEVEL", "info", "debug, info, warn or error"},
}

func main() {
	for _, a := range os.Args[1:] {
		switch a {
		case "-h", "-help", "--help", "help":
			printHelp(os.Stdout)
			return
		case "-v", "-version", "--version", "version":
			buildinfo.Print(os.Stdout, "queen-gateway", buildinfo.Read(version, commit))
			return
		default:
			fmt.Fprintf(os.Stderr, "queen-gateway: unknown argument %q (see --help)\n", a)
			os.Exit(2)
		}
	}
	if err := run(os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "queen-gateway:", err)
		os.Exit(1)
	}
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "queen-gateway: the multi-tenant gateway in front of the brokers")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: queen-gateway [--help | --version]   (configured by environment variables)")
	fmt.Fprintln(w)
	for _, s := range settings {
		def := s.def
		if def == "" {
			def = "(unset)"
		}
		fmt.Fprintf(w, "  %-30s %-22s %s\n", s.name, def, s.help)
	}
}

// env reads the settings; every bad value is collected with its name.
type env struct {
	get  func(string) string
	errs []string
}

func (e *env) str(name string) string {
	if v := strings.TrimSpace(e.get(name)); v != "" {
		return v
	}
	for _, s := range settings {
		if s.name == name {
			return s.def
		}
	}
	return ""
}

func (e *env) int64(name string) int64 {
	v := e.str(name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		e.errs = append(e.errs, fmt.Sprintf("%s=%q is not a non-negative integer", name, v))
		return 0
	}
	return n
}

func run(getenv func(string) string) error {
	ev := &env{get: getenv}
	var level slog.Level
	if err := level.UnmarshalText([]byte(ev.str("QUEEN_LOG_LEVEL"))); err != nil {
		return fmt.Errorf("QUEEN_LOG_LEVEL: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	acfg := identity.Config{
		Mode:        identity.ModeNone,
		JWTSecret:   []byte(ev.str("QUEEN_JWT_SECRET")),
		JWKSURL:     ev.str("QUEEN_JWT_JWKS_URL"),
		Issuer:      ev.str("QUEEN_JWT_ISSUER"),
		Audience:    ev.str("QUEEN_JWT_AUDIENCE"),
		TenantClaim: ev.str("QUEEN_JWT_TENANT_CLAIM"),
		AllowNoExp:  ev.str("QUEEN_JWT_ALLOW_NO_EXP") == "true",
	}
	if p := ev.str("QUEEN_JWT_PUBLIC_KEY"); p != "" {
		pem, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("QUEEN_JWT_PUBLIC_KEY: %w", err)
		}
		acfg.JWTPublicKey = pem
	}
	if len(acfg.JWTSecret) > 0 || len(acfg.JWTPublicKey) > 0 || acfg.JWKSURL != "" {
		acfg.Mode = identity.ModeJWT
	}
	auth, err := identity.New(acfg)
	if err != nil {
		return err
	}
	table := routes.Default()
	if p := ev.str("QUEEN_GATEWAY_ROUTES_FILE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("QUEEN_GATEWAY_ROUTES_FILE: %w", err)
		}
		if table, err = routes.Parse(b); err != nil {
			return fmt.Errorf("QUEEN_GATEWAY_ROUTES_FILE: %w", err)
		}
	}
	var upstreams []string
	for _, u := range strings.Split(ev.str("QUEEN_GATEWAY_UPSTREAMS"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			upstreams = append(upstreams, u)
		}
	}
	cfg := gateway.Config{
		Addr:          net.JoinHostPort(ev.str("HOST"), ev.str("PORT")),
		Upstreams:     upstreams,
		Secret:        ev.str("QUEEN_GATEWAY_SECRET"),
		Auth:          auth,
		Routes:        table,
		Loops:         int(ev.int64("QUEEN_EVENT_LOOPS")),
		PollInterval:  time.Duration(ev.int64("QUEEN_GATEWAY_POLL_MS")) * time.Millisecond,
		FlushInterval: time.Duration(ev.int64("QUEEN_GATEWAY_USAGE_FLUSH_MS")) * time.Millisecond,
		IdleTimeout:   time.Duration(ev.int64("QUEEN_IDLE_TIMEOUT_S")) * time.Second,
		MaxBodyBytes:  ev.int64("QUEEN_MAX_BODY_BYTES"),
		Logger:        log,
	}
	if len(ev.errs) > 0 {
		return fmt.Errorf("%s", strings.Join(ev.errs, "; "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cat, err := catalog.Open(ctx, ev.str("QUEEN_DATABASE_URL"), ev.str("QUEEN_DATA_DIR"))
	if err != nil {
		return fmt.Errorf("open the catalog: %w", err)
	}
	defer cat.Close()
	cfg.Catalog = cat
	g, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	if err := g.Start(ctx); err != nil {
		return err
	}
	bld := buildinfo.Read(version, commit)
	log.Info("serving", "addr", g.Addr().String(), "upstreams", upstreams, "identity", auth.Mode(), "version", bld.Version)
	if auth.Mode() == identity.ModeNone {
		log.Info("no end-client identity (no QUEEN_JWT_* set): every client is tenant default; the admin routes and /metrics answer loopback clients only")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	log.Info("shutting down: writing usage and closing connections")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	return g.Shutdown(sctx)
}
