package server

import (
	"net"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/wire"
)

// Who may use the admin routes (the kill switch, the grants) and /metrics:
// docs/server.md, "Admin scope". Broker-wide verbs need a broker operator:
// the admin token in any mode, a loopback client in mode none without a
// token (protected mode), or an admin of the operator tenant in jwt and
// gateway modes. A tenant's admin reads the kill switch and its own grant,
// and nothing broker-wide.

// adminNeed is what an admin request asks for.
type adminNeed uint8

const (
	needOperator       adminNeed = iota // set the kill switch, set or delete a grant, read /metrics
	needReadKillSwitch                  // read the kill switch: any admin
	needReadGrant                       // read a grant: the operator, or an admin of that tenant
)

// Refusals of the admin scope, allocated once.
var (
	errProtected = &wire.Error{Status: 403, Code: codeForbidden, Msg: "the admin routes and /metrics answer only loopback clients " +
		"while QUEEN_AUTH_MODE=none and no admin token is set; to administer the broker remotely set QUEEN_ADMIN_TOKEN " +
		"and send it as Authorization: Bearer <token>"}
	errAdminToken = &wire.Error{Status: 401, Code: codeUnauthorized, Msg: "this route needs the admin token: " +
		"Authorization: Bearer <QUEEN_ADMIN_TOKEN>"}
	errNotOperator = &wire.Error{Status: 403, Code: codeForbidden, Msg: "this route is broker-wide: it needs the admin token " +
		"(QUEEN_ADMIN_TOKEN) or an admin of the operator tenant (QUEEN_OPERATOR_TENANT); a tenant's admin may read " +
		"the kill switch and its own grant only"}
	errOtherGrant = &wire.Error{Status: 403, Code: codeForbidden, Msg: "a tenant's admin may read its own grant only; " +
		"other tenants' grants need the admin token or an admin of the operator tenant"}
)

// adminAccess admits req to an admin route that needs need (grantTenant
// names the grant of a grant route), or appends the refusal and returns
// false.
func (cs *conn) adminAccess(req *wire.Request, need adminNeed, grantTenant []byte) bool {
	s := cs.s
	if identity.HasAdminToken(req, s.cfg.AdminToken) {
		return true
	}
	if s.auth.Mode() == identity.ModeNone {
		switch {
		case len(s.cfg.AdminToken) > 0:
			cs.out = s.appendError(cs.out, req.Head(0), errAdminToken)
			return false
		case !cs.loopback():
			cs.out = s.appendError(cs.out, req.Head(0), errProtected)
			return false
		case !s.cfg.Browsers.LoopbackHost(req):
			// A loopback client naming another host is how a web page
			// whose name was rebound to 127.0.0.1 arrives (D20).
			cs.out = s.appendError(cs.out, req.Head(0), crossorigin.ErrHostNotLoopback)
			return false
		}
		return true
	}
	tenant, level, werr := s.auth.Identify(req)
	if werr != nil {
		cs.out = s.appendError(cs.out, req.Head(0), werr)
		return false
	}
	if level != identity.Admin {
		cs.out = s.appendError(cs.out, req.Head(0), identity.ErrLevel)
		return false
	}
	if s.cfg.OperatorTenant != "" && tenant == s.cfg.OperatorTenant {
		return true
	}
	switch need {
	case needReadKillSwitch:
		return true
	case needReadGrant:
		if string(grantTenant) == tenant {
			return true
		}
		cs.out = s.appendError(cs.out, req.Head(0), errOtherGrant)
		return false
	}
	cs.out = s.appendError(cs.out, req.Head(0), errNotOperator)
	return false
}

// loopback reports whether the client connects from a loopback address
// (127.0.0.0/8, ::1, or either mapped into IPv6). gnet records the peer's
// address at accept; it is read on the connection's loop.
func (cs *conn) loopback() bool { return isLoopback(cs.c.RemoteAddr()) }

func isLoopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
