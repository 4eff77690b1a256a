package bench

import (
	"errors"
	"time"

	"github.com/queenmq/ephemeral/internal/jwtmint"
)

// MintToken signs an HS256 token for tenant with role, expiring after ttl,
// in the claims the broker and the gateway read by default (tenant, role,
// exp): what a run through a broker in jwt mode or through a gateway sends
// with -token. It signs with internal/jwtmint, as `queenctl token` does.
func MintToken(secret, tenant, role string, ttl time.Duration) (string, error) {
	if secret == "" {
		return "", errors.New("-mint-token needs -jwt-secret")
	}
	return jwtmint.HS256([]byte(secret), jwtmint.Claims{Subject: "queenbench", Tenant: tenant, Role: role, TTL: ttl})
}
