package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// hs256 signs claims (a JSON object) as an HS256 JWT with secret.
func hs256(secret, claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	signed := enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc([]byte(claims))
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(signed))
	return signed + "." + enc(m.Sum(nil))
}

// WithToken sends the token as "Authorization: Bearer ...": against a
// broker in jwt mode, a client with a valid token is served as the
// token's tenant, one without is refused 401 unauthorized.
func TestTokenIsSent(t *testing.T) {
	t.Parallel()
	const secret = "client-token-test-secret"
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": secret})
	ctx := testCtx(t)
	tok := hs256(secret, fmt.Sprintf(`{"tenant":"acme","role":"read-write","exp":%d}`, time.Now().Add(time.Hour).Unix()))

	with := newClient(t, b.URL(), WithToken(tok))
	if p, err := with.Push(ctx, "jobs", []any{1}, PushOptions{}); err != nil || p.Pushed != 1 {
		t.Fatalf("push with a valid token: %+v %v", p, err)
	}
	if ms, err := with.Pop(ctx, "jobs", PopOptions{AutoAck: true}); err != nil || len(ms.Messages) != 1 {
		t.Fatalf("pop with the token: %+v, %v; want the one pushed (the token's tenant)", ms, err)
	}

	// The same through net/http (WithHTTPClient), which writes its own
	// headers.
	viaNet := newClient(t, b.URL(), WithToken(tok), WithHTTPClient(&http.Client{}))
	if p, err := viaNet.Push(ctx, "jobs", []any{2}, PushOptions{}); err != nil || p.Pushed != 1 {
		t.Fatalf("push with a valid token through net/http: %+v %v", p, err)
	}

	without := newClient(t, b.URL())
	_, err := without.Push(ctx, "jobs", []any{1}, PushOptions{})
	var qe *Error
	if !errors.As(err, &qe) || qe.Status != 401 || qe.Code != "unauthorized" {
		t.Fatalf("push without a token: %v, want 401 unauthorized", err)
	}
}
