package client

import (
	"context"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// Keeping a link's identity fresh (docs/link.md, "Token";
// docs/sdk-transport.md, "Tokens that rotate").
//
// A link upgraded with a token that expires is closed by the broker at its
// exp, with whatever is parked on it, unless a fresher token of the same
// tenant was sent on it in a token frame. keepFresh does that for each
// link dialled with a token source's token: at the token's renewal time it
// asks the source for a token (which the source fetches, its own copy
// being due by then), sends it, and waits for the answer. On 200 the link
// carries the new token's identity, and the next renewal is the new
// token's. A refusal (401, 403: the broker would not take it) is not the
// caller's concern: the link carries on with the old identity, takes no
// new call once that nears its exp (linkSlot.retireAt: a fresh link is
// dialled for them, with a fresh token), and the broker closes it at exp.
// A 400 says the broker has no expiry (not in mode jwt): the link is then
// never retired. A source that fails, or returns the token in use, is
// asked again a second later, until exp.

// keepFresh keeps the identity of m, slot s's link dialled with cur, until
// m ends or a refusal. It runs on a goroutine of its own, one per link
// dialled with a token that expires.
func (e *linkEndpoint) keepFresh(s *linkSlot, m *link.Mux, cur *bearer) {
	at := cur.renewAt
	for {
		t := time.NewTimer(time.Until(time.Unix(0, at)))
		select {
		case <-m.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		if now >= cur.exp {
			return // the broker closes the link now
		}
		ctx, cancel := context.WithTimeout(context.Background(), tokenFetchTimeout)
		next, err := e.src.get(ctx)
		cancel()
		if err != nil || sameToken(next.token, cur.token) || next.exp != 0 && next.exp <= cur.exp {
			at = now + int64(tokenRetry)
			continue
		}
		switch sendToken(m, next) {
		case 200:
			cur = next
			at = cur.renewAt
			s.retire(m, cur.retireAt)
			if cur.exp == 0 {
				return // an opaque token: nothing to renew
			}
		case 400:
			s.retire(m, 0)
			return
		default:
			return // refused, or the link ended: it carries on until exp
		}
	}
}

// retire sets when the slot's link m takes no new call (0: never), if m
// is still the slot's link.
func (s *linkSlot) retire(m *link.Mux, at int64) {
	s.mu.Lock()
	if s.mux == m {
		s.retireAt.Store(at)
	}
	s.mu.Unlock()
}

// sendToken sends b on m in a token frame and returns the status of the
// answer, 0 when none came (the link ended, or no answer within
// tokenFetchTimeout).
func sendToken(m *link.Mux, b *bearer) int {
	r := &tokenReply{status: make(chan int, 1)}
	id, err := m.SendToken(r, []byte(b.token))
	if err != nil {
		return 0
	}
	t := time.NewTimer(tokenFetchTimeout)
	defer t.Stop()
	select {
	case st := <-r.status:
		return st
	case <-t.C:
		m.Cancel(id)
		return 0
	}
}

// tokenReply is the link.Caller of a token frame: the answer's status.
type tokenReply struct{ status chan int }

func (r *tokenReply) Answered(p []byte) {
	a, _, err := parseAnswer(p, nil)
	if err != nil {
		a.status = 0
	}
	r.status <- a.status
}

func (r *tokenReply) Ended(error) { r.status <- 0 }
