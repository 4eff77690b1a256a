package wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// snap is a deep copy of a Request, which the parser reuses.
type snap struct {
	Method     Method
	MethodName string
	Target     string
	Path       string
	Query      string
	HasQuery   bool
	Minor      int
	Body       string
	Chunked    bool
	KeepAlive  bool
	Expect     bool
	Headers    string
}

func snapshot(r *Request) snap {
	var h strings.Builder
	for i := 0; i < r.NumHeaders(); i++ {
		n, v := r.HeaderAt(i)
		fmt.Fprintf(&h, "%s=%s|", n, v)
	}
	return snap{
		Method: r.Method, MethodName: string(r.MethodName), Target: string(r.Target),
		Path: string(r.Path), Query: string(r.RawQuery), HasQuery: r.RawQuery != nil,
		Minor: r.Minor, Body: string(r.Body), Chunked: r.Chunked, KeepAlive: r.KeepAlive,
		Expect: r.ExpectContinue, Headers: h.String(),
	}
}

// outcome is what a parser made of a whole stream.
type outcome struct {
	Reqs     []snap
	Consumed int // bytes taken by complete requests
	Err      string
}

// parseStream feeds buf to a fresh parser in the pieces given by cuts
// (increasing offsets), the way a connection delivers reads, and collects
// every request.
func parseStream(t testing.TB, lim Limits, buf []byte, cuts []int) outcome {
	t.Helper()
	p := NewParser(lim)
	var out outcome
	start := 0 // first unconsumed byte
	avail := 0 // bytes delivered so far
	deliver := append(append([]int(nil), cuts...), len(buf))
	for _, c := range deliver {
		if c < avail {
			continue
		}
		avail = c
		for {
			req, n, err := p.Parse(buf[start:avail])
			if n > avail-start || n < 0 {
				t.Fatalf("consumed %d of %d bytes", n, avail-start)
			}
			if err != nil {
				var we *Error
				if !errors.As(err, &we) {
					t.Fatalf("error %T is not *Error", err)
				}
				out.Err = we.Msg
				return out
			}
			if req == nil {
				if n != 0 {
					t.Fatalf("no request but consumed %d", n)
				}
				break
			}
			if n == 0 {
				t.Fatalf("request with 0 bytes consumed")
			}
			out.Reqs = append(out.Reqs, snapshot(req))
			start += n
			out.Consumed = start
		}
	}
	return out
}

func parseOne(t testing.TB, raw string) (*Request, error) {
	t.Helper()
	p := NewParser(Limits{})
	req, n, err := p.Parse([]byte(raw))
	if err == nil && req != nil && n != len(raw) {
		t.Fatalf("consumed %d of %d", n, len(raw))
	}
	return req, err
}

// wantErr asserts that err is an *Error with status and a message holding
// every fragment.
func wantErr(t testing.TB, err error, status int, fragments ...string) *Error {
	t.Helper()
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("got %v (%T), want *Error", err, err)
	}
	if we.Status != status {
		t.Errorf("status %d, want %d (%s)", we.Status, status, we.Msg)
	}
	for _, f := range fragments {
		if !strings.Contains(we.Msg, f) {
			t.Errorf("message %q lacks %q", we.Msg, f)
		}
	}
	return we
}
