package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous"
	"github.com/queenmq/ephemeral/client"
)

// ownedBy answers a queue name that ids' cell gives to owner.
func ownedBy(t *testing.T, prefix, owner string, ids []string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if q := prefix + strconv.Itoa(i); rendezvous.OwnerOf(ids, "default", q) == owner {
			return q
		}
	}
	t.Fatalf("no queue owned by %s", owner)
	return ""
}

// TestMergeCellListing merges three members' listings: each queue once,
// from its owner (a declared queue's zeros elsewhere ignored, whichever
// member is read first), an implicit queue listed only by a member the
// view does not name as owner (ownership moving) kept with that member,
// and a member that did not answer left out with its queues.
func TestMergeCellListing(t *testing.T) {
	ids := []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	v := &client.CellView{Generation: 9, Tenant: "default", Self: ids[0]}
	for _, id := range ids {
		v.Members = append(v.Members, client.CellMember{ID: id, URL: "http://" + id})
	}
	q1, q2, q3 := ownedBy(t, "a", ids[0], ids), ownedBy(t, "b", ids[1], ids), ownedBy(t, "c", ids[2], ids)
	d3, moved := ownedBy(t, "decl", ids[2], ids), ownedBy(t, "moved", ids[2], ids)
	row := func(q, tier string, depth int) client.QueueInfo {
		return client.QueueInfo{Queue: q, Tier: tier, Depth: depth}
	}
	listings := []*client.QueuesResult{
		{Queues: []client.QueueInfo{row(q1, "implicit", 1), row(d3, "declared", 0)}, CellBytes: 100},
		{Queues: []client.QueueInfo{row(q2, "implicit", 2), row(d3, "declared", 0), row(moved, "implicit", 7)}, CellBytes: 200},
		{Queues: []client.QueueInfo{row(d3, "declared", 4), row(q3, "implicit", 3)}, CellBytes: 300},
	}
	got := func(l *cellQueues) string {
		var b strings.Builder
		for _, q := range l.Queues {
			b.WriteString(q.Queue + "@" + q.Owner + "=" + strconv.Itoa(q.Depth) + " ")
		}
		return strings.TrimSpace(b.String())
	}
	want := func(rows ...string) string {
		// The merged rows are sorted by queue name.
		for i := 1; i < len(rows); i++ {
			for j := i; j > 0 && rows[j] < rows[j-1]; j-- {
				rows[j], rows[j-1] = rows[j-1], rows[j]
			}
		}
		return strings.Join(rows, " ")
	}

	l := merge(v, listings, make([]error, 3))
	if w := want(q1+"@"+ids[0]+"=1", q2+"@"+ids[1]+"=2", q3+"@"+ids[2]+"=3", d3+"@"+ids[2]+"=4", moved+"@"+ids[1]+"=7"); got(l) != w {
		t.Fatalf("merged\n%s\nwant\n%s", got(l), w)
	}
	if l.Count != 5 || l.CellBytes != 600 || l.Generation != 9 || len(l.missing()) != 0 {
		t.Fatalf("count %d, cellBytes %d, generation %d, missing %v; want 5, 600, 9, none", l.Count, l.CellBytes, l.Generation, l.missing())
	}

	// The owner lists the moving queue too: its row wins, though read last.
	listings[2].Queues = append(listings[2].Queues, row(moved, "implicit", 9))
	if l = merge(v, listings, make([]error, 3)); !strings.Contains(got(l), moved+"@"+ids[2]+"=9") || l.Count != 5 {
		t.Fatalf("the owner's row of %s not taken: %s", moved, got(l))
	}

	// The third member does not answer: its queues, and the declared
	// queue it owns, are left out (the others' zeros would mislead).
	errs := []error{nil, nil, errors.New("connection refused")}
	l = merge(v, []*client.QueuesResult{listings[0], listings[1], nil}, errs)
	if w := want(q1+"@"+ids[0]+"=1", q2+"@"+ids[1]+"=2", moved+"@"+ids[1]+"=7"); got(l) != w {
		t.Fatalf("merged without the third\n%s\nwant\n%s", got(l), w)
	}
	if m := l.missing(); len(m) != 1 || m[0].ID != ids[2] || m[0].Error != "connection refused" || l.CellBytes != 300 {
		t.Fatalf("missing %+v, cellBytes %d; want the third member, 300", m, l.CellBytes)
	}

	// top's frame of it: OWNER second, the members that answered in the
	// title, the one that did not in the error line.
	var st topState
	st.setCell(l, time.Time{}, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st.url, st.at = "http://10.0.0.1:6632", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lines := strings.Split(renderTop(st, 200, 10), "\n")
	if want := "queenctl top  http://10.0.0.1:6632  03:04:05  3 queues  2/3 members  cell 300 bytes  kill switch: ?"; lines[0] != want {
		t.Fatalf("title %q, want %q", lines[0], want)
	}
	if want := "error: not answering (queues not shown): " + ids[2] + ": connection refused"; lines[1] != want {
		t.Fatalf("error line %q, want %q", lines[1], want)
	}
	if h := strings.Fields(lines[2]); len(h) < 3 || h[0] != "QUEUE▲" || h[1] != "OWNER" || h[2] != "TIER" {
		t.Fatalf("header %q, want QUEUE▲ OWNER TIER ...", lines[2])
	}
	owners := map[string]string{q1: ids[0], q2: ids[1], moved: ids[1]}
	for _, line := range lines[3:6] {
		if f := strings.Fields(line); len(f) < 2 || owners[f[0]] != f[1] {
			t.Fatalf("row %q, want its owner second (%v)", line, owners)
		}
	}
}
