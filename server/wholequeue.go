package server

// The routes that change a queue as a whole, applied by every member to
// its own copy (appliedByAll in routes.go): configure, reset and delete.
// Configure and delete write the store first, off the loop (D16).

import (
	"context"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/wire"
)

// configure serves POST /api/v1/ephemeral/configure. The declaration is
// written to the store first, off the loop, and applied to memory second;
// a failed write changes nothing (docs/routes.md, configure; D9, D16, P1).
func (cs *conn) configure(req *wire.Request) {
	if err := cs.ls.conf.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	b := &cs.ls.conf
	sent := optionSet(b.Options)
	if err := sent.Validate(); err != nil {
		cs.refuse(req, err)
		return
	}
	tenant := cs.tenant
	if err := cs.s.e.CheckDeclare(tenant, bytesString(b.Queue)); err != nil {
		cs.refuse(req, err) // refused before anything is written (D14)
		return
	}
	queue := string(b.Queue)
	raw := append([]byte(nil), b.RawOptions...)
	head := req.Head(201)
	cs.goBusy()
	go func() {
		resp := cs.s.declare(head, tenant, queue, raw, sent)
		cs.answerAsync(resp)
	}()
}

// declare writes the declaration, applies it, and returns the whole answer.
func (s *Server) declare(head wire.Head, tenant, queue string, raw []byte, sent engine.OptionSet) []byte {
	s.sy.declMu.RLock() // store and memory change as one against a reconcile (sync.go)
	defer s.sy.declMu.RUnlock()
	stored := raw
	if len(stored) == 0 {
		stored = []byte("{}")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
	err := s.st.PutDeclaration(ctx, store.Declaration{Tenant: tenant, Queue: queue, Options: stored})
	cancel()
	if err != nil {
		s.cfg.Logger.Warn("configure: the declaration could not be written", "queue", queue, "err", err)
		return s.storeFailure(head, err, codeConfigureFailed, "the declaration could not be written")
	}
	if err := s.e.Configure(tenant, queue, sent); err == engine.ErrTenantQueues {
		// A concurrent creation took the last slot after CheckDeclare: take
		// the declaration back, so that what is stored is what is served.
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
		if _, derr := s.st.DeleteDeclaration(ctx, tenant, queue); derr != nil {
			s.cfg.Logger.Error("configure refused after the write; the declaration could not be taken back", "queue", queue, "err", derr)
		}
		cancel()
		return s.appendError(nil, head, refusal(err))
	} else if err != nil {
		return s.appendError(nil, head, refusal(err))
	}
	return wire.AppendResponse(nil, head, wire.AppendConfigured(nil, queue, raw))
}

// deleteQueue serves DELETE /api/v1/ephemeral/queue/:queue: the store is
// consulted first, off the loop; when it cannot answer, the answer is 500
// ephemeral_delete_failed and nothing changes (D16).
func (cs *conn) deleteQueue(req *wire.Request, name []byte) {
	if err := wire.CheckName("queue", name); err != nil {
		cs.refuse(req, err)
		return
	}
	tenant, access, queue, head := cs.tenant, cs.access, string(name), req.Head(200)
	cs.goBusy()
	go func() {
		s := cs.s
		s.sy.declMu.RLock() // store and memory change as one against a reconcile (sync.go)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
		declared, err := s.st.DeleteDeclaration(ctx, tenant, queue)
		cancel()
		if err != nil {
			s.sy.declMu.RUnlock()
			s.cfg.Logger.Warn("delete: the declaration could not be removed", "queue", queue, "err", err)
			cs.answerAsync(s.errorAnswer(head, 500, codeDeleteFailed, "the declaration could not be removed"))
			return
		}
		existed, _ := s.e.Delete(tenant, queue)
		s.sy.declMu.RUnlock()
		// Then the removal of contents fans out to the other live members
		// (D17; fanout.go): the contents live on the owner.
		res := s.fanOut(tenant, access, localDelete, queue)
		if !res.ownerDone {
			cs.answerAsync(s.appendError(nil, head, errOwnerNotReached))
			return
		}
		existed = existed || res.sum > 0
		body := wire.AppendDeleted(nil, queue, existed || declared, declared)
		cs.answerAsync(wire.AppendResponse(nil, head, body))
	}()
}

// reset serves POST /api/v1/ephemeral/reset: 200 {"queue","dropped"}, and
// dropped 0 for a queue that is not there (docs/routes.md, reset).
func (cs *conn) reset(req *wire.Request) {
	var b wire.QueueBody
	if err := b.Decode(req.Body); err != nil {
		cs.refuse(req, err)
		return
	}
	if cs.s.cell != nil {
		cs.resetCell(req, string(b.Queue))
		return
	}
	dropped, err := cs.s.e.Reset(cs.tenant, bytesString(b.Queue))
	if err != nil {
		cs.refuse(req, err)
		return
	}
	cs.ls.scratch = wire.AppendReset(cs.ls.scratch[:0], bytesString(b.Queue), dropped)
	cs.answer(req, 200, cs.ls.scratch)
}

// resetCell is reset in a cell (D17): this member's copy and, off the
// loop, every other live member's (fanout.go); dropped sums what the
// members that answered dropped. The owner not reached: 503
// ephemeral_forward_failed.
func (cs *conn) resetCell(req *wire.Request, queue string) {
	if err := wire.CheckName("queue", []byte(queue)); err != nil {
		cs.refuse(req, err)
		return
	}
	tenant, access, head := cs.tenant, cs.access, req.Head(200)
	cs.goBusy()
	go func() {
		s := cs.s
		dropped, err := s.e.Reset(tenant, queue)
		if err != nil {
			cs.answerAsync(s.appendError(nil, head, refusal(err)))
			return
		}
		res := s.fanOut(tenant, access, localReset, queue)
		if !res.ownerDone {
			cs.answerAsync(s.appendError(nil, head, errOwnerNotReached))
			return
		}
		cs.answerAsync(wire.AppendResponse(nil, head, wire.AppendReset(nil, queue, dropped+res.sum)))
	}()
}
