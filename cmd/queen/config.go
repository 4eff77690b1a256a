package main

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/server"
	"github.com/queenmq/ephemeral/store/storeenv"
)

// brokerConfig is what the environment says, mapped once onto the configs
// of the parts the broker is built from (broker.go). configFromEnv makes
// it without a side effect (it opens, reads and starts nothing), so the
// whole mapping is held by a table test (config_test.go); every default
// is declared once, in settings (env.go) or in the package that owns it.
type brokerConfig struct {
	LogLevel slog.Level
	Engine   engine.Config
	// Server lacks what is built from the rest: its Logger, Auth, Engine
	// and Store.
	Server server.Config
	// Auth lacks JWTPublicKey, read from JWTPublicKeyPath when built.
	Auth             identity.Config
	JWTPublicKeyPath string
	PprofAddr        string
	Store            storeenv.Choice
	Cell             cell.Config
	// RelayDelay is a test-only fault (testRelayDelay, cell.go).
	RelayDelay time.Duration
}

// configFromEnv reads every setting through getenv and refuses, naming
// each variable, what the broker cannot run with.
func configFromEnv(getenv func(string) string) (brokerConfig, error) {
	ev := newEnv(getenv)
	var c brokerConfig
	if err := c.LogLevel.UnmarshalText([]byte(ev.Str("QUEEN_LOG_LEVEL"))); err != nil {
		return c, fmt.Errorf("QUEEN_LOG_LEVEL: %w", err)
	}
	c.Engine = engine.Config{
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
		GroupIdle:       seconds(ev.Int64("QUEEN_EPHEMERAL_GROUP_IDLE_S")),
		ImplicitIdle:    seconds(ev.Int64("QUEEN_EPHEMERAL_IMPLICIT_IDLE_S")),
		TenantMaxBytes:  ev.Int64("QUEEN_EPHEMERAL_TENANT_MAX_BYTES"),
		TenantMaxQueues: ev.Int64("QUEEN_EPHEMERAL_TENANT_MAX_QUEUES"),
	}
	c.Server = server.Config{
		Addr:         net.JoinHostPort(ev.Str("HOST"), ev.Str("PORT")),
		MaxBodyBytes: ev.Int64("QUEEN_MAX_BODY_BYTES"),
		// The variable always has a value (its default is in env.go), so
		// 0 is meant: waiting pops without a timeout answer at once.
		PopTimeout:          millis(ev.Int64("QUEEN_EPHEMERAL_POP_TIMEOUT_MS")),
		PopTimeoutSet:       true,
		HeaderTimeout:       millis(ev.Int64("QUEEN_HEADER_TIMEOUT_MS")),
		BodyTimeout:         millis(ev.Int64("QUEEN_BODY_TIMEOUT_MS")),
		OutboundSoft:        int(ev.Int64("QUEEN_OUTBOUND_SOFT_BYTES")),
		OutboundHard:        int(ev.Int64("QUEEN_OUTBOUND_HARD_BYTES")),
		OutboundSoftTime:    seconds(ev.Int64("QUEEN_OUTBOUND_SOFT_S")),
		MaxInflightBytes:    ev.Int64("QUEEN_MAX_INFLIGHT_BYTES"),
		ConnCharge:          ev.Int64("QUEEN_CONNECTION_CHARGE_BYTES"),
		IdleTimeout:         seconds(ev.Int64("QUEEN_IDLE_TIMEOUT_S")),
		Loops:               int(ev.Int64("QUEEN_EVENT_LOOPS")),
		TenantMsgsPerSecond: ev.Int64("QUEEN_EPHEMERAL_TENANT_MSGS_PER_S"),
		AdminToken:          []byte(ev.Str("QUEEN_ADMIN_TOKEN")),
		OperatorTenant:      strings.TrimSpace(ev.Str("QUEEN_OPERATOR_TENANT")),
		MetricsPublic:       ev.Bool("QUEEN_METRICS_PUBLIC", false),
	}
	if c.Server.MaxInflightBytes == 0 {
		c.Server.MaxInflightBytes = inflightDefault(c.Engine.MaxBytes)
	}
	c.Auth = identity.Config{
		Mode:          strings.TrimSpace(ev.Str("QUEEN_AUTH_MODE")),
		JWTSecret:     []byte(ev.Str("QUEEN_JWT_SECRET")),
		Issuer:        ev.Str("QUEEN_JWT_ISSUER"),
		Audience:      ev.Str("QUEEN_JWT_AUDIENCE"),
		TenantClaim:   ev.Str("QUEEN_JWT_TENANT_CLAIM"),
		GatewaySecret: ev.Str("QUEEN_GATEWAY_SECRET"),
		JWKSURL:       ev.Str("QUEEN_JWT_JWKS_URL"),
		JWKSRefresh:   seconds(ev.Int64("QUEEN_JWT_JWKS_REFRESH_S")),
		AllowNoExp:    ev.Bool("QUEEN_JWT_ALLOW_NO_EXP", false),
	}
	c.JWTPublicKeyPath = ev.Str("QUEEN_JWT_PUBLIC_KEY")
	c.Server.RequireGrant = ev.Bool("QUEEN_EPHEMERAL_REQUIRE_GRANT", c.Auth.Mode == identity.ModeGateway)
	c.PprofAddr = ev.Str("QUEEN_PPROF_ADDR")
	browsers, err := crossorigin.New(crossorigin.Split(ev.Str("QUEEN_TRUSTED_ORIGINS")), crossorigin.Split(ev.Str("QUEEN_TRUSTED_HOSTS")))
	if err != nil {
		return c, fmt.Errorf("QUEEN_TRUSTED_ORIGINS or QUEEN_TRUSTED_HOSTS: %w", err)
	}
	c.Server.Browsers = browsers
	if err := ev.Err(); err != nil {
		return c, err
	}
	if c.Store, err = storeenv.FromEnv(getenv); err != nil {
		return c, err
	}
	if c.Cell, err = cellConfig(getenv, ev.Str("PORT")); err != nil {
		return c, err
	}
	if c.Cell.Enabled() {
		// Declarations, grants and the kill switch written by another
		// member are looked for at least once a heartbeat (D17).
		c.Server.SyncInterval = c.Cell.Heartbeat
	}
	if v := getenv(testRelayDelay); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			return c, fmt.Errorf("%s: not a number of milliseconds: %q", testRelayDelay, v)
		}
		c.RelayDelay = time.Duration(ms) * time.Millisecond
	}
	return c, nil
}

func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }
func millis(n int64) time.Duration  { return time.Duration(n) * time.Millisecond }
