package bench

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MintToken signs an HS256 token for tenant with role, expiring after ttl,
// in the claims the broker and the gateway read by default (tenant, role,
// exp): what a run through a broker in jwt mode or through a gateway sends
// with -token.
func MintToken(secret, tenant, role string, ttl time.Duration) (string, error) {
	if secret == "" {
		return "", errors.New("-mint-token needs -jwt-secret")
	}
	claims := jwt.MapClaims{"sub": "queenbench", "tenant": tenant, "role": role, "exp": time.Now().Add(ttl).Unix()}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
}
