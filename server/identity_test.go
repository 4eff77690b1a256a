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
	verifyEach, _ := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret})
	verifyEach.tokens = nil // every request verifies its token, as before the cache
	cases := []struct {
		name string
		a    *Auth
		req  string
	}{
		{"none", none, "GET /q HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"jwt-hs256-uncached", verifyEach, "GET /q HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n\r\n"},
		{"jwt-hs256-cached", jw, "GET /q HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n\r\n"},
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

func hs256(tb testing.TB, secret []byte, claims jwt.MapClaims) string {
	tb.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

func bearer(tok string) string {
	return "GET /q HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok + "\r\n\r\n"
}

// A token that verified is served from the cache with the same identity,
// without allocating; one that did not is never kept.
func TestJWTCacheServesVerifiedTokensOnly(t *testing.T) {
	secret := []byte("s")
	a, err := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	good := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "read-only", "exp": time.Now().Add(time.Hour).Unix()})))
	forged := parseReq(t, bearer(hs256(t, []byte("other"), jwt.MapClaims{"tenant": "acme", "role": "admin"})))
	if _, _, werr := a.identify(forged); werr != errBadToken {
		t.Fatalf("forged token: %v", werr)
	}
	if n := a.tokens.m.Size(); n != 0 {
		t.Fatalf("a refused token was cached (%d entries)", n)
	}
	for i := range 2 { // verified, then cached
		tenant, level, werr := a.identify(good)
		if werr != nil || tenant != "acme" || level != accReadOnly {
			t.Fatalf("call %d: %q %v %v", i, tenant, level, werr)
		}
	}
	if n := a.tokens.m.Size(); n != 1 {
		t.Fatalf("cache holds %d tokens, want 1", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { a.identify(good) }); allocs != 0 {
		t.Fatalf("a cached token costs %v allocations", allocs)
	}
	if _, _, werr := a.identify(forged); werr != errBadToken {
		t.Fatalf("forged token after a good one: %v", werr)
	}
}

// An entry ends at the token's exp, and tokenCacheTTL after it was verified
// when the token has no exp; the cache never holds more than tokenCacheMax.
func TestTokenCacheEnds(t *testing.T) {
	c := newTokenCache()
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	c.put("with-exp", "t", accAdmin, now.Add(10*time.Second))
	c.put("without-exp", "t", accAdmin, time.Time{})
	now = now.Add(10*time.Second - 1)
	if _, ok := c.get("with-exp"); !ok {
		t.Fatal("with-exp ended before its exp")
	}
	now = now.Add(1)
	if _, ok := c.get("with-exp"); ok {
		t.Fatal("with-exp served at its exp")
	}
	if _, ok := c.get("without-exp"); !ok {
		t.Fatal("without-exp ended before the TTL")
	}
	now = time.Unix(1_000_000, 0).Add(tokenCacheTTL)
	if _, ok := c.get("without-exp"); ok {
		t.Fatal("without-exp served past the TTL")
	}
	for i := range tokenCacheMax + 10 {
		c.put(string(rune('a'+i%26))+time.Duration(i).String(), "t", accAdmin, time.Time{})
	}
	if n := c.m.Size(); n > tokenCacheMax {
		t.Fatalf("cache holds %d tokens, more than %d", n, tokenCacheMax)
	}
}

// End to end with the real clock: a cached token is refused once its exp
// has passed.
func TestJWTCacheRefusesAnExpiredToken(t *testing.T) {
	t.Parallel()
	secret := []byte("s")
	a, err := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	req := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"role": "admin", "exp": exp.Unix()})))
	if _, _, werr := a.identify(req); werr != nil {
		t.Fatalf("before exp: %v", werr)
	}
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	if _, _, werr := a.identify(req); werr != errBadToken {
		t.Fatalf("after exp: %v, want %v", werr, errBadToken)
	}
}
