package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/wire"
)

// The admin routes (docs/gateway.md, "Admin routes"), for the gateway's
// operator (adminscope.go):
//
//	PUT|GET|DELETE /api/v1/gateway/plans/:plan
//	PUT|GET        /api/v1/gateway/tenants/:tenant
//	GET            /api/v1/gateway/usage/:tenant
//	GET            /api/v1/gateway/routes
//
// They read and write the catalog, which may be a database, so they are
// answered off the loop; the connection reads nothing else meanwhile.

// adminRequest is what an admin route needs of its request, copied off the
// connection's buffer.
type adminRequest struct {
	method wire.Method
	path   string // after adminPrefix, still escaped
	body   []byte
	head   wire.Head
}

// admin checks the credential, then answers the admin route off the loop.
func (cc *clientConn) admin(req *wire.Request) {
	g := cc.g
	if e := cc.adminRefusal(req); e != nil {
		cc.refuse(req, e, 0)
		return
	}
	a := adminRequest{
		method: req.Method,
		path:   string(req.Path[len(adminPrefix):]),
		body:   bytes.Clone(req.Body),
		head:   req.Head(200),
	}
	cc.offLoop(a.head.Close, func() []byte { return g.serveAdmin(a) })
}

// offLoop answers the connection's current request with what answer
// makes, computed off the loop (a catalog call, a scrape that reads /proc):
// the connection reads nothing else meanwhile (busy), and the answer is
// written from the loop when it is ready. closeAfter closes the connection
// once it is written.
func (cc *clientConn) offLoop(closeAfter bool, answer func() []byte) {
	cc.busy = true
	go func() {
		b := answer()
		done := func(context.Context) error {
			cc.busy = false
			if cc.isClosed {
				return nil
			}
			cc.out = append(cc.out, b...)
			if closeAfter {
				cc.closeAfter = true
			}
			cc.serve()
			cc.markWrite()
			cc.ls.writeListed()
			cc.ls.flushOwn()
			return nil
		}
		_ = cc.ls.loop.Execute(context.Background(), gnet.RunnableFunc(done))
	}()
}

// serveAdmin answers one admin request.
func (g *Gateway) serveAdmin(a adminRequest) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kind, name, _ := strings.Cut(a.path, "/")
	if kind == "routes" && name == "" {
		if a.method != wire.MethodGet {
			return adminError(a, errMethod)
		}
		return adminJSON(a, 200, g.cfg.Routes.JSON())
	}
	if name == "" || strings.Contains(name, "/") {
		return adminError(a, &wire.Error{Status: 404, Code: "not_found", Msg: "no such gateway route"})
	}
	name, err := url.PathUnescape(name)
	if err != nil {
		return adminError(a, &wire.Error{Status: 400, Code: codeBadRequest, Msg: "the name's percent-escapes are malformed"})
	}
	switch kind {
	case "plans":
		return g.adminPlan(ctx, a, name)
	case "tenants":
		return g.adminTenant(ctx, a, name)
	case "usage":
		if a.method != wire.MethodGet {
			return adminError(a, errMethod)
		}
		if e := wire.CheckName("tenant", []byte(name)); e != nil {
			return adminError(a, &wire.Error{Status: 400, Code: codeBadRequest, Msg: e.Msg})
		}
		return adminJSON(a, 200, g.usageJSON(name))
	}
	return adminError(a, &wire.Error{Status: 404, Code: "not_found", Msg: "no such gateway route"})
}

func (g *Gateway) adminPlan(ctx context.Context, a adminRequest, name string) []byte {
	switch a.method {
	case wire.MethodPut:
		p, err := catalog.DecodePlan(name, a.body)
		if err != nil {
			return adminError(a, &wire.Error{Status: 400, Code: codeBadRequest, Msg: err.Error()})
		}
		if err := g.cfg.Catalog.PutPlan(ctx, p); err != nil {
			return g.storeFailed(a, err)
		}
		g.reloadAfterWrite(ctx)
		return adminJSON(a, 200, mustJSON(p))
	case wire.MethodGet:
		p, ok, err := g.cfg.Catalog.GetPlan(ctx, name)
		if err != nil {
			return g.storeFailed(a, err)
		}
		if !ok {
			return adminError(a, &wire.Error{Status: 404, Code: codePlanNotFound, Msg: "no plan named " + name})
		}
		return adminJSON(a, 200, mustJSON(p))
	case wire.MethodDelete:
		deleted, err := g.cfg.Catalog.DeletePlan(ctx, name)
		if err != nil {
			return g.storeFailed(a, err)
		}
		g.reloadAfterWrite(ctx)
		return adminJSON(a, 200, mustJSON(struct {
			Plan    string `json:"plan"`
			Deleted bool   `json:"deleted"`
		}{name, deleted}))
	}
	return adminError(a, errMethod)
}

func (g *Gateway) adminTenant(ctx context.Context, a adminRequest, name string) []byte {
	switch a.method {
	case wire.MethodPut:
		t, err := catalog.DecodeTenant(name, a.body)
		if err != nil {
			return adminError(a, &wire.Error{Status: 400, Code: codeBadRequest, Msg: err.Error()})
		}
		if _, ok, err := g.cfg.Catalog.GetPlan(ctx, t.Plan); err != nil {
			return g.storeFailed(a, err)
		} else if !ok {
			return adminError(a, &wire.Error{Status: 404, Code: codePlanNotFound, Msg: "no plan named " + t.Plan + "; put the plan first"})
		}
		if err := g.cfg.Catalog.PutTenant(ctx, t); err != nil {
			return g.storeFailed(a, err)
		}
		g.reloadAfterWrite(ctx)
		return adminJSON(a, 200, mustJSON(t))
	case wire.MethodGet:
		t, ok, err := g.cfg.Catalog.GetTenant(ctx, name)
		if err != nil {
			return g.storeFailed(a, err)
		}
		if !ok {
			return adminError(a, &wire.Error{Status: 404, Code: codeTenantNotFound, Msg: "no tenant named " + name})
		}
		return adminJSON(a, 200, mustJSON(t))
	}
	return adminError(a, errMethod)
}

// usageJSON is a tenant's usage in its current period.
func (g *Gateway) usageJSON(name string) []byte {
	u := struct {
		Tenant     string `json:"tenant"`
		Messages   int64  `json:"messages"`
		Deliveries int64  `json:"deliveries"`
		Parked     int64  `json:"parked"`
	}{Tenant: name}
	if ts, ok := g.tenants.Load(name); ok {
		ts.roll(ts.plan.Load(), time.Now().Unix())
		u.Messages, u.Deliveries, u.Parked = ts.msgs.Load(), ts.delivs.Load(), ts.parked.Load()
	}
	return mustJSON(u)
}

// reloadAfterWrite applies this gateway's own write at once; the others
// see it at their next poll.
func (g *Gateway) reloadAfterWrite(ctx context.Context) {
	if err := g.reload(ctx); err != nil {
		g.cfg.Logger.Warn("gateway: reloading the catalog after a write failed; the next poll retries", "err", err)
	}
}

func (g *Gateway) storeFailed(a adminRequest, err error) []byte {
	g.cfg.Logger.Warn("gateway: the catalog failed", "err", err)
	return adminError(a, &wire.Error{Status: 503, Code: codeStoreUnavailable, Msg: "the gateway's catalog could not be read or written; retry"})
}

func adminJSON(a adminRequest, status int, body []byte) []byte {
	h := a.head
	h.Status = status
	return wire.AppendResponse(nil, h, body)
}

func adminError(a adminRequest, e *wire.Error) []byte {
	h := a.head
	h.Status = e.Status
	return wire.AppendError(nil, h, e)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps and structs of plain values are marshalled
	}
	return b
}
