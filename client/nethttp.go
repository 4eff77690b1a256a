package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// httpEndpoint serves one broker URL through net/http: an https:// URL
// (TLS is net/http's), or any URL when WithHTTPClient was given. Calls are
// not pipelined; Request's push and pop go one after the other.
type httpEndpoint struct {
	hc      *http.Client
	base    string // the URL with its path prefix, no trailing slash
	token   string
	headers http.Header
}

func (h *httpEndpoint) do(ctx context.Context, c *call) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var body io.Reader
	if c.hasBody {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, h.base+string(c.target), body)
	if err != nil {
		return err
	}
	if c.hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.tok != nil {
		req.Header.Set("Authorization", "Bearer "+c.tok.token)
	} else if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	for k, vs := range h.headers {
		req.Header[k] = append([]string(nil), vs...)
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		if isDialError(err) {
			return &connError{err: err, dial: true}
		}
		return err
	}
	defer resp.Body.Close()
	c.resp, err = readAll(io.LimitReader(resp.Body, maxAnswer+1), c.resp[:0])
	if err != nil {
		return err
	}
	c.ans = answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), close: resp.Close}
	return nil
}

func (h *httpEndpoint) pair(ctx context.Context, push, pop *call) error {
	if err := h.do(ctx, push); err != nil || push.ans.status < 200 || push.ans.status > 299 {
		return err
	}
	return h.do(ctx, pop)
}

func (h *httpEndpoint) batch(ctx context.Context, calls []*call, answered func(*call)) error {
	for _, c := range calls {
		if err := h.do(ctx, c); err != nil {
			return err
		}
		if answered != nil {
			answered(c)
		}
	}
	return nil
}

func (h *httpEndpoint) closeIdle() { h.hc.CloseIdleConnections() }
