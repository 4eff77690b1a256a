package gateway

import (
	"bytes"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/wire"
)

// Who may use the admin routes and /metrics: docs/gateway.md, "Admin
// routes", the broker's rules (docs/server.md, "Admin scope"). Plans,
// tenants and every tenant's usage belong to the gateway's operator, not to
// whichever tenant holds an admin credential. The operator is: a request
// carrying the admin token, in every mode; without end-client identity and
// without a token, a loopback client (protected mode); with JWT identity,
// an admin of the operator tenant (none when QUEEN_OPERATOR_TENANT is
// unset). A tenant's admin may read the route table and its own tenant and
// usage, nothing else.

// adminNeed is what an admin request asks for.
type adminNeed uint8

const (
	needOperator  adminNeed = iota // change a plan or tenant, read a plan, read /metrics
	needAnyAdmin                   // read the route table: any admin
	needOwnTenant                  // read a tenant or its usage: the operator, or an admin of that tenant
)

// Refusals of the admin scope, allocated once.
var (
	errAdminOnly = &wire.Error{Status: 403, Code: codeForbidden, Msg: "the gateway's admin routes need the admin role"}
	errProtected = &wire.Error{Status: 403, Code: codeForbidden, Msg: "the admin routes and /metrics answer only loopback clients " +
		"while the gateway has no end-client identity (no QUEEN_JWT_* set) and no admin token; to administer it remotely set " +
		"QUEEN_ADMIN_TOKEN and send it as Authorization: Bearer <token>"}
	errAdminToken = &wire.Error{Status: 401, Code: codeUnauthorized, Msg: "this route needs the admin token: " +
		"Authorization: Bearer <QUEEN_ADMIN_TOKEN>"}
	errNotOperator = &wire.Error{Status: 403, Code: codeForbidden, Msg: "this route is the gateway operator's: it needs the admin token " +
		"(QUEEN_ADMIN_TOKEN) or an admin of the operator tenant (QUEEN_OPERATOR_TENANT); a tenant's admin may read " +
		"the route table and its own tenant and usage only"}
	errOtherTenant = &wire.Error{Status: 403, Code: codeForbidden, Msg: "a tenant's admin may read its own tenant and usage only; " +
		"other tenants' need the admin token or an admin of the operator tenant"}
)

// adminNeedOf is what req, an admin route or /metrics, asks for, and for
// needOwnTenant the tenant it names, unescaped.
func adminNeedOf(req *wire.Request) (adminNeed, []byte) {
	if req.Method != wire.MethodGet || !bytes.HasPrefix(req.Path, []byte(adminPrefix)) {
		return needOperator, nil
	}
	rest := req.Path[len(adminPrefix):]
	if bytes.Equal(rest, []byte("routes")) {
		return needAnyAdmin, nil
	}
	for _, kind := range []string{"tenants/", "usage/"} {
		if name, ok := bytes.CutPrefix(rest, []byte(kind)); ok {
			return needOwnTenant, req.PathUnescape(name)
		}
	}
	return needOperator, nil
}

// adminRefusal is why req may not use the admin route (or /metrics) it
// asks for, nil when it may.
func (cc *clientConn) adminRefusal(req *wire.Request) *wire.Error {
	g := cc.g
	need, name := adminNeedOf(req)
	if identity.HasAdminToken(req, g.cfg.AdminToken) {
		return nil
	}
	if g.cfg.Auth.Mode() == identity.ModeNone {
		switch {
		case len(g.cfg.AdminToken) > 0:
			return errAdminToken
		case !cc.isLoopback():
			return errProtected
		case !g.cfg.Browsers.LoopbackHost(req):
			// A loopback client naming another host is how a web page
			// whose name was rebound to 127.0.0.1 arrives (D20).
			return crossorigin.ErrHostNotLoopback
		}
		return nil
	}
	tenant, level, ierr := g.cfg.Auth.Identify(req)
	switch {
	case ierr != nil:
		return ierr
	case level != identity.Admin:
		return errAdminOnly
	case g.cfg.OperatorTenant != "" && tenant == g.cfg.OperatorTenant:
		return nil
	}
	switch need {
	case needAnyAdmin:
		return nil
	case needOwnTenant:
		if string(name) == tenant {
			return nil
		}
		return errOtherTenant
	}
	return errNotOperator
}

// crossOrigin refuses a state-changing request a browser sent from another
// origin (D20, internal/crossorigin), on its head, before any route.
func (cc *clientConn) crossOrigin(req *wire.Request) *wire.Error {
	if !crossorigin.StateChanging(req.Method, req.Path) {
		return nil
	}
	return cc.g.cfg.Browsers.Check(req)
}
