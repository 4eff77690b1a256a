package server

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/queenmq/ephemeral/link"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// The fan-out of reset and of delete's removal of contents (D17; docs/
// cell.md, "Reset and delete across members"). Admin verbs are not relayed
// to an owner: the member they land on applies them to its own copy and
// sends a member-local request to every other live member, which applies it
// to its own copy only (it is never fanned out again). The answer's dropped
// (reset) sums what the members that answered dropped; deleted (delete) is
// true when any of them, or the declaration, had the queue.
//
// A member-local request travels over the relay like a relayed push, with a
// target outside the public routes (localReset, localDelete) and the queue
// name as its body. Only a member that proved the cell secret can send one;
// no client request can name these targets. Its answer is not HTTP: the
// decimal count dropped (reset) or 1/0 for "the queue was there" (delete),
// or "!" and a message when the member refused it.
const (
	localReset  = "/cell/local/reset"
	localDelete = "/cell/local/delete"
)

// errOwnerNotReached answers a reset or delete whose queue's owner (in the
// landing member's view) could not be reached: its copy, the one holding
// the contents, may not have been emptied. Retrying is safe: both verbs
// are idempotent in outcome (the queue ends empty).
var errOwnerNotReached = &wire.Error{Status: 503, Code: codeForwardFailed, Msg: "the broker that owns the queue could not be reached; its contents may not have been removed"}

// fanOutResult is what the other live members answered.
type fanOutResult struct {
	sum       int64 // reset: messages dropped; delete: members that had the queue
	ownerDone bool  // the queue's owner in this member's view is this member or answered
	asked     int
	answered  int
}

// fanOut sends the member-local op (localReset or localDelete) of
// (tenant, queue) to every other live member of this member's current
// view and waits (at most RelayOptions.FanOutDeadline, the member timeout:
// a silent member is dropped from the cell, and what it owned moves, empty,
// within about that) for their answers; one that has not answered by then
// is counted as not reached. It runs off the event loop. In a cell of one
// (s.cell nil) it asks nobody and the owner is this member.
func (s *Server) fanOut(tenant string, access identity.Level, op, queue string) fanOutResult {
	c := s.cell
	if c == nil {
		return fanOutResult{ownerDone: true}
	}
	v := c.m.View()
	owner, hasOwner := v.Owner(tenant, queue)
	res := fanOutResult{ownerDone: hasOwner && v.IsSelf(owner)}
	ctx, cancel := context.WithTimeout(context.Background(), c.FanOutDeadline)
	defer cancel()
	rr := link.Request{Tenant: []byte(tenant), Access: uint8(access), Method: []byte("POST"), Target: []byte(op), Body: []byte(queue)}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, m := range v.Members {
		if v.IsSelf(m) {
			continue
		}
		id := m.ID
		isOwner := hasOwner && owner.ID == id
		res.asked++
		wg.Add(1)
		err := c.rc.Go(ctx, id, &rr, func(r link.Response, err error) {
			defer wg.Done()
			if err == nil {
				var n int64
				n, err = parseLocalAnswer(r.Raw)
				if err == nil {
					mu.Lock()
					res.sum += n
					res.answered++
					res.ownerDone = res.ownerDone || isOwner
					mu.Unlock()
					return
				}
			}
			s.cfg.Logger.Warn("cell: a member did not apply "+op, "member", id, "queue", queue, "err", err)
		})
		if err != nil {
			wg.Done()
			s.cfg.Logger.Warn("cell: a member could not be asked to apply "+op, "member", id, "queue", queue, "err", err)
		}
	}
	wg.Wait()
	return res
}

// parseLocalAnswer reads a member-local answer (see localReset).
func parseLocalAnswer(raw []byte) (int64, error) {
	if len(raw) > 0 && raw[0] == '!' {
		return 0, errors.New(string(raw[1:]))
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

// serveLocal serves a member-local reset or delete sent by another
// member's fan-out: it applies it to this member's copy only, whatever
// this member owns. It reports false for a target that is not one.
func (s *Server) serveLocal(rq *link.Request, reply func(link.Response)) bool {
	op := string(rq.Target)
	if op != localReset && op != localDelete {
		return false
	}
	if !identity.Level(rq.Access).Allows(identity.ReadWrite) {
		reply(link.Response{Raw: []byte("!access level below read-write")})
		return true
	}
	tenant, queue := string(rq.Tenant), string(rq.Body)
	if op == localReset {
		n, err := s.e.Reset(tenant, queue)
		replyLocal(reply, n, err)
		return true
	}
	// A delete is held like a local delete's memory change, so that it
	// does not land inside a reconcile (sync.go). A reconcile holds declMu
	// across its store reads, and the relay calls this on an event loop,
	// which must not block (P1): the other requests of the loop, relayed or
	// not, would wait too. So the delete waits on a goroutine of its own and
	// replies from there (reply may be called from any goroutine).
	go func() {
		s.sy.declMu.RLock()
		existed, err := s.e.Delete(tenant, queue)
		s.sy.declMu.RUnlock()
		var n int64
		if existed {
			n = 1
		}
		replyLocal(reply, n, err)
	}()
	return true
}

// replyLocal sends a member-local answer: the count, or "!" and the error.
func replyLocal(reply func(link.Response), n int64, err error) {
	if err != nil {
		reply(link.Response{Raw: append([]byte("!"), err.Error()...)})
		return
	}
	reply(link.Response{Raw: strconv.AppendInt(nil, n, 10)})
}
