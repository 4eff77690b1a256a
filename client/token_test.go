package client

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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

// TestHeadersSent: every request carries WithHeader's headers, each value
// of a repeated one, and "Authorization: Bearer <token>" only when
// WithToken gave one, through both transports.
func TestHeadersSent(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 8)
	f := startFake(t, func(n int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			got <- req.header
			if _, err := io.WriteString(nc, response(200, "", `{"queues":[]}`)); err != nil {
				return
			}
		}
	})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		opts []Option
		auth []string
	}{
		{"own, no token", nil, nil},
		{"own, a token", []Option{WithToken("tok")}, []string{"Bearer tok"}},
		{"net/http, no token", []Option{WithHTTPClient(&http.Client{})}, nil},
		{"net/http, a token", []Option{WithHTTPClient(&http.Client{}), WithToken("tok")}, []string{"Bearer tok"}},
	} {
		opts := append([]Option{WithHeader("X-B", "2"), WithHeader("X-A", "1"), WithHeader("X-A", "3")}, tc.opts...)
		c := newHTTPClient(t, f.URL(), opts...)
		if _, err := c.Queues(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		h := <-got
		if !slices.Equal(h["Authorization"], tc.auth) || !slices.Equal(h["X-A"], []string{"1", "3"}) || !slices.Equal(h["X-B"], []string{"2"}) {
			t.Fatalf("%s: headers %v, want Authorization %v, X-A [1 3], X-B [2]", tc.name, h, tc.auth)
		}
	}
}
