package server

import (
	"net"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A token without exp is refused and never cached, unless AllowNoExp; then
// it is cached for tokenCacheTTL at most, never for good.
func TestJWTWithoutExp(t *testing.T) {
	secret := []byte("s")
	req := parseReq(t, bearer(hs256(t, secret, jwt.MapClaims{"tenant": "acme", "role": "admin"})))
	strict, err := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, werr := strict.identify(req); werr != errNoExp {
			t.Fatalf("no exp: %v, want errNoExp", werr)
		}
	}
	if n := strict.tokens.m.Size(); n != 0 {
		t.Fatalf("a refused token was cached (%d entries)", n)
	}

	lax, err := NewAuth(AuthConfig{Mode: ModeJWT, JWTSecret: secret, AllowNoExp: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lax.tokens.now = func() time.Time { return now }
	if tenant, level, werr := lax.identify(req); werr != nil || tenant != "acme" || level != accAdmin {
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

func TestIsLoopback(t *testing.T) {
	for _, c := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"::1", true}, {"::ffff:127.0.0.1", true},
		{"192.0.2.2", false}, {"10.0.0.1", false}, {"::", false}, {"fd00::2", false}, {"0.0.0.0", false},
	} {
		if got := isLoopback(&net.TCPAddr{IP: net.ParseIP(c.ip), Port: 1}); got != c.want {
			t.Errorf("%s: %v, want %v", c.ip, got, c.want)
		}
	}
	if isLoopback(&net.UnixAddr{Name: "x", Net: "unix"}) || isLoopback(nil) {
		t.Error("a non-TCP address counted as loopback")
	}
}
