package identity

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"

	"github.com/queenmq/ephemeral/wire"
)

// The modes (QUEEN_AUTH_MODE).
const (
	ModeNone    = "none"
	ModeJWT     = "jwt"
	ModeGateway = "gateway"
)

// Config is the identity configuration (D14); cmd/queen fills it from the
// QUEEN_AUTH_MODE, QUEEN_JWT_* and QUEEN_GATEWAY_SECRET variables.
type Config struct {
	Mode string // none (default), jwt or gateway
	// JWT: an HS256 secret and/or a PEM public key (RSA for RS256,
	// Ed25519 for EdDSA). At least one is required in jwt mode.
	JWTSecret    []byte
	JWTPublicKey []byte // PEM bytes
	// JWKSURL names a JWK Set (RS256 and EdDSA keys chosen by the token's
	// kid). It is fetched in the background at start and every
	// JWKSRefresh (5 min); a token is never verified by fetching on the
	// event loop (P1), so a kid not in the last fetched set is refused until
	// the next refresh.
	JWKSURL     string
	JWKSRefresh time.Duration
	Issuer      string // checked when set
	Audience    string // checked when set
	TenantClaim string // default "tenant"
	// AllowNoExp accepts tokens without an exp claim
	// (QUEEN_JWT_ALLOW_NO_EXP); by default they are 401: a token that
	// never ends is a credential that cannot be withdrawn.
	AllowNoExp bool
	// Gateway: the shared secret the gateway sends in X-Queen-Gateway-Secret.
	GatewaySecret string
}

// Auth identifies requests. The zero value (and nil) is mode none. One Auth
// serves every event loop at once: its fields are set by New and only read
// after, and the token cache is a concurrent map.
type Auth struct {
	mode        string
	parser      *jwt.Parser
	hmacKey     []byte
	pubKey      any
	jwks        keyfunc.Keyfunc // nil without QUEEN_JWT_JWKS_URL
	tenantClaim string
	allowNoExp  bool
	gwSecret    []byte
	tokens      *tokenCache // jwt: identities of tokens that verified
}

// New checks cfg and builds the identifier. A mode that lacks what it needs
// is an error, so a broker refuses to start rather than run with an
// identity it was not asked for. In jwt mode with a JWKSURL it starts the
// set's background refresh, which lives as long as the process.
func New(cfg Config) (*Auth, error) {
	a := &Auth{mode: cfg.Mode}
	switch cfg.Mode {
	case "", ModeNone:
		a.mode = ModeNone
		return a, nil
	case ModeJWT:
		var methods []string
		if len(cfg.JWTSecret) > 0 {
			a.hmacKey = cfg.JWTSecret
			methods = append(methods, "HS256")
		}
		if len(cfg.JWTPublicKey) > 0 {
			if k, err := jwt.ParseRSAPublicKeyFromPEM(cfg.JWTPublicKey); err == nil {
				a.pubKey = k
				methods = append(methods, "RS256")
			} else if k, err := jwt.ParseEdPublicKeyFromPEM(cfg.JWTPublicKey); err == nil {
				a.pubKey = k
				methods = append(methods, "EdDSA")
			} else {
				return nil, errors.New("QUEEN_JWT_PUBLIC_KEY: not an RSA or Ed25519 public key in PEM")
			}
		}
		if cfg.JWKSURL != "" {
			kf, err := newJWKS(cfg.JWKSURL, cfg.JWKSRefresh)
			if err != nil {
				return nil, fmt.Errorf("QUEEN_JWT_JWKS_URL: %w", err)
			}
			a.jwks = kf
			for _, m := range []string{"RS256", "EdDSA"} {
				if !slices.Contains(methods, m) {
					methods = append(methods, m)
				}
			}
		}
		if len(methods) == 0 {
			return nil, errors.New("QUEEN_AUTH_MODE=jwt needs QUEEN_JWT_SECRET, QUEEN_JWT_PUBLIC_KEY or QUEEN_JWT_JWKS_URL")
		}
		opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithLeeway(0)}
		if cfg.Issuer != "" {
			opts = append(opts, jwt.WithIssuer(cfg.Issuer))
		}
		if cfg.Audience != "" {
			opts = append(opts, jwt.WithAudience(cfg.Audience))
		}
		a.parser = jwt.NewParser(opts...)
		a.tokens = newTokenCache()
		a.allowNoExp = cfg.AllowNoExp
		a.tenantClaim = cfg.TenantClaim
		if a.tenantClaim == "" {
			a.tenantClaim = "tenant"
		}
		return a, nil
	case ModeGateway:
		if cfg.GatewaySecret == "" {
			return nil, errors.New("QUEEN_AUTH_MODE=gateway needs QUEEN_GATEWAY_SECRET")
		}
		a.gwSecret = []byte(cfg.GatewaySecret)
		return a, nil
	}
	return nil, fmt.Errorf("QUEEN_AUTH_MODE=%q: want none, jwt or gateway", cfg.Mode)
}

// Mode is the identity mode.
func (a *Auth) Mode() string {
	if a == nil || a.mode == "" {
		return ModeNone
	}
	return a.mode
}

// DefaultTenant is the tenant of mode none, and of a JWT without the tenant
// claim.
const DefaultTenant = "default"

// ErrLevel is the refusal of a credential whose level does not allow the
// route (403 forbidden). Identify never returns it: the need is the
// caller's (the route's), so the caller checks Level.Allows and answers it.
var ErrLevel = &wire.Error{Status: 403, Code: wire.CodeForbidden, Msg: "the credential's access level does not allow this route"}

// Refusals of identity, allocated once so a refusal costs no allocation.
// 401 is a missing or invalid credential, 403 a valid one without a known
// level (D14).
var (
	errNoCredential = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "no credential"}
	errBadToken     = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "the token is not valid"}
	errNoExp        = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "the token has no exp claim; exp is required (QUEEN_JWT_ALLOW_NO_EXP=true accepts tokens without one)"}
	errBadGateway   = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "the gateway secret is missing or wrong"}
	errNoTenant     = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "no tenant in the request's identity"}
	errBadTenant    = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "the tenant is not a valid name"}
	errNoRole       = &wire.Error{Status: 403, Code: wire.CodeForbidden, Msg: "the credential carries no known access level"}
)

// Identify returns the request's tenant and access level (D14), or the
// refusal (401 or 403) to answer. Mode none (and a nil *Auth) is tenant
// DefaultTenant with Admin and allocates nothing; so does a JWT already
// verified (the token cache); gateway mode allocates the tenant's string
// (IdentifyAs does not, for a connection's steady tenant). The tenant is a
// valid name (D10) in every mode. req is only read; its bytes are not
// kept. err is a *wire.Error, ready to answer; compare it with nil before
// storing it in an error.
func (a *Auth) Identify(req *wire.Request) (tenant string, level Level, err *wire.Error) {
	return a.IdentifyAs(req, "")
}

// IdentifyAs is Identify given prev, the tenant of the connection's last
// request: a gateway-mode request naming the same tenant returns prev
// rather than a new string, so that a connection's steady requests
// identify without allocating (P3).
func (a *Auth) IdentifyAs(req *wire.Request, prev string) (tenant string, level Level, err *wire.Error) {
	if a == nil || a.mode == ModeNone || a.mode == "" { // "": the zero Auth
		return DefaultTenant, Admin, nil
	}
	if a.mode == ModeGateway {
		return a.gateway(req, prev)
	}
	return a.jwt(req)
}

// CheckTenant refuses a tenant a gateway names (a header, or a gateway
// link's frame) that is missing (401) or not a valid name (401).
func CheckTenant(ten []byte) *wire.Error {
	if len(ten) == 0 {
		return errNoTenant
	}
	if wire.CheckName("tenant", ten) != nil {
		return errBadTenant
	}
	return nil
}

// GatewaySecret reports whether req carries the gateway secret of a
// gateway-mode Auth (X-Queen-Gateway-Secret, compared in constant time);
// false in every other mode.
func (a *Auth) GatewaySecret(req *wire.Request) bool {
	if a.Mode() != ModeGateway {
		return false
	}
	sec, _ := req.Header("X-Queen-Gateway-Secret")
	return subtle.ConstantTimeCompare(sec, a.gwSecret) == 1
}

func (a *Auth) gateway(req *wire.Request, prev string) (string, Level, *wire.Error) {
	sec, _ := req.Header("X-Queen-Gateway-Secret")
	if subtle.ConstantTimeCompare(sec, a.gwSecret) != 1 {
		return "", 0, errBadGateway // the tenancy headers are ignored
	}
	ten, _ := req.Header("X-Queen-Tenant")
	if err := CheckTenant(ten); err != nil {
		return "", 0, err
	}
	acc, _ := req.Header("X-Queen-Access")
	level, ok := ParseLevel(acc)
	if !ok {
		return "", 0, errNoRole
	}
	if string(ten) == prev {
		return prev, level, nil
	}
	return string(ten), level, nil
}

// BearerToken returns the credential of the Authorization header, with or
// without its "Bearer " scheme (both are taken).
func BearerToken(req *wire.Request) []byte {
	h, _ := req.Header("Authorization")
	if len(h) > 7 && strings.EqualFold(string(h[:7]), "bearer ") {
		h = bytes.TrimLeft(h[7:], " ")
	}
	return h
}

// HasAdminToken reports whether req carries token, the operator's admin
// token (QUEEN_ADMIN_TOKEN), as its bearer credential. It compares in
// constant time; an empty token is nobody's.
func HasAdminToken(req *wire.Request, token []byte) bool {
	if len(token) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare(BearerToken(req), token) == 1
}

func (a *Auth) jwt(req *wire.Request) (string, Level, *wire.Error) {
	h := BearerToken(req)
	if len(h) == 0 {
		return "", 0, errNoCredential
	}
	if e, ok := a.tokens.get(bytesString(h)); ok {
		return e.tenant, e.level, nil
	}
	token := string(h)
	tenant, level, exp, err := a.verify(token)
	if err != nil {
		return "", 0, err
	}
	a.tokens.put(token, tenant, level, exp)
	return tenant, level, nil
}

// IdentifyLink is Identify for the upgrade to a client link (docs/link.md),
// which also needs to know when the identity ends: until is the JWT's exp
// (zero without one, and in modes none and gateway, whose identities do not
// expire). The token is verified afresh, not taken from the cache: a link
// outlives a request, and its end must be the token's own.
func (a *Auth) IdentifyLink(req *wire.Request) (tenant string, level Level, until time.Time, err *wire.Error) {
	if a == nil || a.mode != ModeJWT {
		tenant, level, err = a.IdentifyAs(req, "")
		return tenant, level, time.Time{}, err
	}
	h := BearerToken(req)
	if len(h) == 0 {
		return "", 0, time.Time{}, errNoCredential
	}
	return a.verify(string(h))
}

// IdentifyToken verifies a fresh token a client sends on its link to extend
// the link's identity (docs/link.md, "Token"), as IdentifyLink does the
// upgrade's. Outside JWT mode there is nothing to refresh: a 400.
func (a *Auth) IdentifyToken(token []byte) (tenant string, level Level, until time.Time, err *wire.Error) {
	if a == nil || a.mode != ModeJWT {
		return "", 0, time.Time{}, errNoTokens
	}
	tok := bytes.TrimSpace(token)
	if len(tok) > 7 && strings.EqualFold(string(tok[:7]), "bearer ") {
		tok = bytes.TrimLeft(tok[7:], " ")
	}
	if len(tok) > 0 {
		return a.verify(string(tok))
	}
	return "", 0, time.Time{}, errNoCredential
}

var errNoTokens = &wire.Error{Status: 400, Code: wire.CodeBadRequest, Msg: "this broker does not take tokens (QUEEN_AUTH_MODE is not jwt): a link's identity does not expire"}

// verify checks token's signature and claims (D14) and returns the
// identity it grants and its exp (zero when it has none).
func (a *Auth) verify(token string) (string, Level, time.Time, *wire.Error) {
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(token, claims, a.key); err != nil {
		return "", 0, time.Time{}, errBadToken
	}
	var exp time.Time
	if t, err := claims.GetExpirationTime(); err == nil && t != nil {
		exp = t.Time
	} else if !a.allowNoExp {
		return "", 0, time.Time{}, errNoExp // never cached: the next request is refused again
	}
	tenant := DefaultTenant
	if v, ok := claims[a.tenantClaim]; ok {
		s, isStr := v.(string)
		if !isStr || wire.CheckName("tenant", []byte(s)) != nil {
			return "", 0, time.Time{}, errBadTenant
		}
		tenant = s
	}
	level := Level(0)
	if v, ok := claims["role"].(string); ok {
		level, _ = ParseLevel([]byte(v))
	}
	if arr, ok := claims["roles"].([]any); ok {
		for _, r := range arr {
			if s, ok := r.(string); ok {
				if l, ok := ParseLevel([]byte(s)); ok && rank(l) > rank(level) {
					level = l
				}
			}
		}
	}
	if level == 0 {
		return "", 0, time.Time{}, errNoRole
	}
	return tenant, level, exp, nil
}

// key picks the verification key by the token's algorithm (the parser has
// already refused any algorithm that is not configured, "none" included).
func (a *Auth) key(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		if a.hmacKey != nil {
			return a.hmacKey, nil
		}
	case *jwt.SigningMethodRSA, *jwt.SigningMethodEd25519:
		if _, hasKid := t.Header["kid"]; a.jwks != nil && (hasKid || a.pubKey == nil) {
			return a.jwks.Keyfunc(t)
		}
		if a.pubKey != nil {
			return a.pubKey, nil
		}
	}
	return nil, errors.New("no key for this algorithm")
}

// newJWKS starts the background fetcher of a JWK Set. An unknown kid never
// triggers a fetch (the limiter allows none), so verification stays on
// memory; the set is refreshed every refresh interval instead.
func newJWKS(url string, refresh time.Duration) (keyfunc.Keyfunc, error) {
	if refresh <= 0 {
		refresh = 5 * time.Minute
	}
	noErr := true
	return keyfunc.NewDefaultOverrideCtx(context.Background(), []string{url}, keyfunc.Override{
		HTTPTimeout:               5 * time.Second,
		RefreshInterval:           refresh,
		RefreshUnknownKID:         rate.NewLimiter(0, 0),
		NoErrorReturnFirstHTTPReq: &noErr,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) {
				slog.Default().Warn("jwks: refresh failed", "url", u, "err", err)
			}
		},
	})
}

// bytesString views b as a string for a lookup that does not keep it (the
// token cache's get), so a cached token costs no copy.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
