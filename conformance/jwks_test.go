package conformance

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestJWTFromJWKS: with QUEEN_JWT_JWKS_URL the broker verifies RS256 tokens
// with the key of the JWK Set named by the token's kid; an unknown kid or a
// signature by another key is 401 unauthorized (D14).
func TestJWTFromJWKS(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"k1","alg":"RS256","use":"sig","n":%q,"e":%q}]}`,
		b64(key.N.Bytes()), b64(big.NewInt(int64(key.E)).Bytes()))
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(set))
	}))
	defer jwks.Close()

	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_JWKS_URL": jwks.URL})
	claims := jwt.MapClaims{"role": "read-only", "tenant": "acme", "exp": time.Now().Add(time.Hour).Unix()}
	withKid := func(kid string, k *rsa.PrivateKey) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
		tok.Header["kid"] = kid
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, "Authorization", "Bearer "+withKid("k1", key)).want(t, 200, nil)
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, "Authorization", "Bearer "+withKid("k2", key)).wantErr(t, 401, "unauthorized")
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, "Authorization", "Bearer "+withKid("k1", other)).wantErr(t, 401, "unauthorized")
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, "Authorization", "Bearer "+sign(t, jwt.SigningMethodHS256, []byte("x"), claims)).wantErr(t, 401, "unauthorized")
}
