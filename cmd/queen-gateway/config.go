package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/queenmq/ephemeral/gateway"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/internal/envconf"
)

// gatewayConfig is what the environment says, mapped once: the gateway's
// config (its identity built, its route table read), and what is opened at
// start (the catalog) or served beside it (pprof). configFromEnv starts
// nothing; the mapping is held by a table test (config_test.go).
type gatewayConfig struct {
	LogLevel slog.Level
	// Gateway lacks what start makes: its Catalog and Logger. Its Auth is
	// built from AuthConfig.
	Gateway     gateway.Config
	AuthConfig  identity.Config
	DatabaseURL string
	DataDir     string
	PprofAddr   string
}

// configFromEnv reads every setting through getenv and refuses, naming
// each variable, what the gateway cannot run with. It reads the files the
// settings name (a JWT public key, a route table).
func configFromEnv(getenv func(string) string) (gatewayConfig, error) {
	ev := &envconf.Env{Get: getenv, Settings: settings}
	var c gatewayConfig
	if err := c.LogLevel.UnmarshalText([]byte(ev.Str("QUEEN_LOG_LEVEL"))); err != nil {
		return c, fmt.Errorf("QUEEN_LOG_LEVEL: %w", err)
	}
	acfg := identity.Config{
		Mode:        identity.ModeNone,
		JWTSecret:   []byte(ev.Str("QUEEN_JWT_SECRET")),
		JWKSURL:     ev.Str("QUEEN_JWT_JWKS_URL"),
		Issuer:      ev.Str("QUEEN_JWT_ISSUER"),
		Audience:    ev.Str("QUEEN_JWT_AUDIENCE"),
		TenantClaim: ev.Str("QUEEN_JWT_TENANT_CLAIM"),
		AllowNoExp:  ev.Bool("QUEEN_JWT_ALLOW_NO_EXP", false),
	}
	if p := ev.Str("QUEEN_JWT_PUBLIC_KEY"); p != "" {
		pem, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Errorf("QUEEN_JWT_PUBLIC_KEY: %w", err)
		}
		acfg.JWTPublicKey = pem
	}
	if len(acfg.JWTSecret) > 0 || len(acfg.JWTPublicKey) > 0 || acfg.JWKSURL != "" {
		acfg.Mode = identity.ModeJWT
	}
	auth, err := identity.New(acfg)
	if err != nil {
		return c, err
	}
	table := routes.Default()
	if p := ev.Str("QUEEN_GATEWAY_ROUTES_FILE"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return c, fmt.Errorf("QUEEN_GATEWAY_ROUTES_FILE: %w", err)
		}
		if table, err = routes.Parse(b); err != nil {
			return c, fmt.Errorf("QUEEN_GATEWAY_ROUTES_FILE: %w", err)
		}
	}
	browsers, err := crossorigin.New(crossorigin.Split(ev.Str("QUEEN_TRUSTED_ORIGINS")), crossorigin.Split(ev.Str("QUEEN_TRUSTED_HOSTS")))
	if err != nil {
		return c, fmt.Errorf("QUEEN_TRUSTED_ORIGINS or QUEEN_TRUSTED_HOSTS: %w", err)
	}
	var upstreams []string
	for _, u := range strings.Split(ev.Str("QUEEN_GATEWAY_UPSTREAMS"), ",") {
		if u = strings.TrimSpace(u); u != "" {
			upstreams = append(upstreams, u)
		}
	}
	c.Gateway = gateway.Config{
		Addr:             net.JoinHostPort(ev.Str("HOST"), ev.Str("PORT")),
		Upstreams:        upstreams,
		Secret:           ev.Str("QUEEN_GATEWAY_SECRET"),
		OperatorTenant:   ev.Str("QUEEN_OPERATOR_TENANT"),
		AdminToken:       []byte(ev.Str("QUEEN_ADMIN_TOKEN")),
		Browsers:         browsers,
		Auth:             auth,
		Routes:           table,
		Loops:            int(ev.Int64("QUEEN_EVENT_LOOPS")),
		PollInterval:     time.Duration(ev.Int64("QUEEN_GATEWAY_POLL_MS")) * time.Millisecond,
		FlushInterval:    time.Duration(ev.Int64("QUEEN_GATEWAY_USAGE_FLUSH_MS")) * time.Millisecond,
		IdleTimeout:      time.Duration(ev.Int64("QUEEN_IDLE_TIMEOUT_S")) * time.Second,
		MaxBodyBytes:     ev.Int64("QUEEN_MAX_BODY_BYTES"),
		HeaderTimeout:    time.Duration(ev.Int64("QUEEN_HEADER_TIMEOUT_MS")) * time.Millisecond,
		BodyTimeout:      time.Duration(ev.Int64("QUEEN_BODY_TIMEOUT_MS")) * time.Millisecond,
		MaxInflightBytes: ev.Int64("QUEEN_MAX_INFLIGHT_BYTES"),
		NoLink:           !ev.Bool("QUEEN_GATEWAY_LINK", true),
	}
	c.AuthConfig = acfg
	c.DatabaseURL, c.DataDir = ev.Str("QUEEN_DATABASE_URL"), ev.Str("QUEEN_DATA_DIR")
	c.PprofAddr = ev.Str("QUEEN_PPROF_ADDR")
	return c, ev.Err()
}
