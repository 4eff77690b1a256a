package client

import (
	"context"
	"net/http"
	"net/url"
)

// The system routes (the kill switch and the tenants' grants) are the
// broker operator's (docs/server.md, "Admin scope" and "Kill switch"): the
// admin token ([WithToken]) in any identity mode, a loopback client in mode
// none without a token, or an admin of the operator tenant.
const systemPrefix = "/api/v1/system/ephemeral"

// The codes the system routes answer besides the family's; identity's two
// ("unauthorized", "forbidden") are answered by every route.
const (
	CodeSystemBadRequest = "bad_request"     // 400: a kill switch or grant body of the wrong shape
	CodeGrantNotFound    = "grant_not_found" // 404: the tenant has no grant
	CodeUnauthorized     = "unauthorized"    // 401: no credential, or a wrong one
	CodeForbidden        = "forbidden"       // 403: a credential whose level or tenant is not enough
)

// KillSwitch is the state of the kill switch: Enabled false is the
// ephemeral surface paused, every push, pop and ack answering 503
// [CodeDisabled] with Retry-After RetryAfterSeconds (at least 1).
type KillSwitch struct {
	Enabled           bool  `json:"enabled"`
	RetryAfterSeconds int64 `json:"retryAfterSeconds"`
}

// Grant is a tenant's allowance on the class; 0 is unlimited.
type Grant struct {
	Tenant            string `json:"tenant"`
	MaxBytes          int64  `json:"maxBytes"`
	MaxQueues         int64  `json:"maxQueues"`
	MessagesPerSecond int64  `json:"messagesPerSecond"`
}

// DeleteGrantResult answers [Client.DeleteGrant]; Deleted is false when
// the tenant had no grant (not an error).
type DeleteGrantResult struct {
	Tenant  string `json:"tenant"`
	Deleted bool   `json:"deleted"`
}

// KillSwitch reads the kill switch.
func (c *Client) KillSwitch(ctx context.Context) (*KillSwitch, error) {
	var out KillSwitch
	cl := newCallUnder(systemPrefix, http.MethodGet, "", c.timeout)
	cl.safe = true
	if err := c.systemExchange(ctx, cl, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetKillSwitch sets the kill switch (Enabled false pauses the surface)
// and answers the state in force. The broker applies it at once and keeps
// it, so a paused broker restarts paused.
func (c *Client) SetKillSwitch(ctx context.Context, k KillSwitch) (*KillSwitch, error) {
	var out KillSwitch
	cl := newCallUnder(systemPrefix, http.MethodPost, "", c.timeout)
	cl.safe = true // it sets a state: twice is once
	if err := cl.jsonBody(k); err != nil {
		putCall(cl)
		return nil, err
	}
	if err := c.systemExchange(ctx, cl, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Grant reads tenant's grant; a tenant without one is an *Error with
// CodeGrantNotFound (404).
func (c *Client) Grant(ctx context.Context, tenant string) (*Grant, error) {
	var out Grant
	cl := newCallUnder(systemPrefix, http.MethodGet, "/grants/"+url.PathEscape(tenant), c.timeout)
	cl.safe = true
	if err := c.systemExchange(ctx, cl, CodeGrantNotFound, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetGrant writes g (all three allowances: the broker replaces the row,
// a field left 0 being unlimited) and answers the stored grant.
func (c *Client) SetGrant(ctx context.Context, g Grant) (*Grant, error) {
	var out Grant
	cl := newCallUnder(systemPrefix, http.MethodPut, "/grants/"+url.PathEscape(g.Tenant), c.timeout)
	cl.safe = true // it replaces the row: twice is once
	if err := cl.jsonBody(struct {
		MaxBytes          int64 `json:"maxBytes"`
		MaxQueues         int64 `json:"maxQueues"`
		MessagesPerSecond int64 `json:"messagesPerSecond"`
	}{g.MaxBytes, g.MaxQueues, g.MessagesPerSecond}); err != nil {
		putCall(cl)
		return nil, err
	}
	if err := c.systemExchange(ctx, cl, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteGrant removes tenant's grant, lifting its allowances.
func (c *Client) DeleteGrant(ctx context.Context, tenant string) (*DeleteGrantResult, error) {
	var out DeleteGrantResult
	cl := newCallUnder(systemPrefix, http.MethodDelete, "/grants/"+url.PathEscape(tenant), c.timeout)
	cl.safe = true // deleting what is gone answers deleted false
	if err := c.systemExchange(ctx, cl, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// systemExchange is exchange for the system routes: they are served by
// the broker that receives them and never relayed, so no cell refusal is
// retried; own404 is the code of the route's own 404 (a missing grant).
func (c *Client) systemExchange(ctx context.Context, cl *call, own404 string, out any) error {
	err := c.roundTrip(ctx, cl)
	if err == nil {
		if cl.ans.status < 200 || cl.ans.status > 299 {
			err = apiError(cl.ans, cl.resp, cl.method, cl.prefix+cl.route, own404)
		} else {
			err = c.answer(cl, false, out)
		}
	}
	release(cl, err)
	return err
}
