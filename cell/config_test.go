package cell

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

const secret = "0123456789abcdef-cell"

func TestFromEnvUnset(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Enabled() || c.Advertise != "" || c.Secret != nil || c.Heartbeat != 0 || c.MemberTimeout != 0 {
		t.Fatalf("no QUEEN_CELL_ADVERTISE: %+v, want a cell of one (zero Config)", c)
	}
}

func TestFromEnvDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"QUEEN_DATABASE_URL": "postgres://db/q", EnvAdvertise: "broker-a.internal:6632", EnvSecret: secret,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.Advertise != "broker-a.internal:6632" || string(c.Secret) != secret ||
		c.Heartbeat != time.Second || c.MemberTimeout != 5*time.Second {
		t.Fatalf("got %+v", c)
	}
}

func TestFromEnvSettings(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		"PGHOST": "db", EnvAdvertise: "[fd00::1]:7000", EnvSecret: secret,
		EnvHeartbeat: "250", EnvMemberTimeout: "1500",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Advertise != "[fd00::1]:7000" || c.Heartbeat != 250*time.Millisecond || c.MemberTimeout != 1500*time.Millisecond {
		t.Fatalf("got %+v", c)
	}
}

// The bounds at their exact values are accepted: ports 1 and 65535,
// 1 and 3,600,000 ms, a member timeout of exactly two heartbeats.
func TestFromEnvBounds(t *testing.T) {
	for _, tc := range []struct {
		advertise, heartbeat, timeout string
		hb, to                        time.Duration
	}{
		{"a:1", "1", "2", time.Millisecond, 2 * time.Millisecond},
		{"a:65535", "1800000", "3600000", 30 * time.Minute, time.Hour},
		{"a:6632", "1000", "2000", time.Second, 2 * time.Second},
	} {
		c, err := FromEnv(env(map[string]string{
			"QUEEN_DATABASE_URL": "postgres://db/q", EnvAdvertise: tc.advertise, EnvSecret: secret,
			EnvHeartbeat: tc.heartbeat, EnvMemberTimeout: tc.timeout,
		}))
		if err != nil {
			t.Errorf("%s, heartbeat %s ms, timeout %s ms: %v", tc.advertise, tc.heartbeat, tc.timeout, err)
			continue
		}
		if c.Advertise != tc.advertise || c.Heartbeat != tc.hb || c.MemberTimeout != tc.to {
			t.Errorf("%s, heartbeat %s ms, timeout %s ms: %+v", tc.advertise, tc.heartbeat, tc.timeout, c)
		}
	}
}

// D17's refusals, and ours, each with a message naming what to set.
func TestFromEnvRefusals(t *testing.T) {
	base := func(kv ...string) map[string]string {
		m := map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", EnvAdvertise: "a:6632", EnvSecret: secret}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
		not  string // and not this: a value refused is not also compared
	}{
		{"advertise without a database", base("QUEEN_DATABASE_URL", ""), "QUEEN_CELL_ADVERTISE needs QUEEN_DATABASE_URL", ""},
		{"advertise without a secret", base(EnvSecret, ""), "QUEEN_CELL_ADVERTISE needs QUEEN_CELL_SECRET", ""},
		{"a short secret", base(EnvSecret, "short"), "QUEEN_CELL_SECRET is 5 bytes; at least 16", ""},
		{"not host:port", base(EnvAdvertise, "broker-a"), `QUEEN_CELL_ADVERTISE="broker-a" is not host:port`, ""},
		{"no host", base(EnvAdvertise, ":6632"), "names no host", ""},
		{"unspecified host", base(EnvAdvertise, "0.0.0.0:6632"), "unspecified address", ""},
		{"port 0", base(EnvAdvertise, "a:0"), "the port must be 1 to 65535", ""},
		{"port name", base(EnvAdvertise, "a:http"), "the port must be 1 to 65535", ""},
		{"heartbeat 0", base(EnvHeartbeat, "0"), `QUEEN_CELL_HEARTBEAT_MS="0": want milliseconds`, ""},
		{"heartbeat in seconds", base(EnvHeartbeat, "1s"), `QUEEN_CELL_HEARTBEAT_MS="1s": want milliseconds`, ""},
		{"timeout negative", base(EnvMemberTimeout, "-5"), `QUEEN_CELL_MEMBER_TIMEOUT_MS="-5": want milliseconds`, "at least twice"},
		{"timeout over an hour", base(EnvMemberTimeout, "3600001"), `QUEEN_CELL_MEMBER_TIMEOUT_MS="3600001": want milliseconds`, "at least twice"},
		{"heartbeat over an hour", base(EnvHeartbeat, "3600001"), `QUEEN_CELL_HEARTBEAT_MS="3600001": want milliseconds`, "at least twice"},
		{"port over 65535", base(EnvAdvertise, "a:65536"), "the port must be 1 to 65535", ""},
		{"timeout under two heartbeats", base(EnvHeartbeat, "1000", EnvMemberTimeout, "1999"), "QUEEN_CELL_MEMBER_TIMEOUT_MS=1999 must be at least twice QUEEN_CELL_HEARTBEAT_MS=1000", ""},
		{"timeout under two default heartbeats", base(EnvMemberTimeout, "1500"), "must be at least twice", ""},
		{"secret without advertise", map[string]string{"QUEEN_DATABASE_URL": "x", EnvSecret: secret}, "QUEEN_CELL_SECRET is set without QUEEN_CELL_ADVERTISE", ""},
		{"heartbeat without advertise", map[string]string{EnvHeartbeat: "100"}, "QUEEN_CELL_HEARTBEAT_MS is set without QUEEN_CELL_ADVERTISE", ""},
		{"listen without advertise", map[string]string{EnvListen: "127.0.0.1"}, "QUEEN_CELL_LISTEN is set without QUEEN_CELL_ADVERTISE", ""},
		{"listen with a port", base(EnvListen, "127.0.0.1:7000"), `QUEEN_CELL_LISTEN="127.0.0.1:7000": give the host only; the relay listens on QUEEN_CELL_ADVERTISE's port`, ""},
		{"listen not a host", base(EnvListen, "a b"), `QUEEN_CELL_LISTEN="a b" is not a host to bind`, ""},
		{"HOST with a port", base(EnvHost, "10.0.0.1:80"), `HOST="10.0.0.1:80": give the host only`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromEnv(env(tc.env))
			if err == nil {
				t.Fatalf("accepted: %+v", c)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Fatalf("error %q also says %q", err, tc.not)
			}
		})
	}
	// Several problems are reported together.
	_, err := FromEnv(env(map[string]string{EnvAdvertise: "a:1"}))
	if err == nil || !strings.Contains(err.Error(), "needs QUEEN_DATABASE_URL") || !strings.Contains(err.Error(), "needs QUEEN_CELL_SECRET") {
		t.Fatalf("error %v does not name both missing variables", err)
	}
}

// The secret never reaches a log line or a %v.
func TestConfigHidesSecret(t *testing.T) {
	c := Config{Advertise: "a:1", Secret: []byte(secret), Heartbeat: time.Second, MemberTimeout: 5 * time.Second}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("boot", "cell", c)
	for _, s := range []string{b.String(), fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%v", &c)} {
		if strings.Contains(s, secret) {
			t.Fatalf("the secret is printed: %s", s)
		}
		if !strings.Contains(s, "a:1") {
			t.Fatalf("the address is not: %s", s)
		}
	}
}

// Where the relay binds: QUEEN_CELL_LISTEN, else HOST, else every
// interface; always on the advertised port.
func TestRelayAddr(t *testing.T) {
	for _, tc := range []struct{ listen, host, want string }{
		{"", "", ":7000"},
		{"", "127.0.0.1", "127.0.0.1:7000"},
		{"", "0.0.0.0", "0.0.0.0:7000"},
		{"10.1.2.3", "127.0.0.1", "10.1.2.3:7000"},
		{"::1", "", "[::1]:7000"},
		{"[fd00::2]", "", "[fd00::2]:7000"},
		{"broker-a.internal", "", "broker-a.internal:7000"},
	} {
		c, err := FromEnv(env(map[string]string{
			"QUEEN_DATABASE_URL": "postgres://db/q", EnvAdvertise: "broker-a.example:7000", EnvSecret: secret,
			EnvListen: tc.listen, EnvHost: tc.host,
		}))
		if err != nil {
			t.Fatalf("QUEEN_CELL_LISTEN=%q HOST=%q: %v", tc.listen, tc.host, err)
		}
		if got := c.RelayAddr(); got != tc.want {
			t.Errorf("QUEEN_CELL_LISTEN=%q HOST=%q: the relay binds %q, want %q", tc.listen, tc.host, got, tc.want)
		}
	}
}
