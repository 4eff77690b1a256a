package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/identity"
)

// Every setting lands where the gateway uses it: each row sets one
// variable to a value other than its default and checks the field it maps
// to. A setting without a row fails TestEverySettingIsMapped.
var mappingRows = []struct {
	name, value string
	got         func(c gatewayConfig) any
	want        any
}{
	{"PORT", "7001", func(c gatewayConfig) any { return c.Gateway.Addr }, "0.0.0.0:7001"},
	{"HOST", "127.0.0.1", func(c gatewayConfig) any { return c.Gateway.Addr }, "127.0.0.1:6630"},
	{"QUEEN_GATEWAY_UPSTREAMS", " http://127.0.0.1:1 ,, http://127.0.0.1:2", func(c gatewayConfig) any { return fmtList(c.Gateway.Upstreams) }, "http://127.0.0.1:1|http://127.0.0.1:2"},
	{"QUEEN_GATEWAY_SECRET", "s", func(c gatewayConfig) any { return c.Gateway.Secret }, "s"},
	{"QUEEN_GATEWAY_LINK", "false", func(c gatewayConfig) any { return c.Gateway.NoLink }, true},
	{"QUEEN_GATEWAY_ROUTES_FILE", "testdata/routes.json", func(c gatewayConfig) any { return c.Gateway.Routes != nil }, true},
	{"QUEEN_GATEWAY_POLL_MS", "250", func(c gatewayConfig) any { return c.Gateway.PollInterval }, 250 * time.Millisecond},
	{"QUEEN_GATEWAY_USAGE_FLUSH_MS", "750", func(c gatewayConfig) any { return c.Gateway.FlushInterval }, 750 * time.Millisecond},
	{"QUEEN_DATABASE_URL", "postgres://db/g", func(c gatewayConfig) any { return c.DatabaseURL }, "postgres://db/g"},
	{"QUEEN_DATA_DIR", "/tmp/gd", func(c gatewayConfig) any { return c.DataDir }, "/tmp/gd"},
	{"QUEEN_JWT_SECRET", "k", func(c gatewayConfig) any { return c.Gateway.Auth.Mode() }, identity.ModeJWT},
	{"QUEEN_JWT_PUBLIC_KEY", "testdata/ed25519.pem", func(c gatewayConfig) any { return c.Gateway.Auth.Mode() }, identity.ModeJWT},
	{"QUEEN_JWT_JWKS_URL", "http://127.0.0.1:1/jwks", func(c gatewayConfig) any { return c.Gateway.Auth.Mode() }, identity.ModeJWT},
	{"QUEEN_JWT_ISSUER", "iss", func(c gatewayConfig) any { return c.AuthConfig.Issuer }, "iss"},
	{"QUEEN_JWT_AUDIENCE", "aud", func(c gatewayConfig) any { return c.AuthConfig.Audience }, "aud"},
	{"QUEEN_JWT_TENANT_CLAIM", "org", func(c gatewayConfig) any { return c.AuthConfig.TenantClaim }, "org"},
	{"QUEEN_JWT_ALLOW_NO_EXP", "true", func(c gatewayConfig) any { return c.AuthConfig.AllowNoExp }, true},
	{"QUEEN_ADMIN_TOKEN", "t", func(c gatewayConfig) any { return string(c.Gateway.AdminToken) }, "t"},
	{"QUEEN_TRUSTED_ORIGINS", "https://app.example", func(c gatewayConfig) any { return c.Gateway.Browsers != nil }, true},
	{"QUEEN_TRUSTED_HOSTS", "gw.internal", func(c gatewayConfig) any { return c.Gateway.Browsers != nil }, true},
	{"QUEEN_OPERATOR_TENANT", "ops", func(c gatewayConfig) any { return c.Gateway.OperatorTenant }, "ops"},
	{"QUEEN_EVENT_LOOPS", "3", func(c gatewayConfig) any { return c.Gateway.Loops }, 3},
	{"QUEEN_IDLE_TIMEOUT_S", "9", func(c gatewayConfig) any { return c.Gateway.IdleTimeout }, 9 * time.Second},
	{"QUEEN_MAX_BODY_BYTES", "4096", func(c gatewayConfig) any { return c.Gateway.MaxBodyBytes }, int64(4096)},
	{"QUEEN_MAX_INFLIGHT_BYTES", "8192", func(c gatewayConfig) any { return c.Gateway.MaxInflightBytes }, int64(8192)},
	{"QUEEN_HEADER_TIMEOUT_MS", "11", func(c gatewayConfig) any { return c.Gateway.HeaderTimeout }, 11 * time.Millisecond},
	{"QUEEN_BODY_TIMEOUT_MS", "12", func(c gatewayConfig) any { return c.Gateway.BodyTimeout }, 12 * time.Millisecond},
	{"QUEEN_LOG_LEVEL", "warn", func(c gatewayConfig) any { return c.LogLevel }, slog.LevelWarn},
	{"QUEEN_PPROF_ADDR", "127.0.0.1:6061", func(c gatewayConfig) any { return c.PprofAddr }, "127.0.0.1:6061"},
}

func fmtList(l []string) string {
	s := ""
	for i, v := range l {
		if i > 0 {
			s += "|"
		}
		s += v
	}
	return s
}

func TestEverySettingIsMapped(t *testing.T) {
	rows := map[string]bool{}
	for _, r := range mappingRows {
		rows[r.name] = true
	}
	for _, s := range settings {
		if !rows[s.Name] {
			t.Errorf("%s: no row in mappingRows", s.Name)
		}
	}
}

func TestConfigFromEnvMapsEachSetting(t *testing.T) {
	for _, r := range mappingRows {
		c, err := configFromEnv(func(k string) string {
			if k == r.name {
				return r.value
			}
			return ""
		})
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
	c, err := configFromEnv(func(string) string { return "" })
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
			d, err := configFromEnv(func(k string) string {
				if k == s.Name {
					return s.Default
				}
				return ""
			})
			if err != nil {
				t.Fatalf("%s=%q (its default): %v", s.Name, s.Default, err)
			}
			if r.got(c) != r.got(d) {
				t.Errorf("%s: unset gives %v, its default %q gives %v", s.Name, r.got(c), s.Default, r.got(d))
			}
		}
	}
	if c.Gateway.Auth.Mode() != identity.ModeNone || c.Gateway.NoLink || c.DataDir != "./queen-gateway-data" {
		t.Fatalf("defaults: identity %s, no link %v, data dir %s", c.Gateway.Auth.Mode(), c.Gateway.NoLink, c.DataDir)
	}
}
