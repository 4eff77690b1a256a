// Package jwtmint signs JWTs for development and tests in exactly the
// claims the broker's identity package verifies (docs/server.md,
// "Identity"): the tenant claim, role and exp, and iss and aud when a
// broker checks them. `queenctl token` and the load tool's -mint-token
// (bench/) both sign with it, so the two cannot drift from each other or
// from what a broker in mode jwt, or a gateway, accepts.
//
// It refuses what a broker would refuse: a role identity does not know, a
// tenant that is not a valid name (D10), a token without an expiry. It is
// no identity provider: a production token comes from the tenant's own
// issuer, signed with a key that never sits on a command line.
package jwtmint

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/names"
)

// Claims is what a token says.
type Claims struct {
	// Tenant is the tenant claim's value; "" leaves the claim out, which a
	// broker reads as tenant "default".
	Tenant string
	// TenantClaim names the claim (the broker's QUEEN_JWT_TENANT_CLAIM);
	// "" is "tenant".
	TenantClaim string
	// Role is one of identity's role names: read-only, write-only,
	// read-write, admin.
	Role string
	// TTL is how long the token lives from now (exp); it must be positive:
	// a broker refuses a token without exp unless told otherwise.
	TTL time.Duration
	// Subject is the sub claim, which a broker does not read; "" leaves
	// it out.
	Subject string
	// Issuer and Audience are iss and aud, for a broker that checks them
	// (QUEEN_JWT_ISSUER, QUEEN_JWT_AUDIENCE); "" leaves them out.
	Issuer, Audience string
}

// Roles are the role names a broker knows (identity.ParseLevel), highest
// last. The list is written out rather than read from identity so that the
// load tool, a module of its own, signs without importing identity's
// dependencies (the JWK Set fetcher); TestMintedTokensVerify holds each to
// the level identity gives it.
var Roles = []string{"read-only", "write-only", "read-write", "admin"}

// check refuses claims a broker would refuse, with a message that says what
// to change.
func (c Claims) check() error {
	if !slices.Contains(Roles, c.Role) {
		return fmt.Errorf("role %q: want one of %v", c.Role, Roles)
	}
	if c.Tenant != "" {
		if p := names.Problem("tenant", []byte(c.Tenant)); p != "" {
			return errors.New(p)
		}
	}
	if c.TTL <= 0 {
		return fmt.Errorf("ttl %s: want a positive duration (a broker refuses a token without exp)", c.TTL)
	}
	return nil
}

func (c Claims) mapClaims(now time.Time) jwt.MapClaims {
	m := jwt.MapClaims{"role": c.Role, "exp": now.Add(c.TTL).Unix()}
	if c.Tenant != "" {
		claim := c.TenantClaim
		if claim == "" {
			claim = "tenant"
		}
		m[claim] = c.Tenant
	}
	if c.Subject != "" {
		m["sub"] = c.Subject
	}
	if c.Issuer != "" {
		m["iss"] = c.Issuer
	}
	if c.Audience != "" {
		m["aud"] = c.Audience
	}
	return m
}

// HS256 signs c with secret, the broker's QUEEN_JWT_SECRET.
func HS256(secret []byte, c Claims) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("the HS256 secret is empty")
	}
	if err := c.check(); err != nil {
		return "", err
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c.mapClaims(time.Now())).SignedString(secret)
}

// Key is a private key read from PEM and the algorithm it signs with:
// RS256 for RSA, EdDSA for Ed25519, the two a broker verifies with
// QUEEN_JWT_PUBLIC_KEY.
type Key struct {
	Alg    string // "RS256" or "EdDSA"
	signer any    // *rsa.PrivateKey or ed25519.PrivateKey
	method jwt.SigningMethod
}

// ParseKey reads a PEM private key (RSA in PKCS #1 or PKCS #8, Ed25519 in
// PKCS #8) and picks the algorithm from its type.
func ParseKey(pemBytes []byte) (*Key, error) {
	if k, err := jwt.ParseRSAPrivateKeyFromPEM(pemBytes); err == nil {
		return &Key{Alg: "RS256", signer: k, method: jwt.SigningMethodRS256}, nil
	}
	if k, err := jwt.ParseEdPrivateKeyFromPEM(pemBytes); err == nil {
		if ek, ok := k.(ed25519.PrivateKey); ok {
			return &Key{Alg: "EdDSA", signer: ek, method: jwt.SigningMethodEdDSA}, nil
		}
	}
	if _, err := jwt.ParseRSAPublicKeyFromPEM(pemBytes); err == nil {
		return nil, errors.New("that is a public key: sign with the private key, and give the broker the public one (QUEEN_JWT_PUBLIC_KEY)")
	}
	if _, err := jwt.ParseEdPublicKeyFromPEM(pemBytes); err == nil {
		return nil, errors.New("that is a public key: sign with the private key, and give the broker the public one (QUEEN_JWT_PUBLIC_KEY)")
	}
	return nil, errors.New("not an RSA or Ed25519 private key in PEM")
}

// Sign signs c with k.
func (k *Key) Sign(c Claims) (string, error) {
	if err := c.check(); err != nil {
		return "", err
	}
	return jwt.NewWithClaims(k.method, c.mapClaims(time.Now())).SignedString(k.signer)
}
