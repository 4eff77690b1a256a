package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// forwarder is a TCP proxy to addr that counts the connections it is
// given.
func forwarder(t *testing.T, addr string) *fakeServer {
	return startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { io.Copy(nc, up); nc.Close() }()
		io.Copy(up, br)
	})
}

// rotating mints a fresh token of tenant acme for each call, valid for
// life (to the second: exp has that resolution), and counts the calls.
type rotating struct {
	secret string
	life   time.Duration
	calls  atomic.Int32
	mu     sync.Mutex
	exps   []time.Time
}

func (r *rotating) token(context.Context) (string, error) {
	r.calls.Add(1)
	exp := time.Now().Add(r.life).Truncate(time.Second)
	r.mu.Lock()
	r.exps = append(r.exps, exp)
	r.mu.Unlock()
	return hs256(r.secret, fmt.Sprintf(`{"tenant":"acme","role":"read-write","exp":%d,"n":%d}`, exp.Unix(), r.calls.Load())), nil
}

func (r *rotating) firstExp() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exps[0]
}

// WithTokenFunc on links: against a broker in mode jwt with tokens that
// live 9 to 10 s, a client's pushes over three tokens ride the same
// links throughout (no connection dialled after the first two: each link
// is sent a fresh token before its own expires), a pop parked before the
// first token's exp is answered by a push made in the third token's
// lifetime, and the token function is called once per token, not per
// call. (Shorter tokens leave too little time between a link's renewal, a
// quarter of the lifetime before exp, and its retirement, an eighth: on a
// loaded machine a renewal answered later than that had the link retired
// and a second one dialled.) Without
// the token frames the broker closes each link at its token's exp, with
// the parked pop on it.
func TestTokenFuncKeepsLinksAcrossTokens(t *testing.T) {
	t.Parallel()
	const secret = "client-token-func-secret"
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": secret, "QUEEN_METRICS_PUBLIC": "true"})
	proxy := forwarder(t, b.Addr())
	src := &rotating{secret: secret, life: 10 * time.Second}
	c := newClient(t, proxy.URL(), WithTokenFunc(src.token))
	ctx := testCtx(t)

	// Both links dialled, the pop parked on one of them.
	for i := range linksPerURL {
		if _, err := c.Push(ctx, "warm", []any{i}, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	popped := make(chan error, 1)
	var got PopResult
	go func() {
		res, err := c.Pop(ctx, "parked", PopOptions{Wait: true, Timeout: 30 * time.Second, AutoAck: true})
		if res != nil {
			got = *res
		}
		popped <- err
	}()
	awaitCond(t, 5*time.Second, "the pop parked", func() bool { return brokerGauge(t, b, "queen_ephemeral_parked_pops") == 1 })
	links := proxy.conns.Load()
	if links != linksPerURL {
		t.Fatalf("%d connections for %d links", links, linksPerURL)
	}

	// Pushes every 50 ms until past the third token's fetch (the second
	// token's renewal, some 5 s after the first exp).
	end := src.firstExp().Add(src.life/2 + time.Second)
	pushes := 0
	for time.Now().Before(end) {
		if _, err := c.Push(ctx, "steady", []any{pushes}, PushOptions{}); err != nil {
			t.Fatalf("push %d at %v (the first token expired at %v): %v", pushes, time.Now().Format("15:04:05.000"), src.firstExp().Format("15:04:05"), err)
		}
		pushes++
		time.Sleep(50 * time.Millisecond) // the pace of the pushes, not a wait for a condition
	}
	if _, err := c.Push(ctx, "parked", []any{"late"}, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-popped; err != nil || len(got.Messages) != 1 || string(got.Messages[0].Payload) != `"late"` {
		t.Fatalf("the pop parked before the first exp: %+v %v, want the message pushed after the third", got, err)
	}
	if n := proxy.conns.Load(); n != links {
		t.Fatalf("%d connections after three tokens, want the %d links kept", n, links)
	}
	if calls := src.calls.Load(); calls < 3 || calls > 8 {
		t.Fatalf("the token function was called %d times for %d pushes over three tokens; want once a token or so (3 to 8)", calls, pushes)
	}
}

// jwtExp reads exp as unix seconds up to 2^33 (the year 2242) and nothing
// else: 0 for none, zero, negative, past the bound or not a number. Kills
// tokensource.go:154's `f >= 1<<33`.
func TestJWTExpBounds(t *testing.T) {
	for claims, want := range map[string]int64{
		`{"exp":8589934592}`:   8589934592 * int64(time.Second),
		`{"exp":8589934593}`:   0,
		`{"exp":1700000000.5}`: 1700000000*int64(time.Second) + int64(time.Second)/2,
		`{"exp":0}`:            0,
		`{"exp":-5}`:           0,
		`{"exp":"soon"}`:       0,
		`{"sub":"x"}`:          0,
	} {
		if got := jwtExp(hs256("s", claims)); got != want {
			t.Errorf("%s: %d, want %d", claims, got, want)
		}
	}
	if got := jwtExp("opaque-token"); got != 0 {
		t.Errorf("an opaque token: %d, want 0", got)
	}
}

// The caching rule: a JWT is fetched again a quarter of its lifetime
// before its exp, at most 30 s before; a link carrying it takes no new
// call from an eighth of its lifetime before exp, at most 5 s; a token
// without a readable exp is fetched again after a minute and never
// retires a link.
func TestTokenRenewalTimes(t *testing.T) {
	now := time.Now().Truncate(time.Second).Add(time.Second)
	sec := int64(time.Second)
	unsigned := func(claims string) string {
		return hs256("any", claims)
	}
	for _, c := range []struct {
		what               string
		tok                string
		exp, renew, retire int64 // offsets from now
	}{
		{"an hour", unsigned(fmt.Sprintf(`{"exp":%d}`, now.Add(time.Hour).Unix())), 3600 * sec, 3570 * sec, 3595 * sec},
		{"4 s", unsigned(fmt.Sprintf(`{"exp":%d}`, now.Add(4*time.Second).Unix())), 4 * sec, 3 * sec, 3500 * int64(time.Millisecond)},
		{"no exp", unsigned(`{"tenant":"acme"}`), -1, 60 * sec, -1},
		{"not a JWT", "opaque-credential", -1, 60 * sec, -1},
		{"exp not a number", unsigned(`{"exp":"soon"}`), -1, 60 * sec, -1},
	} {
		b := newBearer(c.tok, now.UnixNano())
		rel := func(at int64) int64 {
			if at == 0 {
				return -1
			}
			return at - now.UnixNano()
		}
		if rel(b.exp) != c.exp || rel(b.renewAt) != c.renew || rel(b.retireAt) != c.retire {
			t.Errorf("%s: exp %v renew %v retire %v, want %v %v %v", c.what,
				time.Duration(rel(b.exp)), time.Duration(rel(b.renewAt)), time.Duration(rel(b.retireAt)),
				time.Duration(c.exp), time.Duration(c.renew), time.Duration(c.retire))
		}
		if string(b.line) != "Authorization: Bearer "+c.tok+"\r\n" {
			t.Errorf("%s: line %q", c.what, b.line)
		}
	}
}

// WithTokenFunc over HTTP/1.1 (the client's own transport and net/http):
// every request carries the function's token, fetched once and again only
// after its renewal time; a failing function fails the call before
// anything is sent, unless the token in use is still good, which then
// serves; a token holding a line break is refused the same way.
func TestTokenFuncOverHTTP(t *testing.T) {
	t.Parallel()
	auths := make(chan string, 64)
	f := startFake(t, func(_ int, nc net.Conn, br *bufio.Reader) {
		for {
			req, err := readRequest(br)
			if err != nil {
				return
			}
			auths <- req.header.Get("Authorization")
			if _, err := io.WriteString(nc, response(200, "", `{"queues":[]}`)); err != nil {
				return
			}
		}
	})
	for _, viaNet := range []bool{false, true} {
		var (
			calls atomic.Int32
			fail  atomic.Bool
			bad   atomic.Bool
			exp   atomic.Int64
		)
		fn := func(context.Context) (string, error) {
			n := calls.Add(1)
			switch {
			case fail.Load():
				return "", errors.New("the identity provider is down")
			case bad.Load():
				return "x\r\nX-Injected: 1", nil
			}
			e := time.Now().Add(2 * time.Second).Truncate(time.Second)
			exp.Store(e.UnixNano())
			return hs256("s", fmt.Sprintf(`{"exp":%d,"n":%d}`, e.Unix(), n)), nil
		}
		opts := []Option{WithTokenFunc(fn), WithToken("ignored-before"), WithTokenFunc(fn)}
		if viaNet {
			opts = append(opts, WithHTTPClient(&http.Client{}))
		}
		c := newHTTPClient(t, f.URL(), opts...)
		ctx := testCtx(t)
		queues := func() (string, error) {
			if _, err := c.Queues(ctx); err != nil {
				return "", err
			}
			return <-auths, nil
		}
		first, err := queues()
		if err != nil || !strings.HasPrefix(first, "Bearer ey") {
			t.Fatalf("net/http %v: the first request: %q %v", viaNet, first, err)
		}
		for range 5 {
			if a, err := queues(); err != nil || a != first {
				t.Fatalf("net/http %v: a request before the renewal carried %q (%v), want the first token", viaNet, a, err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("net/http %v: the function was called %d times for 6 requests, want once", viaNet, n)
		}
		// Past the renewal time: the function is down, the token still good.
		fail.Store(true)
		renew := newBearer(strings.TrimPrefix(first, "Bearer "), 0)
		awaitCond(t, 5*time.Second, "the renewal time", func() bool { return time.Now().UnixNano() >= renew.renewAt+int64(10*time.Millisecond) })
		if a, err := queues(); err != nil || a != first {
			t.Fatalf("net/http %v: with the function down and the token good: %q %v, want the token in use", viaNet, a, err)
		}
		// Past its exp too: the call fails, nothing sent.
		awaitCond(t, 5*time.Second, "the token's exp", func() bool { return time.Now().UnixNano() >= exp.Load()+int64(tokenRetry) })
		if _, err := c.Queues(ctx); err == nil || !strings.Contains(err.Error(), "the identity provider is down") {
			t.Fatalf("net/http %v: with the function down and the token expired: %v, want its error", viaNet, err)
		}
		bad.Store(true)
		fail.Store(false)
		if _, err := c.Queues(ctx); err == nil || !strings.Contains(err.Error(), "cannot be sent") {
			t.Fatalf("net/http %v: a token with a line break: %v, want refused", viaNet, err)
		}
		select {
		case a := <-auths:
			t.Fatalf("net/http %v: a request reached the broker (%q) after the function failed", viaNet, a)
		default:
		}
		// The function back: a fresh token.
		bad.Store(false)
		if a, err := queues(); err != nil || a == first || !strings.HasPrefix(a, "Bearer ey") {
			t.Fatalf("net/http %v: after the function recovered: %q %v, want a fresh token", viaNet, a, err)
		}
	}
}

// A token frame the broker refuses (here the function's second token names
// another tenant: 403) leaves the link its old identity until exp; the
// link takes no new call from its retirement time, and a fresh link,
// upgraded with the new token, takes them: pushes paced through the old
// token's exp all succeed, none lost on the link the broker closes.
// Without the retirement the first push after exp closes the link and is
// reported "may have applied".
func TestTokenFuncRefusedFrameRetiresTheLink(t *testing.T) {
	t.Parallel()
	const secret = "client-token-refused-secret"
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": secret})
	proxy := forwarder(t, b.Addr())
	var calls atomic.Int32
	var firstExp atomic.Int64
	fn := func(context.Context) (string, error) {
		tenant := "globex"
		// 7 to 8 s: the link retires about a second before exp, room for a
		// push in flight then to be answered on a loaded machine.
		exp := time.Now().Add(8 * time.Second).Truncate(time.Second)
		if calls.Add(1) == 1 {
			tenant = "acme"
			firstExp.Store(exp.UnixNano())
		}
		return hs256(secret, fmt.Sprintf(`{"tenant":%q,"role":"read-write","exp":%d}`, tenant, exp.Unix())), nil
	}
	c := newClient(t, proxy.URL(), WithTokenFunc(fn))
	ctx := testCtx(t)
	end := time.Unix(0, 0).Add(time.Second) // set after the first call
	for i := 0; i == 0 || time.Now().Before(end); i++ {
		if _, err := c.Push(ctx, "q", []any{i}, PushOptions{}); err != nil {
			t.Fatalf("push %d at %v (the first token's exp %v): %v", i, time.Now().Format("15:04:05.000"), time.Unix(0, firstExp.Load()).Format("15:04:05"), err)
		}
		if i == 0 {
			end = time.Unix(0, firstExp.Load()).Add(time.Second)
		}
		time.Sleep(20 * time.Millisecond) // the pace of the pushes, not a wait for a condition
	}
	if n := proxy.conns.Load(); n <= linksPerURL {
		t.Fatalf("%d connections: no fresh link was dialled for the new token", n)
	}
}

// A call with a token source costs no allocation while the token is
// fresh: authorize is an atomic load and a clock read.
func TestTokenSourceFreshAllocatesNothing(t *testing.T) {
	tok := hs256("s", fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix()))
	c := &Client{src: newTokenSource(func(context.Context) (string, error) { return tok, nil })}
	cl := getCall("POST", "/push")
	defer putCall(cl)
	ctx := context.Background()
	if err := c.authorize(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = c.authorize(ctx, cl) }); n != 0 {
		t.Fatalf("%v allocations per authorized call, want 0", n)
	}
	if got := string(cl.authLine()); got != "Authorization: Bearer "+tok+"\r\n" {
		t.Fatalf("auth line %q", got)
	}
}
