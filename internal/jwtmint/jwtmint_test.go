package jwtmint

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// identify runs a bearer token through a broker's identity, as the event
// loops do.
func identify(t *testing.T, a *identity.Auth, token string) (string, identity.Level, *wire.Error) {
	t.Helper()
	var p wire.Parser
	raw := "GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n\r\n"
	req, _, err := p.Parse([]byte(raw))
	if err != nil || req == nil {
		t.Fatalf("parse: %v", err)
	}
	return a.Identify(req)
}

func auth(t *testing.T, cfg identity.Config) *identity.Auth {
	t.Helper()
	cfg.Mode = identity.ModeJWT
	a, err := identity.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func pemOf(t *testing.T, typ string, der []byte, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// A token signed here is the identity the claims say at a broker holding
// the secret or the public key, for each algorithm and role, and 401 at a
// broker holding another.
func TestMintedTokensVerify(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		return pemOf(t, "PRIVATE KEY", der, err)
	}
	pkix := func(k any) []byte {
		der, err := x509.MarshalPKIXPublicKey(k)
		return pemOf(t, "PUBLIC KEY", der, err)
	}

	secret := []byte("a-development-secret")
	hs := func(c Claims) (string, error) { return HS256(secret, c) }
	signWith := func(pemBytes []byte, alg string) func(Claims) (string, error) {
		k, err := ParseKey(pemBytes)
		if err != nil {
			t.Fatal(err)
		}
		if k.Alg != alg {
			t.Fatalf("algorithm %s, want %s", k.Alg, alg)
		}
		return k.Sign
	}
	for _, c := range []struct {
		name        string
		sign        func(Claims) (string, error)
		right, evil identity.Config
	}{
		{"HS256", hs, identity.Config{JWTSecret: secret}, identity.Config{JWTSecret: []byte("another-secret")}},
		{"RS256 PKCS#1", signWith(pemOf(t, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey), nil), "RS256"),
			identity.Config{JWTPublicKey: pkix(&rsaKey.PublicKey)}, identity.Config{JWTPublicKey: pkix(otherPub)}},
		{"RS256 PKCS#8", signWith(pkcs8(rsaKey), "RS256"),
			identity.Config{JWTPublicKey: pkix(&rsaKey.PublicKey)}, identity.Config{JWTSecret: secret}},
		{"EdDSA", signWith(pkcs8(edKey), "EdDSA"),
			identity.Config{JWTPublicKey: pkix(edPub)}, identity.Config{JWTPublicKey: pkix(otherPub)}},
	} {
		for _, role := range Roles {
			tok, err := c.sign(Claims{Tenant: "acme", Role: role, TTL: time.Hour})
			if err != nil {
				t.Fatalf("%s %s: %v", c.name, role, err)
			}
			tenant, level, e := identify(t, auth(t, c.right), tok)
			want, _ := identity.ParseLevel([]byte(role))
			if e != nil || tenant != "acme" || level != want {
				t.Errorf("%s %s: %q %v %v, want acme %v", c.name, role, tenant, level, e, want)
			}
			if _, _, e := identify(t, auth(t, c.evil), tok); e == nil || e.Status != 401 || e.Code != "unauthorized" {
				t.Errorf("%s %s at a broker with another key: %v, want 401 unauthorized", c.name, role, e)
			}
		}
	}

	// No tenant: the broker's "default". Issuer, audience and another
	// tenant claim, for a broker that checks them.
	tok, _ := HS256(secret, Claims{Role: "read-write", TTL: time.Minute})
	if tenant, _, e := identify(t, auth(t, identity.Config{JWTSecret: secret}), tok); e != nil || tenant != "default" {
		t.Errorf("no tenant: %q %v, want default", tenant, e)
	}
	strict := identity.Config{JWTSecret: secret, Issuer: "dev", Audience: "queen", TenantClaim: "org"}
	tok, _ = HS256(secret, Claims{Tenant: "acme", TenantClaim: "org", Role: "admin", TTL: time.Minute, Issuer: "dev", Audience: "queen"})
	if tenant, _, e := identify(t, auth(t, strict), tok); e != nil || tenant != "acme" {
		t.Errorf("iss, aud, org: %q %v, want acme", tenant, e)
	}
	tok, _ = HS256(secret, Claims{Tenant: "acme", Role: "admin", TTL: time.Minute})
	if _, _, e := identify(t, auth(t, strict), tok); e == nil || e.Status != 401 {
		t.Errorf("without iss and aud at a broker that checks them: %v, want 401", e)
	}
}

// What a broker would refuse is refused here, saying what to change.
func TestMintRefuses(t *testing.T) {
	secret := []byte("s")
	for _, c := range []struct {
		claims Claims
		want   string
	}{
		{Claims{Role: "writer", TTL: time.Hour}, `role "writer": want one of [read-only write-only read-write admin]`},
		{Claims{Role: "", TTL: time.Hour}, `role "": want one of`},
		{Claims{Role: "admin", TTL: 0}, "want a positive duration"},
		{Claims{Role: "admin", TTL: -time.Second}, "want a positive duration"},
		{Claims{Tenant: "a\x01b", Role: "admin", TTL: time.Hour}, "tenant"},
	} {
		if _, err := HS256(secret, c.claims); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.claims, err, c.want)
		}
	}
	if _, err := HS256(nil, Claims{Role: "admin", TTL: time.Hour}); err == nil {
		t.Errorf("an empty secret signed")
	}
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(edKey.Public())
	if _, err := ParseKey(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})); err == nil || !strings.Contains(err.Error(), "public key") {
		t.Errorf("a public key: %v, want the public-key refusal", err)
	}
	if _, err := ParseKey([]byte("not pem")); err == nil || !strings.Contains(err.Error(), "not an RSA or Ed25519 private key") {
		t.Errorf("not PEM: %v", err)
	}
}
