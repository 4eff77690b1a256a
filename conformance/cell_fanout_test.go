package conformance

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestCellResetAndDeleteFanOut: reset and delete's removal of contents
// reach the owner's copy wherever they land (D17; docs/cell.md, "Reset and
// delete across members"). A queue owned by C, pushed to through A: a reset
// on B empties it and counts what C dropped; a delete on A of a declared
// queue owned by C removes its contents and, within a heartbeat, its
// declaration on every member.
func TestCellResetAndDeleteFanOut(t *testing.T) {
	t.Parallel()
	c := newTestCell(t)
	a, b, cc := c.start(advertise(t), nil), c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b, cc)
	c.waitLive(all...)

	// reset on B of C's queue, pushed through A.
	q := queueOwnedBy(t, "fanreset", cc.id, all...)
	a.push(t, q, "", `1`, `2`, `3`)
	var rs struct {
		Queue   string `json:"queue"`
		Dropped *int64 `json:"dropped"`
	}
	b.do(t, "POST", "/api/v1/ephemeral/reset", map[string]any{"queue": q}).want(t, 200, &rs)
	if rs.Queue != q || rs.Dropped == nil || *rs.Dropped != 3 {
		t.Fatalf("reset on B of C's queue: queue %q dropped %v, want 3", rs.Queue, fmtDropped(rs.Dropped))
	}
	if got := a.pop(t, popq{"queue": q, "batch": "10"}).payloads(); len(got) != 0 {
		t.Fatalf("after the reset on B, a pop on A got %v", got)
	}
	// A second reset finds nothing anywhere.
	a.do(t, "POST", "/api/v1/ephemeral/reset", map[string]any{"queue": q}).want(t, 200, &rs)
	if *rs.Dropped != 0 {
		t.Fatalf("second reset dropped %d, want 0", *rs.Dropped)
	}

	// delete on A of a declared queue owned by C, holding messages.
	d := queueOwnedBy(t, "fandelete", cc.id, all...)
	a.do(t, "POST", "/api/v1/ephemeral/configure", map[string]any{"queue": d, "options": map[string]any{"maxLength": 100}}).want(t, 201, nil)
	b.push(t, d, "", `"x"`, `"y"`)
	waitDepth(t, []*member{a, b, cc}, d, 200) // declared everywhere
	var del struct {
		Deleted  bool `json:"deleted"`
		Declared bool `json:"declared"`
	}
	a.do(t, "DELETE", "/api/v1/ephemeral/queue/"+d, nil).want(t, 200, &del)
	if !del.Deleted || !del.Declared {
		t.Fatalf("delete on A: %+v, want deleted and declared", del)
	}
	// The contents went with it on the owner (no wait: the answer came
	// after C removed them), and the declaration leaves every member
	// within a heartbeat: the depth read is 404 everywhere.
	if r := cc.do(t, "GET", "/api/v1/ephemeral/queues/"+d+"/depth", nil); r.Status != 404 {
		t.Fatalf("depth on the owner C right after the delete: %s, want 404", r)
	}
	waitDepth(t, []*member{a, b, cc}, d, 404)
	if got := b.pop(t, popq{"queue": d, "batch": "10"}).payloads(); len(got) != 0 {
		t.Fatalf("after the delete, a pop on B got %v", got)
	}

	// A grant's byte allowance holds cell-wide, each member enforcing its
	// share: 300 KB over three members is 100 KB on B, the owner of qg.
	// Pushes of 10 KB landing on A are refused (403
	// ephemeral_quota_exceeded) once B holds at most its share, well below
	// the whole allowance.
	const allowance, msg = 300_000, 10_000
	a.do(t, "PUT", "/api/v1/system/ephemeral/grants/default", `{"maxBytes":300000}`).want(t, 200, nil)
	time.Sleep(3 * brokertest.CellHeartbeatMS * time.Millisecond) // the grant reaches B (by NOTIFY in milliseconds; every heartbeat at worst)
	qg := queueOwnedBy(t, "fangrant", b.id, all...)
	payload := `"` + strings.Repeat("x", msg) + `"`
	accepted := 0
	for {
		r := a.do(t, "POST", "/api/v1/ephemeral/push", pushBody(qg, "", payload))
		if r.Status != 201 {
			r.wantErr(t, 403, "ephemeral_quota_exceeded")
			break
		}
		if accepted++; accepted*msg > allowance {
			t.Fatalf("B accepted %d bytes under a %d-byte grant on a cell of three", accepted*msg, allowance)
		}
	}
	if accepted == 0 || accepted*msg > allowance/3 {
		t.Fatalf("B accepted %d messages of %d bytes; its share is %d bytes", accepted, msg, allowance/3)
	}
	t.Logf("B accepted %d messages of %d bytes under its share of %d", accepted, msg, allowance/3)
	a.do(t, "DELETE", "/api/v1/ephemeral/queue/"+qg, nil).want(t, 200, nil)

	// A grant's queue allowance: declared queues bounded by the whole grant
	// (every member holds them), each member's implicit queues by its share
	// of the rest (docs/cell.md, "Tenant allowances across members"). 4
	// queues, 1 declared, three members: (4 - 1) / 3 = 1 implicit queue on
	// B (4 / 3 = 1 too while the declaration is on its way to B), so the
	// second queue owned by B that a push through A creates is refused; and
	// declarations go on up to the whole 4.
	a.do(t, "PUT", "/api/v1/system/ephemeral/grants/default", `{"maxQueues":4}`).want(t, 200, nil)
	time.Sleep(3 * brokertest.CellHeartbeatMS * time.Millisecond) // the grant reaches B
	a.do(t, "POST", "/api/v1/ephemeral/configure", map[string]any{"queue": "fanqdecl-1"}).want(t, 201, nil)
	a.push(t, queueOwnedBy(t, "fanqa", b.id, all...), "", `1`)
	a.do(t, "POST", "/api/v1/ephemeral/push", pushBody(queueOwnedBy(t, "fanqb", b.id, all...), "", `1`)).wantErr(t, 403, "ephemeral_quota_exceeded")
	for i := 2; i <= 4; i++ {
		a.do(t, "POST", "/api/v1/ephemeral/configure", map[string]any{"queue": "fanqdecl-" + strconv.Itoa(i)}).want(t, 201, nil)
	}
	a.do(t, "POST", "/api/v1/ephemeral/configure", map[string]any{"queue": "fanqdecl-5"}).wantErr(t, 403, "ephemeral_quota_exceeded")
	a.do(t, "DELETE", "/api/v1/system/ephemeral/grants/default", nil).want(t, 200, nil)
	time.Sleep(3 * brokertest.CellHeartbeatMS * time.Millisecond) // B drops the grant: with 4 declared, its implicit share is none

	// The owner unreachable (killed, not yet dropped from the views): its
	// copy could not be emptied, so the answer is 503
	// ephemeral_forward_failed (our decision: docs/cell.md). A queue owned
	// by B still answers 200: an unreachable member that does not own the
	// queue holds nothing of it.
	cc.kill(t)
	r := a.do(t, "POST", "/api/v1/ephemeral/reset", map[string]any{"queue": q})
	r.wantErr(t, 503, "ephemeral_forward_failed")
	if ra := r.Header.Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After on 503 ephemeral_forward_failed: %q, want 1", ra)
	}
	qb := queueOwnedBy(t, "fanresetb", b.id, all...)
	a.push(t, qb, "", `1`)
	a.do(t, "POST", "/api/v1/ephemeral/reset", map[string]any{"queue": qb}).want(t, 200, &rs)
	if *rs.Dropped != 1 {
		t.Fatalf("reset of B's queue with C down: dropped %d, want 1", *rs.Dropped)
	}
}

// waitDepth waits (up to 2 s) until the depth read of queue answers status
// on every member.
func waitDepth(t *testing.T, ms []*member, queue string, status int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, m := range ms {
		for {
			r := m.do(t, "GET", "/api/v1/ephemeral/queues/"+queue+"/depth", nil)
			if r.Status == status {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: depth of %s answers %s, want %d", m.id, queue, r, status)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// fmtDropped shows an answer's dropped field, or that it was missing.
func fmtDropped(p *int64) string {
	if p == nil {
		return "missing"
	}
	return strconv.FormatInt(*p, 10)
}
