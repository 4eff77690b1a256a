package server

// The system routes (D15), under /api/v1/system/ephemeral: the kill switch
// (GET, POST) and the grants (GET, PUT, DELETE .../grants/:tenant). Who may
// use which is the admin scope (adminscope.go).

import (
	"bytes"
	"context"

	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/wire"
)

const (
	systemPath = "/api/v1/system/ephemeral"
	grantsPath = systemPath + "/grants/"
)

// routeSystem serves the system routes (D15). Who may use which is the
// admin scope (adminAccess; docs/server.md, "Admin scope").
func (cs *conn) routeSystem(req *wire.Request, path []byte) {
	if bytes.Equal(path, []byte(systemPath)) {
		cs.reqRoute = routeSystem
		if req.Method != wire.MethodGet && req.Method != wire.MethodPost {
			head := req.Head(0)
			head.Extra = []byte("Allow: GET, POST\r\n")
			cs.out = cs.s.appendError(cs.out, head, errMethod)
			return
		}
		need := needReadKillSwitch
		if req.Method == wire.MethodPost {
			need = needOperator
		}
		if !cs.adminAccess(req, need, nil) {
			return
		}
		if req.Method == wire.MethodPost {
			cs.setKillSwitch(req)
		} else {
			cs.answerKillSwitch(req, cs.s.killSwitch())
		}
		return
	}
	if !bytes.HasPrefix(path, []byte(grantsPath)) {
		cs.refuse(req, errNoRoute)
		return
	}
	cs.reqRoute = routeGrants
	seg := path[len(grantsPath):]
	if len(seg) == 0 || bytes.IndexByte(seg, '/') >= 0 {
		cs.refuse(req, errNoRoute)
		return
	}
	if req.Method != wire.MethodGet && req.Method != wire.MethodPut && req.Method != wire.MethodDelete {
		head := req.Head(0)
		head.Extra = []byte("Allow: GET, PUT, DELETE\r\n")
		cs.out = cs.s.appendError(cs.out, head, errMethod)
		return
	}
	name := req.PathUnescape(seg)
	need := needOperator // PUT and DELETE: a tenant may not raise (or lift) its own allowance
	if req.Method == wire.MethodGet {
		need = needReadGrant
	}
	if !cs.adminAccess(req, need, name) {
		return
	}
	if err := wire.CheckName("tenant", name); err != nil {
		cs.out = cs.s.appendError(cs.out, req.Head(0), &wire.Error{Status: 400, Code: codeSystemBadRequest, Msg: err.Msg})
		return
	}
	cs.grant(req, string(name))
}

// setKillSwitch serves POST /api/v1/system/ephemeral: the body is applied
// at once (Server.setKillSwitch) and answered as the state in force.
func (cs *conn) setKillSwitch(req *wire.Request) {
	var b wire.KillSwitchBody
	if err := b.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	k := store.KillSwitch{Enabled: b.Enabled, RetryAfterSeconds: b.RetryAfterSeconds}
	cs.s.setKillSwitch(k)
	cs.answerKillSwitch(req, k)
}

func (cs *conn) answerKillSwitch(req *wire.Request, k store.KillSwitch) {
	cs.ls.scratch = wire.AppendKillSwitch(cs.ls.scratch[:0], k.Enabled, k.RetryAfterSeconds)
	cs.answer(req, 200, cs.ls.scratch)
}

// grant serves GET, PUT and DELETE of /api/v1/system/ephemeral/grants/:tenant:
// the store is called off the loop (P1), and memory follows a successful
// write.
func (cs *conn) grant(req *wire.Request, tenant string) {
	var body wire.GrantBody
	if req.Method == wire.MethodPut {
		if err := body.Decode(req.Body); err != nil {
			cs.refuse(req, err)
			return
		}
	}
	method, head := req.Method, req.Head(200)
	cs.goBusy()
	go func() {
		s := cs.s
		s.grantMu.Lock() // one grant change at a time: store and memory agree
		defer s.grantMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
		defer cancel()
		switch method {
		case wire.MethodGet:
			g, found, err := s.st.GetGrant(ctx, tenant)
			if err != nil {
				cs.answerAsync(s.storeFailure(head, err, codeInternal, "the store call failed"))
			} else if !found {
				cs.answerAsync(s.errorAnswer(head, 404, codeGrantNotFound, "the tenant has no grant"))
			} else {
				cs.answerAsync(wire.AppendResponse(nil, head, appendGrant(nil, g)))
			}
		case wire.MethodPut:
			g := store.Grant{Tenant: tenant, MaxBytes: body.MaxBytes, MaxQueues: body.MaxQueues, MessagesPerSecond: body.MessagesPerSecond}
			if err := s.st.PutGrant(ctx, g); err != nil {
				cs.answerAsync(s.storeFailure(head, err, codeInternal, "the store call failed"))
				return
			}
			s.setGrantLocked(tenant, &g)
			cs.answerAsync(wire.AppendResponse(nil, head, appendGrant(nil, g)))
		default:
			existed, err := s.st.DeleteGrant(ctx, tenant)
			if err != nil {
				cs.answerAsync(s.storeFailure(head, err, codeInternal, "the store call failed"))
				return
			}
			s.setGrantLocked(tenant, nil)
			b := wire.AppendGrantDeleted(nil, tenant, existed)
			cs.answerAsync(wire.AppendResponse(nil, head, b))
		}
	}()
}

// appendGrant appends g's answer body.
func appendGrant(b []byte, g store.Grant) []byte {
	return wire.AppendGrant(b, g.Tenant, g.MaxBytes, g.MaxQueues, g.MessagesPerSecond)
}
