package relay

import (
	"bytes"
	"context"
	"crypto/subtle"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/queenmq/ephemeral/link"
)

// The candidate the framed protocol was measured against (docs/cell-relay.md),
// for the benchmarks in bench_test.go only: it is not product code, so no
// test checks it (each benchmark's first round trip fails the benchmark if
// the candidate does not answer).
//
// HTTP/2 cleartext with prior knowledge through the standard library (the
// same code as golang.org/x/net/http2, bundled into net/http, which serves
// h2c itself since Go 1.24). The request travels as the same encoded
// payload in a POST body, the secret in a header compared per request, and
// the owner's answer as the response body. The owner's Handler is the same
// async one; each stream's handler goroutine waits for its reply, as
// net/http requires.

type h2Relay struct {
	conns  atomic.Int64 // connections the server accepted
	srv    *http.Server
	client *http.Client
	url    string
}

func startH2(tb testing.TB, h Handler) *h2Relay {
	tb.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	mux := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Cell-Secret")), testSecret) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		req := new(link.Request)
		if link.DecodeRequest(body, req) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		done := make(chan link.Response, 1)
		h(r.Context(), req, func(resp link.Response) { done <- resp })
		select {
		case resp := <-done:
			w.Write(resp.Raw)
		case <-r.Context().Done():
		}
	})
	srv := &http.Server{Handler: mux, Protocols: &p,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1 << 16}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tr := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 4}
	r := &h2Relay{srv: srv, client: &http.Client{Transport: tr}, url: "http://" + ln.Addr().String() + "/relay"}
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.conns.Add(1)
		}
	}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
	return r
}

func (r *h2Relay) Do(ctx context.Context, req *link.Request) (link.Response, error) {
	payload, _ := link.AppendRequest(nil, 0, req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(payload[link.HeaderLen:]))
	if err != nil {
		return link.Response{}, err
	}
	hr.Header.Set("X-Cell-Secret", string(testSecret))
	resp, err := r.client.Do(hr)
	if err != nil {
		return link.Response{}, &Error{Kind: ErrUnreachable, Cause: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return link.Response{}, &Error{Kind: ErrUnreachable, Cause: err}
	}
	return link.Response{Raw: raw}, nil
}
