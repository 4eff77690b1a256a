package identity

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
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := parseReq(t, "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, au := range []*Auth{nil, a, {}} { // {}: the zero value is mode none too
		if m := au.Mode(); m != ModeNone {
			t.Fatalf("Mode() = %q, want none", m)
		}
		tenant, level, werr := au.Identify(req)
		if tenant != "default" || level != Admin || werr != nil {
			t.Fatalf("none: %q %v %v", tenant, level, werr)
		}
		if n := testing.AllocsPerRun(100, func() { au.Identify(req) }); n != 0 {
			t.Fatalf("mode none allocates %v per request", n)
		}
	}
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	for _, c := range []Config{{Mode: "jwt"}, {Mode: "gateway"}, {Mode: "ldap"}, {Mode: "jwt", JWTPublicKey: []byte("nope")}} {
		if _, err := New(c); err == nil {
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
	none, _ := New(Config{})
	jw, _ := New(Config{Mode: ModeJWT, JWTSecret: secret})
	gwa, _ := New(Config{Mode: ModeGateway, GatewaySecret: "gw-secret"})
	verifyEach, _ := New(Config{Mode: ModeJWT, JWTSecret: secret})
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
			if _, _, err := c.a.Identify(req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				c.a.Identify(req)
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
	a, err := New(Config{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	good := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "read-only", "exp": time.Now().Add(time.Hour).Unix()})))
	forged := parseReq(t, bearer(hs256(t, []byte("other"), jwt.MapClaims{"tenant": "acme", "role": "admin"})))
	if _, _, werr := a.Identify(forged); werr != errBadToken {
		t.Fatalf("forged token: %v", werr)
	}
	if n := a.tokens.m.Size(); n != 0 {
		t.Fatalf("a refused token was cached (%d entries)", n)
	}
	for i := range 2 { // verified, then cached
		tenant, level, werr := a.Identify(good)
		if werr != nil || tenant != "acme" || level != ReadOnly {
			t.Fatalf("call %d: %q %v %v", i, tenant, level, werr)
		}
	}
	if n := a.tokens.m.Size(); n != 1 {
		t.Fatalf("cache holds %d tokens, want 1", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { a.Identify(good) }); allocs != 0 {
		t.Fatalf("a cached token costs %v allocations", allocs)
	}
	if _, _, werr := a.Identify(forged); werr != errBadToken {
		t.Fatalf("forged token after a good one: %v", werr)
	}
}

// An entry ends at the token's exp, and tokenCacheTTL after it was verified
// when the token has no exp; the cache never holds more than tokenCacheMax.
func TestTokenCacheEnds(t *testing.T) {
	c := newTokenCache()
	now := time.Unix(1_000_000, 0)
	c.now = func() time.Time { return now }
	c.put("with-exp", "t", Admin, now.Add(10*time.Second))
	c.put("without-exp", "t", Admin, time.Time{})
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
		c.put(string(rune('a'+i%26))+time.Duration(i).String(), "t", Admin, time.Time{})
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
	a, err := New(Config{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	req := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"role": "admin", "exp": exp.Unix()})))
	if _, _, werr := a.Identify(req); werr != nil {
		t.Fatalf("before exp: %v", werr)
	}
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	if _, _, werr := a.Identify(req); werr != errBadToken {
		t.Fatalf("after exp: %v, want %v", werr, errBadToken)
	}
}

// A token without exp is refused and never cached, unless AllowNoExp; then
// it is cached for tokenCacheTTL at most, never for good.
func TestJWTWithoutExp(t *testing.T) {
	secret := []byte("s")
	req := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "admin"})))
	strict, err := New(Config{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, werr := strict.Identify(req); werr != errNoExp {
			t.Fatalf("no exp: %v, want errNoExp", werr)
		}
	}
	if n := strict.tokens.m.Size(); n != 0 {
		t.Fatalf("a refused token was cached (%d entries)", n)
	}

	lax, err := New(Config{Mode: ModeJWT, JWTSecret: secret, AllowNoExp: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lax.tokens.now = func() time.Time { return now }
	if tenant, level, werr := lax.Identify(req); werr != nil || tenant != "acme" || level != Admin {
		t.Fatalf("AllowNoExp: %q %v %v", tenant, level, werr)
	}
	var until int64
	lax.tokens.m.Range(func(_ string, e tokenEntry) bool { until = e.until; return true })
	if want := now.Add(tokenCacheTTL).UnixNano(); until != want {
		t.Fatalf("cached until %d, want verified + tokenCacheTTL %d", until, want)
	}
	lax.tokens.now = func() time.Time { return now.Add(tokenCacheTTL) }
	if _, ok := lax.tokens.get(string(mustHeader(t, req))); ok {
		t.Fatal("a token without exp is still cached after tokenCacheTTL")
	}
}

func mustHeader(t *testing.T, req interface {
	Header(string) ([]byte, bool)
}) []byte {
	t.Helper()
	h, _ := req.Header("Authorization")
	return h[len("Bearer "):]
}
