package client

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// keepFresh sends a link a token only when it expires later than the one
// the link carries: another token with the same exp is passed over (sent,
// it would renew nothing, and the link would be asked to renew again at
// once), and the source is asked again until a later one comes, which is
// sent. Kills linktoken.go:48's mutants (`next.exp == 0`, `next.exp <
// cur.exp`), which sent the first.
func TestKeepFreshSendsOnlyALaterToken(t *testing.T) {
	t.Parallel()
	const secret = "keep-fresh-secret"
	mint := func(exp time.Time, n int) string {
		return hs256(secret, fmt.Sprintf(`{"tenant":"acme","role":"read-write","exp":%d,"n":%d}`, exp.Unix(), n))
	}
	exp := time.Now().Add(4 * time.Second).Truncate(time.Second)
	sameExp, later := mint(exp, 2), mint(exp.Add(time.Hour), 3)
	var calls atomic.Int32
	src := newTokenSource(func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			return sameExp, nil
		}
		return later, nil
	})

	nc, peer := net.Pipe()
	m := link.NewMux(nc, bufio.NewReader(nc), link.MuxConfig{})
	sent := make(chan string, 4)
	go func() {
		// The broker's end: each token frame is recorded and answered 200.
		for {
			typ, id, p, err := readLinkFrame(peer)
			if err != nil {
				return
			}
			if typ != link.FrameToken {
				continue
			}
			sent <- string(p)
			ok := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
			if _, err := peer.Write(append(link.AppendHeader(nil, link.FrameAnswer, id, len(ok)), ok...)); err != nil {
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur := &bearer{token: mint(exp, 1), exp: exp.UnixNano(), renewAt: time.Now().UnixNano()}
		(&linkEndpoint{src: src}).keepFresh(&linkSlot{}, m, cur)
	}()
	select {
	case tok := <-sent:
		if tok != later {
			t.Errorf("the first token sent on the link is the one with the link's own exp; want only the later one")
		}
	case <-time.After(15 * time.Second):
		t.Error("no token sent within 15 s; want the later one, once the source gives it (about 3 s)")
	}
	m.Close()
	peer.Close()
	<-done
	if n := calls.Load(); n < 2 {
		t.Fatalf("the source was asked %d times; want again after the token with the same exp", n)
	}
}
