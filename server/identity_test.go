package server

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/wire"
)

func parseReq(tb testing.TB, raw string) *wire.Request {
	tb.Helper()
	var p wire.Parser
	p.Limits.MaxBody = 1 << 20
	req, _, err := p.Parse([]byte(raw))
	if err != nil || req == nil {
		tb.Fatalf("parse: %v", err)
	}
	return req
}

// D14: mode none is tenant default with full access and costs no allocation.
func TestIdentifyNoneAllocatesNothing(t *testing.T) {
	a, err := NewAuth(AuthConfig{})
	if err != nil {
		t.Fatal(err)
	}
	req := parseReq(t, "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, au := range []*Auth{nil, a} {
		tenant, level, werr := au.identify(req)
		if tenant != "default" || level != accAdmin || werr != nil {
			t.Fatalf("none: %q %v %v", tenant, level, werr)
		}
		if n := testing.AllocsPerRun(100, func() { au.identify(req) }); n != 0 {
			t.Fatalf("mode none allocates %v per request", n)
		}
	}
}

func TestNewAuthRefusesIncompleteConfig(t *testing.T) {
	for _, c := range []AuthConfig{{Mode: "jwt"}, {Mode: "gateway"}, {Mode: "ldap"}, {Mode: "jwt", JWTPublicKey: []byte("nope")}} {
		if _, err := NewAuth(c); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}

// BenchmarkIdentify: what identity costs per request in each mode.
func BenchmarkIdentify(b *testing.B) {
	secret := []byte("bench-secret")
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"tenant": "acme", "role": "read-write", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	none, _ := NewAuth(AuthConfig{})
	jw, _ := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret})
	gwa, _ := NewAuth(AuthConfig{Mode: ModeGateway, GatewaySecret: "gw-secret"})
	cases := []struct {
		name string
		a    *Auth
		req  string
	}{
		{"none", none, "GET /q HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"jwt-hs256", jw, "GET /q HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n\r\n"},
		{"gateway", gwa, "GET /q HTTP/1.1\r\nHost: x\r\nX-Queen-Gateway-Secret: gw-secret\r\nX-Queen-Tenant: acme\r\nX-Queen-Access: read-write\r\n\r\n"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			req := parseReq(b, c.req)
			if _, _, err := c.a.identify(req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				c.a.identify(req)
			}
		})
	}
}
