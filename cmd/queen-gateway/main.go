// Command queen-gateway is the multi-tenant gateway in front of the
// brokers (package gateway, docs/gateway.md). It is configured by
// environment variables; --help lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/queenmq/ephemeral/gateway"
	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/buildinfo"
	"github.com/queenmq/ephemeral/internal/envconf"
	"github.com/queenmq/ephemeral/internal/pprofserve"
)

// settings lists every variable, in the order --help prints them.
var settings = []envconf.Setting{
	{Name: "PORT", Default: "6630", Help: "TCP port to listen on"},
	{Name: "HOST", Default: "0.0.0.0", Help: "address to listen on"},
	{Name: "QUEEN_GATEWAY_UPSTREAMS", Default: "", Help: "comma-separated broker base URLs (http://host:port), any of which may answer: one broker or the members of a cell"},
	{Name: "QUEEN_GATEWAY_SECRET", Default: "", Help: "sent to the brokers as X-Queen-Gateway-Secret; they run with QUEEN_AUTH_MODE=gateway and the same secret"},
	{Name: "QUEEN_GATEWAY_LINK", Default: "true", Help: "carry push, pop and ack to each broker on one upgraded, multiplexed connection per event loop (false: HTTP connections only)"},
	{Name: "QUEEN_GATEWAY_ROUTES_FILE", Default: "", Help: "a route classification to use instead of the built-in one (GET /api/v1/gateway/routes shows its shape)"},
	{Name: "QUEEN_GATEWAY_POLL_MS", Default: "1000", Help: "how often the catalog's revision is read: plan and tenant changes apply within this"},
	{Name: "QUEEN_GATEWAY_USAGE_FLUSH_MS", Default: "5000", Help: "how often usage is written to the catalog (a crash loses at most this much)"},
	{Name: "QUEEN_DATABASE_URL", Default: "", Help: "PostgreSQL URL for plans, tenants and usage; unset: the embedded store under QUEEN_DATA_DIR"},
	{Name: "QUEEN_DATA_DIR", Default: "./queen-gateway-data", Help: "directory of the embedded store"},
	{Name: "QUEEN_JWT_SECRET", Default: "", Help: "end clients: HS256 secret (with any QUEEN_JWT_* key set, clients need a JWT)"},
	{Name: "QUEEN_JWT_PUBLIC_KEY", Default: "", Help: "end clients: path of a PEM public key (RSA for RS256, Ed25519 for EdDSA)"},
	{Name: "QUEEN_JWT_JWKS_URL", Default: "", Help: "end clients: URL of a JWK Set"},
	{Name: "QUEEN_JWT_ISSUER", Default: "", Help: "end clients: required iss (unset = not checked)"},
	{Name: "QUEEN_JWT_AUDIENCE", Default: "", Help: "end clients: required aud (unset = not checked)"},
	{Name: "QUEEN_JWT_TENANT_CLAIM", Default: "tenant", Help: "end clients: the claim naming the tenant"},
	{Name: "QUEEN_JWT_ALLOW_NO_EXP", Default: "false", Help: "end clients: true accepts tokens without an exp claim"},
	{Name: "QUEEN_ADMIN_TOKEN", Default: "", Help: "sent as Authorization: Bearer <token>, makes a request the gateway's operator (plans, tenants, usage, /metrics) whatever the identity; without JWT identity, once set, needed from loopback too"},
	{Name: "QUEEN_TRUSTED_ORIGINS", Default: "", Help: "comma-separated browser origins (scheme://host[:port]) whose pages may change state from another origin; others get 403 forbidden (D20)"},
	{Name: "QUEEN_TRUSTED_HOSTS", Default: "", Help: "comma-separated host names (no port) accepted in Host from a loopback client administering the gateway without identity, besides localhost, 127.0.0.1 and [::1] (D20)"},
	{Name: "QUEEN_OPERATOR_TENANT", Default: "", Help: "with JWT identity: an admin of this tenant is the gateway's operator too (unset: no tenant is; only QUEEN_ADMIN_TOKEN changes plans and tenants)"},
	{Name: "QUEEN_EVENT_LOOPS", Default: "0", Help: "event loops (0 = GOMAXPROCS)"},
	{Name: "QUEEN_IDLE_TIMEOUT_S", Default: "120", Help: "close a client connection idle this long"},
	{Name: "QUEEN_MAX_BODY_BYTES", Default: "67108864", Help: "largest request body (64 MiB)"},
	{Name: "QUEEN_MAX_INFLIGHT_BYTES", Default: "67108864", Help: "request bytes all client connections may hold while bodies arrive (64 MiB): a body past it is a 503 ephemeral_unavailable on its head"},
	{Name: "QUEEN_HEADER_TIMEOUT_MS", Default: "10000", Help: "close a client connection whose request head takes longer than this"},
	{Name: "QUEEN_BODY_TIMEOUT_MS", Default: "30000", Help: "close a client connection whose request body takes longer than this"},
	{Name: "QUEEN_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
	{Name: "QUEEN_PPROF_ADDR", Default: "", Help: "serve net/http/pprof at this separate address, e.g. 127.0.0.1:6061 (unset = off); also samples mutex and block profiles"},
}

func main() {
	printVersion := func(w io.Writer) { buildinfo.Print(w, "queen-gateway", buildinfo.Read(version, commit)) }
	if code, handled := envconf.Args("queen-gateway", os.Args[1:], os.Stdout, os.Stderr, printHelp, printVersion); handled {
		os.Exit(code)
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
	envconf.PrintHelp(w, settings)
}

// run is the gateway's life: its configuration from the environment, its
// start, and its stop on SIGTERM or SIGINT.
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
	g, cat, err := startGateway(cfg, log)
	if err != nil {
		return err
	}
	defer cat.Close()
	bld := buildinfo.Read(version, commit)
	log.Info("serving", "addr", g.Addr().String(), "upstreams", cfg.Gateway.Upstreams, "identity", cfg.Gateway.Auth.Mode(), "version", bld.Version)
	switch {
	case cfg.Gateway.Auth.Mode() == identity.ModeJWT && cfg.Gateway.OperatorTenant == "" && len(cfg.Gateway.AdminToken) == 0:
		log.Warn("neither QUEEN_ADMIN_TOKEN nor QUEEN_OPERATOR_TENANT is set: nobody may change plans and tenants")
	case cfg.Gateway.Auth.Mode() == identity.ModeNone && len(cfg.Gateway.AdminToken) == 0:
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

// startGateway opens the catalog and starts the gateway on it; the
// caller closes the catalog once the gateway has shut down.
func startGateway(cfg gatewayConfig, log *slog.Logger) (*gateway.Gateway, catalog.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cat, err := catalog.Open(ctx, cfg.DatabaseURL, cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("open the catalog: %w", err)
	}
	gcfg := cfg.Gateway
	gcfg.Catalog, gcfg.Logger = cat, log
	g, err := gateway.New(gcfg)
	if err == nil {
		err = g.Start(ctx)
	}
	if err != nil {
		cat.Close()
		return nil, nil, err
	}
	return g, cat, nil
}
