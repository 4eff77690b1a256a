package client

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// A token source (docs/sdk-transport.md, "Tokens that rotate").
//
// WithTokenFunc gives the client a function that returns the bearer token
// to send, for credentials that rotate (short-lived JWTs minted by an
// identity provider), as NATS clients take a callback for theirs. Calling
// it for every request would put the user's function, often a network
// call, on the request path; so the client caches what it returns, and
// calls it again only when the cached token nears its end: a JWT's exp,
// read from its payload without verifying it (the broker verifies), less
// a quarter of the lifetime it had when fetched, at most 30 s. A token
// whose exp cannot be read (not a JWT, or no exp) is fetched again every
// opaqueFor, so that a credential rotated behind an opaque token is taken
// up within that. One call of the function at a time: the callers that
// find the token stale while it runs wait for its result.
//
// A link (link.go) takes its identity from the token of its upgrade and
// keeps it with token frames: before the token's renewal time the link
// fetches a fresh one from the source and sends it (keepFresh), so that a
// link with parked pops outlives any one token. A link is given no new
// call once its token is within its retirement margin of exp (an eighth
// of its lifetime, at most 5 s) without a fresher one accepted: a fresh
// link is dialled for the calls then, and the old one closes when its
// calls end, or at exp, when the broker closes it.

// opaqueFor: how long a token whose exp cannot be read is used before the
// function is called again.
const opaqueFor = time.Minute

// tokenRetry: after the function failed, or returned the token in use, it
// is not called again for this long (the token in use serves meanwhile,
// while it has not expired).
const tokenRetry = time.Second

// tokenFetchTimeout bounds a refresh of a link's token, which no caller's
// context bounds.
const tokenFetchTimeout = 10 * time.Second

// bearer is one token as the source fetched it. Immutable once stored.
type bearer struct {
	token string
	line  []byte // "Authorization: Bearer <token>\r\n"
	// Unix nanos: its exp (0: none readable), when the source fetches
	// again (renewAt), and when a link that carries it takes no new call
	// (retireAt; 0: never).
	exp, renewAt, retireAt int64
}

// tokenSource caches the token WithTokenFunc's function returns.
type tokenSource struct {
	fn    func(context.Context) (string, error)
	cur   atomic.Pointer[bearer]
	turn  chan struct{} // capacity 1: the right to call fn
	calls atomic.Int64  // calls of fn (for tests)
}

func newTokenSource(fn func(context.Context) (string, error)) *tokenSource {
	return &tokenSource{fn: fn, turn: make(chan struct{}, 1)}
}

// get returns the token to send now: the cached one until its renewal
// time, else a fresh one from the function.
func (s *tokenSource) get(ctx context.Context) (*bearer, error) {
	if b := s.cur.Load(); b != nil && time.Now().UnixNano() < b.renewAt {
		return b, nil
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()
	now := time.Now().UnixNano()
	old := s.cur.Load()
	if old != nil && now < old.renewAt {
		return old, nil // fetched while this caller waited its turn
	}
	s.calls.Add(1)
	tok, err := s.fn(ctx)
	if err == nil {
		err = checkToken(tok)
	}
	switch {
	case err == nil && (old == nil || !sameToken(tok, old.token)):
		b := newBearer(tok, now)
		s.cur.Store(b)
		return b, nil
	case err == nil || old != nil && (old.exp == 0 || now < old.exp):
		// The same token again, or none while the one in use is still
		// good: the one in use serves a little longer before the next try.
		again := *old
		again.renewAt = now + int64(tokenRetry)
		s.cur.Store(&again)
		return &again, nil
	}
	return nil, fmt.Errorf("queen: the token function: %w", err)
}

// checkToken refuses a token that cannot be sent in a header line.
func checkToken(tok string) error {
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return fmt.Errorf("it returned a token that cannot be sent (empty, or holding a line break)")
	}
	return nil
}

// newBearer is tok fetched at now, with its renewal and retirement times.
func newBearer(tok string, now int64) *bearer {
	b := &bearer{token: tok, line: []byte("Authorization: Bearer " + tok + "\r\n")}
	b.exp = jwtExp(tok)
	if b.exp == 0 {
		b.renewAt = now + int64(opaqueFor)
		return b
	}
	life := b.exp - now
	b.renewAt = b.exp - min(int64(30*time.Second), life/4)
	b.retireAt = b.exp - min(int64(5*time.Second), life/8)
	return b
}

// jwtExp reads the exp claim (unix nanos) of tok, a JWT, without verifying
// it; 0 when tok is not a JWT or has no numeric exp.
func jwtExp(tok string) int64 {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return 0
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return 0
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if d.Decode(&claims) != nil {
		return 0
	}
	f, err := claims.Exp.Float64()
	if err != nil || f <= 0 || f > 1<<33 {
		return 0
	}
	return int64(f * float64(time.Second))
}

// authLine is the Authorization line of c's token, nil when the client
// has no token source (a static token is among the constant headers).
func (c *call) authLine() []byte {
	if c.tok == nil {
		return nil
	}
	return c.tok.line
}

// authorize gives each of calls the source's token, when the client has a
// token source.
func (c *Client) authorize(ctx context.Context, calls ...*call) error {
	if c.src == nil {
		return nil
	}
	b, err := c.src.get(ctx)
	if err != nil {
		return err
	}
	for _, cl := range calls {
		cl.tok = b
	}
	return nil
}

// sameToken compares two credentials in constant time: a token is a
// secret, and whether a fresh one differs from the one in use is no
// reason to leak how much of it matched (internal/secretcmp checks that
// no secret is compared otherwise).
func sameToken(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
