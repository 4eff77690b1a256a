package main

import (
	"bytes"
	"strings"
	"testing"
)

// The names tests outside the repository drive the gateway by are listed
// by --help, with the default port.
func TestHelpListsTheFixedNames(t *testing.T) {
	var b bytes.Buffer
	printHelp(&b)
	for _, v := range []string{"PORT", "6630", "HOST", "QUEEN_GATEWAY_UPSTREAMS", "QUEEN_GATEWAY_SECRET",
		"QUEEN_JWT_SECRET", "QUEEN_JWT_PUBLIC_KEY", "QUEEN_JWT_JWKS_URL", "QUEEN_JWT_ISSUER", "QUEEN_JWT_AUDIENCE",
		"QUEEN_JWT_TENANT_CLAIM", "QUEEN_DATABASE_URL", "QUEEN_DATA_DIR", "QUEEN_ADMIN_TOKEN", "QUEEN_OPERATOR_TENANT",
		"QUEEN_MAX_INFLIGHT_BYTES", "QUEEN_HEADER_TIMEOUT_MS", "QUEEN_BODY_TIMEOUT_MS",
		"QUEEN_TRUSTED_ORIGINS", "QUEEN_TRUSTED_HOSTS"} {
		if !strings.Contains(b.String(), v) {
			t.Errorf("--help does not list %s", v)
		}
	}
}

// A configuration that cannot work is refused at start, naming what is
// missing or wrong.
func TestRunRefusesABadConfiguration(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"QUEEN_GATEWAY_SECRET": "s", "QUEEN_DATA_DIR": t.TempDir()}, "QUEEN_GATEWAY_UPSTREAMS"},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "http://127.0.0.1:1", "QUEEN_DATA_DIR": t.TempDir()}, "QUEEN_GATEWAY_SECRET"},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "https://x:1/path", "QUEEN_GATEWAY_SECRET": "s", "QUEEN_DATA_DIR": t.TempDir()}, "want http://host:port"},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "http://127.0.0.1:1", "QUEEN_GATEWAY_SECRET": "s", "QUEEN_GATEWAY_POLL_MS": "soon"}, `QUEEN_GATEWAY_POLL_MS="soon"`},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "http://127.0.0.1:1", "QUEEN_GATEWAY_SECRET": "s", "QUEEN_GATEWAY_ROUTES_FILE": "/nonexistent/routes.json"}, "QUEEN_GATEWAY_ROUTES_FILE"},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "http://127.0.0.1:1", "QUEEN_GATEWAY_SECRET": "s", "QUEEN_TRUSTED_ORIGINS": "app.example.com"}, `trusted origin "app.example.com"`},
		{map[string]string{"QUEEN_GATEWAY_UPSTREAMS": "http://127.0.0.1:1", "QUEEN_GATEWAY_SECRET": "s", "QUEEN_TRUSTED_HOSTS": "q.test:80"}, `trusted host "q.test:80"`},
	} {
		err := run(func(k string) string { return c.env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %q", c.env, err, c.want)
		}
	}
}
