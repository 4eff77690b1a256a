package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store/storeenv"
)

// envOf is a getenv over a map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// Every setting lands where the broker uses it: each row sets one variable
// to a value other than its default and checks the field it maps to. A
// setting without a row fails TestEverySettingIsMapped.
var mappingRows = []struct {
	name, value string
	got         func(c brokerConfig) any
	want        any
}{
	{"PORT", "7001", func(c brokerConfig) any { return c.Server.Addr }, "0.0.0.0:7001"},
	{"HOST", "127.0.0.1", func(c brokerConfig) any { return c.Server.Addr }, "127.0.0.1:6632"},
	{"QUEEN_DATA_DIR", "/tmp/qd", func(c brokerConfig) any { return c.Store.Embedded.Dir }, "/tmp/qd"},
	{"QUEEN_DATABASE_URL", "postgres://db/q", func(c brokerConfig) any { return c.Store.Postgres.URL }, "postgres://db/q"},
	{"QUEEN_LOG_LEVEL", "debug", func(c brokerConfig) any { return c.LogLevel }, slog.LevelDebug},
	{"QUEEN_EPHEMERAL_MAX_BYTES", "1000000", func(c brokerConfig) any { return c.Engine.MaxBytes }, int64(1000000)},
	{"QUEEN_EPHEMERAL_QUEUE_MAX_BYTES", "1000", func(c brokerConfig) any { return c.Engine.Defaults.MaxBytes }, int64(1000)},
	{"QUEEN_EPHEMERAL_QUEUE_MAX_LENGTH", "7", func(c brokerConfig) any { return c.Engine.Defaults.MaxLength }, int64(7)},
	{"QUEEN_EPHEMERAL_TTL_S", "9", func(c brokerConfig) any { return c.Engine.Defaults.TTLSeconds }, int64(9)},
	{"QUEEN_EPHEMERAL_LEASE_S", "11", func(c brokerConfig) any { return c.Engine.Defaults.LeaseSeconds }, int64(11)},
	{"QUEEN_EPHEMERAL_RETRY_LIMIT", "2", func(c brokerConfig) any { return c.Engine.Defaults.RetryLimit }, int64(2)},
	{"QUEEN_EPHEMERAL_CEILING_MAX_BYTES", "5000", func(c brokerConfig) any { return c.Engine.Ceilings.MaxBytes }, int64(5000)},
	{"QUEEN_EPHEMERAL_CEILING_MAX_LENGTH", "50", func(c brokerConfig) any { return c.Engine.Ceilings.MaxLength }, int64(50)},
	{"QUEEN_EPHEMERAL_CEILING_LEASE_S", "60", func(c brokerConfig) any { return c.Engine.Ceilings.LeaseSeconds }, int64(60)},
	{"QUEEN_EPHEMERAL_CEILING_TTL_S", "70", func(c brokerConfig) any { return c.Engine.Ceilings.TTLSeconds }, int64(70)},
	{"QUEEN_EPHEMERAL_CEILING_RETRY_LIMIT", "8", func(c brokerConfig) any { return c.Engine.Ceilings.RetryLimit }, int64(8)},
	{"QUEEN_EPHEMERAL_GROUP_IDLE_S", "12", func(c brokerConfig) any { return c.Engine.GroupIdle }, 12 * time.Second},
	{"QUEEN_EPHEMERAL_IMPLICIT_IDLE_S", "13", func(c brokerConfig) any { return c.Engine.ImplicitIdle }, 13 * time.Second},
	{"QUEEN_EPHEMERAL_POP_TIMEOUT_MS", "0", func(c brokerConfig) any { return [2]any{c.Server.PopTimeout, c.Server.PopTimeoutSet} }, [2]any{time.Duration(0), true}},
	{"QUEEN_EPHEMERAL_TENANT_MAX_BYTES", "14", func(c brokerConfig) any { return c.Engine.TenantMaxBytes }, int64(14)},
	{"QUEEN_EPHEMERAL_TENANT_MAX_QUEUES", "15", func(c brokerConfig) any { return c.Engine.TenantMaxQueues }, int64(15)},
	{"QUEEN_EPHEMERAL_TENANT_MSGS_PER_S", "16", func(c brokerConfig) any { return c.Server.TenantMsgsPerSecond }, int64(16)},
	{"QUEEN_EPHEMERAL_REQUIRE_GRANT", "true", func(c brokerConfig) any { return c.Server.RequireGrant }, true},
	{"QUEEN_AUTH_MODE", "gateway", func(c brokerConfig) any { return [2]any{c.Auth.Mode, c.Server.RequireGrant} }, [2]any{"gateway", true}},
	{"QUEEN_JWT_SECRET", "s", func(c brokerConfig) any { return string(c.Auth.JWTSecret) }, "s"},
	{"QUEEN_JWT_JWKS_URL", "http://127.0.0.1:1/jwks", func(c brokerConfig) any { return c.Auth.JWKSURL }, "http://127.0.0.1:1/jwks"},
	{"QUEEN_JWT_JWKS_REFRESH_S", "17", func(c brokerConfig) any { return c.Auth.JWKSRefresh }, 17 * time.Second},
	{"QUEEN_JWT_PUBLIC_KEY", "/k.pem", func(c brokerConfig) any { return c.JWTPublicKeyPath }, "/k.pem"},
	{"QUEEN_JWT_ISSUER", "iss", func(c brokerConfig) any { return c.Auth.Issuer }, "iss"},
	{"QUEEN_JWT_AUDIENCE", "aud", func(c brokerConfig) any { return c.Auth.Audience }, "aud"},
	{"QUEEN_JWT_TENANT_CLAIM", "org", func(c brokerConfig) any { return c.Auth.TenantClaim }, "org"},
	{"QUEEN_JWT_ALLOW_NO_EXP", "true", func(c brokerConfig) any { return c.Auth.AllowNoExp }, true},
	{"QUEEN_GATEWAY_SECRET", "g", func(c brokerConfig) any { return c.Auth.GatewaySecret }, "g"},
	{"QUEEN_ADMIN_TOKEN", "t", func(c brokerConfig) any { return string(c.Server.AdminToken) }, "t"},
	{"QUEEN_OPERATOR_TENANT", " ops ", func(c brokerConfig) any { return c.Server.OperatorTenant }, "ops"},
	{"QUEEN_METRICS_PUBLIC", "true", func(c brokerConfig) any { return c.Server.MetricsPublic }, true},
	{"QUEEN_TRUSTED_ORIGINS", "https://app.example", func(c brokerConfig) any { return c.Server.Browsers != nil }, true},
	{"QUEEN_TRUSTED_HOSTS", "queen.internal", func(c brokerConfig) any { return c.Server.Browsers != nil }, true},
	{"QUEEN_MAX_BODY_BYTES", "4096", func(c brokerConfig) any { return c.Server.MaxBodyBytes }, int64(4096)},
	{"QUEEN_MAX_INFLIGHT_BYTES", "99999", func(c brokerConfig) any { return c.Server.MaxInflightBytes }, int64(99999)},
	{"QUEEN_CONNECTION_CHARGE_BYTES", "0", func(c brokerConfig) any { return c.Server.ConnCharge }, int64(0)},
	{"QUEEN_HEADER_TIMEOUT_MS", "18", func(c brokerConfig) any { return c.Server.HeaderTimeout }, 18 * time.Millisecond},
	{"QUEEN_BODY_TIMEOUT_MS", "19", func(c brokerConfig) any { return c.Server.BodyTimeout }, 19 * time.Millisecond},
	{"QUEEN_OUTBOUND_SOFT_BYTES", "20", func(c brokerConfig) any { return c.Server.OutboundSoft }, 20},
	{"QUEEN_OUTBOUND_HARD_BYTES", "21", func(c brokerConfig) any { return c.Server.OutboundHard }, 21},
	{"QUEEN_OUTBOUND_SOFT_S", "22", func(c brokerConfig) any { return c.Server.OutboundSoftTime }, 22 * time.Second},
	{"QUEEN_IDLE_TIMEOUT_S", "23", func(c brokerConfig) any { return c.Server.IdleTimeout }, 23 * time.Second},
	{"QUEEN_EVENT_LOOPS", "3", func(c brokerConfig) any { return c.Server.Loops }, 3},
	{"QUEEN_PPROF_ADDR", "127.0.0.1:6060", func(c brokerConfig) any { return c.PprofAddr }, "127.0.0.1:6060"},
}

// The settings mapped by other packages' readers, each with the test that
// holds it: the store's (storeenv), the cell's (cell.FromEnv, and
// TestRelayListenerFromEnv here) and the heap's (logLimits).
var mappedElsewhere = map[string]string{
	"QUEEN_DATABASE_SCHEMA":               "TestDatabaseSettingsNeedAURL below",
	"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS":   "TestDatabaseSettingsNeedAURL below",
	"QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": "TestDatabaseSettingsNeedAURL below",
	"QUEEN_CELL_ADVERTISE":                "TestCellSettings below",
	"QUEEN_CELL_SECRET":                   "TestCellSettings below",
	"QUEEN_CELL_HEARTBEAT_MS":             "TestCellSettings below",
	"QUEEN_CELL_LISTEN":                   "TestRelayListenerFromEnv",
	"QUEEN_CELL_MEMBER_TIMEOUT_MS":        "TestCellSettings below",
	"QUEEN_CELL_PUBLIC_URL":               "TestPublicURLFromEnv",
	"GOMEMLIMIT":                          "read by logLimits at start",
}

func TestEverySettingIsMapped(t *testing.T) {
	rows := map[string]bool{}
	for _, r := range mappingRows {
		rows[r.name] = true
	}
	for _, s := range settings {
		if !rows[s.Name] && mappedElsewhere[s.Name] == "" {
			t.Errorf("%s: no row in mappingRows, and not mapped elsewhere", s.Name)
		}
	}
}

func TestConfigFromEnvMapsEachSetting(t *testing.T) {
	for _, r := range mappingRows {
		c, err := configFromEnv(envOf(map[string]string{r.name: r.value}))
		if err != nil {
			t.Fatalf("%s=%q: %v", r.name, r.value, err)
		}
		if got := r.got(c); got != r.want {
			t.Errorf("%s=%q: got %v, want %v", r.name, r.value, got, r.want)
		}
	}
}

// With nothing set, each field takes the default --help prints.
func TestConfigFromEnvDefaults(t *testing.T) {
	c, err := configFromEnv(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if s.Default == "" {
			continue
		}
		for _, r := range mappingRows {
			if r.name != s.Name {
				continue
			}
			// The default, set explicitly, maps to the same config.
			d, err := configFromEnv(envOf(map[string]string{s.Name: s.Default}))
			if err != nil {
				t.Fatalf("%s=%q (its default): %v", s.Name, s.Default, err)
			}
			if r.got(c) != r.got(d) {
				t.Errorf("%s: unset gives %v, its default %q gives %v", s.Name, r.got(c), s.Default, r.got(d))
			}
		}
	}
	if c.Store.Backend != storeenv.Embedded || c.Store.Embedded.Dir != storeenv.DefaultDataDir || c.Cell.Enabled() {
		t.Fatalf("defaults: store %+v, cell enabled %v", c.Store, c.Cell.Enabled())
	}
	if c.Server.MaxInflightBytes != inflightDefault(c.Engine.MaxBytes) || c.Server.RequireGrant {
		t.Fatalf("derived defaults: inflight %d, require grant %v", c.Server.MaxInflightBytes, c.Server.RequireGrant)
	}
}

// A value the broker cannot use stops it at boot, the message naming the
// variable.
func TestConfigFromEnvRefusals(t *testing.T) {
	for _, r := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"QUEEN_LOG_LEVEL": "loud"}, "QUEEN_LOG_LEVEL"},
		{map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": "-1"}, "QUEEN_EPHEMERAL_MAX_BYTES"},
		{map[string]string{"QUEEN_IDLE_TIMEOUT_S": "soon"}, "QUEEN_IDLE_TIMEOUT_S"},
		{map[string]string{"QUEEN_METRICS_PUBLIC": "yes"}, "QUEEN_METRICS_PUBLIC"},
		{map[string]string{"QUEEN_TRUSTED_ORIGINS": "app.example"}, "QUEEN_TRUSTED_ORIGINS"},
		{map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": "0"}, "QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS"},
		{map[string]string{"QUEEN_CELL_ADVERTISE": "127.0.0.1:7000", "QUEEN_CELL_SECRET": "0123456789abcdef-cell"}, "PostgreSQL"},
		{map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", "QUEEN_CELL_ADVERTISE": "127.0.0.1:6632", "QUEEN_CELL_SECRET": "0123456789abcdef-cell"}, "PORT"},
		{map[string]string{testRelayDelay: "-5"}, testRelayDelay},
	} {
		_, err := configFromEnv(envOf(r.env))
		if err == nil || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%v: %v, want an error naming %s", r.env, err, r.want)
		}
	}
}

// The store's settings reach its config once a database is named.
func TestDatabaseSettingsNeedAURL(t *testing.T) {
	c, err := configFromEnv(envOf(map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", "QUEEN_DATABASE_SCHEMA": "s1",
		"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": "30", "QUEEN_DATABASE_STATEMENT_TIMEOUT_MS": "40"}))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Store.Postgres
	if c.Store.Backend != storeenv.Postgres || p.Schema != "s1" || p.AcquireTimeout != 30*time.Millisecond || p.StatementTimeout != 40*time.Millisecond {
		t.Fatalf("store: %+v", c.Store)
	}
}

// The cell's settings reach its config, and a member syncs declarations
// every heartbeat.
func TestCellSettings(t *testing.T) {
	c, err := configFromEnv(envOf(map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", "QUEEN_CELL_ADVERTISE": "127.0.0.1:7000",
		"QUEEN_CELL_SECRET": "0123456789abcdef-cell", "QUEEN_CELL_HEARTBEAT_MS": "200", "QUEEN_CELL_MEMBER_TIMEOUT_MS": "900"}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cell.Enabled() || c.Cell.Advertise != "127.0.0.1:7000" || c.Cell.Heartbeat != 200*time.Millisecond ||
		c.Cell.MemberTimeout != 900*time.Millisecond || c.Server.SyncInterval != 200*time.Millisecond {
		t.Fatalf("cell %+v, sync %v", c.Cell, c.Server.SyncInterval)
	}
}

// startBroker starts a broker of one on the embedded store that serves,
// and stop ends it and frees its port.
func TestStartBrokerServesAndStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cfg, err := configFromEnv(envOf(map[string]string{"HOST": "127.0.0.1", "PORT": port, "QUEEN_DATA_DIR": t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := startBroker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /health: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if l, err := net.Listen("tcp", "127.0.0.1:"+port); err == nil {
			l.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the port is still held after stop")
}
