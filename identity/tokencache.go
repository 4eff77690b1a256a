package identity

import (
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// tokenCache remembers the identity of JWTs that verified, so a client that
// sends the same token on every request pays the signature check once
// instead of on every request (about 5 µs and 49 allocations for HS256,
// BENCHMARKS.md). Only tokens that passed every check are kept, with what
// they granted; an entry ends at the token's exp, and at the latest
// tokenCacheTTL after it was verified, so a key taken out of the JWK Set
// stops admitting its tokens within that time. The cache is bounded: when
// it holds tokenCacheMax tokens it is emptied and refills with the tokens
// in use (a flood of distinct valid tokens costs what it cost without it).
type tokenCache struct {
	m   *xsync.Map[string, tokenEntry]
	now func() time.Time
}

type tokenEntry struct {
	tenant string
	level  Level
	until  int64 // unix nanos: min(exp, verified + tokenCacheTTL)
}

const (
	tokenCacheTTL = time.Minute
	tokenCacheMax = 4096
)

func newTokenCache() *tokenCache {
	return &tokenCache{m: xsync.NewMap[string, tokenEntry](), now: time.Now}
}

// get returns the identity a token verified to, if it is cached and not
// past its end. token may be a view of the request's bytes: it is not kept.
// A nil cache caches nothing.
func (c *tokenCache) get(token string) (tokenEntry, bool) {
	if c == nil {
		return tokenEntry{}, false
	}
	e, ok := c.m.Load(token)
	if !ok {
		return tokenEntry{}, false
	}
	if c.now().UnixNano() >= e.until {
		c.m.Delete(token)
		return tokenEntry{}, false
	}
	return e, true
}

// put keeps a token that verified (token must be the caller's own string,
// not a view of a buffer); exp is its exp claim, zero when it has none.
func (c *tokenCache) put(token string, tenant string, level Level, exp time.Time) {
	if c == nil {
		return
	}
	now := c.now()
	until := now.Add(tokenCacheTTL)
	if !exp.IsZero() && exp.Before(until) {
		until = exp
	}
	if c.m.Size() >= tokenCacheMax {
		c.m.Clear()
	}
	c.m.Store(token, tokenEntry{tenant: tenant, level: level, until: until.UnixNano()})
}
