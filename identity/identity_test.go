package identity

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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
	for _, c := range []Config{{Mode: "jwt"}, {Mode: "gateway"}, {Mode: "ldap"}, {Mode: "jwt", JWTPublicKey: []byte("nope")}, {Mode: "jwt", JWKSURL: "jwks.json"}} {
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
		if n := c.m.Size(); n > tokenCacheMax {
			t.Fatalf("cache holds %d tokens, more than %d", n, tokenCacheMax)
		}
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

// iss and aud are checked when configured (a token without them is then
// 401); the level is the highest known one of role and roles, unknown names
// ignored, none known 403 (docs/server.md, "Identity").
func TestJWTClaims(t *testing.T) {
	secret := []byte("s")
	a, err := New(Config{Mode: ModeJWT, JWTSecret: secret, Issuer: "https://issuer", Audience: "queen"})
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		level  Level
		werr   *wire.Error
	}{
		{"iss and aud", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "role": "read-only"}, ReadOnly, nil},
		{"another iss", jwt.MapClaims{"iss": "https://other", "aud": "queen", "role": "admin"}, 0, errBadToken},
		{"no iss", jwt.MapClaims{"aud": "queen", "role": "admin"}, 0, errBadToken},
		{"another aud", jwt.MapClaims{"iss": "https://issuer", "aud": "other", "role": "admin"}, 0, errBadToken},
		{"roles: the highest wins", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "roles": []any{"read-only", "admin", "write-only"}}, Admin, nil},
		{"roles: write-only over read-only", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "roles": []any{"read-only", "write-only", "read-only"}}, WriteOnly, nil},
		{"roles: read-write over both", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "roles": []any{"write-only", "read-write", "read-only"}}, ReadWrite, nil},
		{"roles over a lower role", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "role": "read-only", "roles": []any{"read-write"}}, ReadWrite, nil},
		{"a role over lower roles", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "role": "admin", "roles": []any{"read-write"}}, Admin, nil},
		{"unknown names ignored", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "roles": []any{"root", 7, "write-only"}}, WriteOnly, nil},
		{"no known level", jwt.MapClaims{"iss": "https://issuer", "aud": "queen", "role": "root", "roles": []any{"superuser"}}, 0, errNoRole},
	} {
		c.claims["exp"] = exp
		tenant, level, werr := a.Identify(parseReq(t, bearer(hs256(t, secret, c.claims))))
		if werr != c.werr || level != c.level || (werr == nil && tenant != DefaultTenant) {
			t.Errorf("%s: %q %v %v; want %v %v", c.name, tenant, level, werr, c.level, c.werr)
		}
	}
}

// ed25519Token signs claims with EdDSA, with kid in its header when set.
func ed25519Token(t *testing.T, key ed25519.PrivateKey, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The key is chosen by the token: an EdDSA token without a kid is verified
// with the PEM key, one with a kid with the JWK Set's key of that kid (when
// a set is configured); a kid not in the set is 401, and the set is fetched
// again every JWKSRefresh, so a key added to it is taken within a refresh
// (docs/server.md, "Identity").
func TestJWTKeys(t *testing.T) {
	pemPub, pemPriv, _ := ed25519.GenerateKey(nil)
	setPub, setPriv, _ := ed25519.GenerateKey(nil)
	laterPub, laterPriv, _ := ed25519.GenerateKey(nil)
	der, err := x509.MarshalPKIXPublicKey(pemPub)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	jwk := func(kid string, pub ed25519.PublicKey) string {
		return `{"kty":"OKP","crv":"Ed25519","alg":"EdDSA","use":"sig","kid":"` + kid + `","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	}
	var set atomic.Value
	set.Store(`{"keys":[` + jwk("k1", setPub) + `]}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, set.Load().(string))
	}))
	defer srv.Close()
	claims := func() jwt.MapClaims {
		return jwt.MapClaims{"tenant": "acme", "role": "read-write", "exp": time.Now().Add(time.Hour).Unix()}
	}

	pemOnly, err := New(Config{Mode: ModeJWT, JWTPublicKey: pemKey})
	if err != nil {
		t.Fatal(err)
	}
	both, err := New(Config{Mode: ModeJWT, JWTPublicKey: pemKey, JWKSURL: srv.URL, JWKSRefresh: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		a    *Auth
		tok  string
		werr *wire.Error
	}{
		{"PEM key, no kid", pemOnly, ed25519Token(t, pemPriv, "", claims()), nil},
		{"PEM key, another key's token", pemOnly, ed25519Token(t, setPriv, "", claims()), errBadToken},
		{"PEM key, an HS256 token", pemOnly, hs256(t, []byte("s"), claims()), errBadToken},
		{"both, no kid: the PEM key", both, ed25519Token(t, pemPriv, "", claims()), nil},
		{"both, no kid, the set's key", both, ed25519Token(t, setPriv, "", claims()), errBadToken},
		{"both, kid: the set's key", both, ed25519Token(t, setPriv, "k1", claims()), nil},
		{"both, kid, the PEM key", both, ed25519Token(t, pemPriv, "k1", claims()), errBadToken},
		{"both, a kid not in the set", both, ed25519Token(t, laterPriv, "k2", claims()), errBadToken},
	} {
		tenant, level, werr := c.a.Identify(parseReq(t, bearer(c.tok)))
		if werr != c.werr || (werr == nil && (tenant != "acme" || level != ReadWrite)) {
			t.Fatalf("%s: %q %v %v; want %v", c.name, tenant, level, werr, c.werr)
		}
	}

	set.Store(`{"keys":[` + jwk("k1", setPub) + `,` + jwk("k2", laterPub) + `]}`)
	later := parseReq(t, bearer(ed25519Token(t, laterPriv, "k2", claims())))
	deadline := time.Now().Add(5 * time.Second) // a hundred refreshes
	for {
		_, _, werr := both.Identify(later)
		if werr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a key added to the set is still refused 5 s later (refresh every 50 ms): %v", werr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The operator's admin token and the gateway's secret are taken only when
// they equal what is configured; an empty admin token is nobody's, and the
// gateway secret counts only in gateway mode (docs/server.md).
func TestAdminTokenAndGatewaySecret(t *testing.T) {
	req := func(headers string) *wire.Request {
		return parseReq(t, "GET /q HTTP/1.1\r\nHost: x\r\n"+headers+"\r\n")
	}
	for _, c := range []struct {
		headers string
		token   string
		want    bool
	}{
		{"Authorization: Bearer op-token\r\n", "op-token", true},
		{"Authorization: op-token\r\n", "op-token", true},
		{"Authorization: bearer   op-token\r\n", "op-token", true},
		{"Authorization: Bearer op-tokem\r\n", "op-token", false},
		{"Authorization: Bearer op-token2\r\n", "op-token", false},
		{"", "op-token", false},
		{"Authorization: Bearer \r\n", "", false},
		{"", "", false},
	} {
		if got := HasAdminToken(req(c.headers), []byte(c.token)); got != c.want {
			t.Errorf("HasAdminToken(%q, %q) = %v, want %v", c.headers, c.token, got, c.want)
		}
	}

	gw, err := New(Config{Mode: ModeGateway, GatewaySecret: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	jw, err := New(Config{Mode: ModeJWT, JWTSecret: []byte("gw")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a       *Auth
		headers string
		want    bool
	}{
		{gw, "X-Queen-Gateway-Secret: gw\r\n", true},
		{gw, "X-Queen-Gateway-Secret: gx\r\n", false},
		{gw, "X-Queen-Gateway-Secret: gw2\r\n", false},
		{gw, "", false},
		{jw, "X-Queen-Gateway-Secret: gw\r\n", false},
		{nil, "X-Queen-Gateway-Secret: gw\r\n", false},
	} {
		if got := c.a.GatewaySecret(req(c.headers)); got != c.want {
			t.Errorf("%s mode, %q: GatewaySecret = %v, want %v", c.a.Mode(), c.headers, got, c.want)
		}
	}
}
