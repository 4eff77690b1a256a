package conformance

// queenctl queues and top on a cell (docs/cli.md, "A cell"): given one
// member's URL they read the view and every member's listing, and show each
// queue once with its owner; a member that does not answer is named on
// stderr and the rest is shown, exit status 5. A single broker's output is
// unchanged (cmd/queenctl's TestMessagesAndGauges asserts its header).

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// ctlRun is one run of queenctl.
type ctlRun struct {
	stdout, stderr string
	code           int
}

// runCtl runs queenctl against url with args, without the caller's QUEEN_
// variables.
func runCtl(t *testing.T, url string, args ...string) ctlRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, brokertest.Binary(t, "./cmd/queenctl"), append([]string{"--url", url}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "QUEEN_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := ctlRun{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("queenctl %v: %v", args, err)
	}
	return r
}

// ctlCellListing is `queenctl queues --json` on a cell.
type ctlCellListing struct {
	Queues []struct {
		Queue string `json:"queue"`
		Tier  string `json:"tier"`
		Depth int    `json:"depth"`
		Owner string `json:"owner"`
	} `json:"queues"`
	Count      int    `json:"count"`
	Generation uint64 `json:"generation"`
	Members    []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"members"`
}

// rowsOf answers a table's data rows (header and footer cut) by queue name,
// failing on a queue listed twice.
func rowsOf(t *testing.T, table string) (header string, rows map[string][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	rows = map[string][]string{}
	for _, l := range lines[1 : len(lines)-1] {
		f := strings.Fields(l)
		if _, dup := rows[f[0]]; dup {
			t.Fatalf("queue %s listed twice:\n%s", f[0], table)
		}
		rows[f[0]] = f
	}
	return strings.Join(strings.Fields(lines[0]), " "), rows
}

// Three members, an implicit queue owned by each and a declared one owned
// by the third: the listing given any member shows each queue once, with
// its owner and its owner's contents (the declared queue is listed by every
// member, with zero contents where another owns it).
func TestQueenctlCellListing(t *testing.T) {
	t.Parallel()
	c := newSteadyTestCell(t)
	a, b, cc := c.start(advertise(t), nil), c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b, cc)
	c.waitLive(all...)

	want := map[string]struct {
		owner, tier string
		depth       int
	}{}
	for i, m := range []*member{a, b, cc} {
		q := queueOwnedBy(t, "listed"+strconv.Itoa(i), m.id, all...)
		pl := make([]string, i+1)
		for j := range pl {
			pl[j] = strconv.Itoa(j)
		}
		m.push(t, q, "", pl...)
		want[q] = struct {
			owner, tier string
			depth       int
		}{m.id, "implicit", i + 1}
	}
	decl := queueOwnedBy(t, "declared", cc.id, all...)
	a.do(t, "POST", "/api/v1/ephemeral/configure", map[string]any{"queue": decl, "options": map[string]any{"maxLength": 100}}).want(t, 201, nil)
	cc.push(t, decl, "", "1", "2", "3", "4")
	want[decl] = struct {
		owner, tier string
		depth       int
	}{cc.id, "declared", 4}

	// The declaration reaches every member within a heartbeat or so: wait
	// for the listing that shows it from every member's side.
	var list ctlCellListing
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runCtl(t, b.url(""), "queues", "--json")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("queues --json: exit %d, stderr %q", r.code, r.stderr)
		}
		list = ctlCellListing{}
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
			t.Fatalf("queues --json: %v\n%s", err, r.stdout)
		}
		ok := list.Count == len(want) && len(list.Queues) == len(want) && len(list.Members) == 3
		for _, q := range list.Queues {
			w, listed := want[q.Queue]
			ok = ok && listed && q.Owner == w.owner && q.Tier == w.tier && q.Depth == w.depth
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queues --json through %s: %s\nwant %v", b.id, r.stdout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if list.Generation == 0 {
		t.Fatalf("queues --json: generation 0 on a cell")
	}

	// The table, given each member: the same rows, the OWNER column.
	for _, m := range []*member{a, b, cc} {
		r := runCtl(t, m.url(""), "queues")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("queues via %s: exit %d, stderr %q", m.id, r.code, r.stderr)
		}
		header, rows := rowsOf(t, r.stdout)
		if header != "QUEUE OWNER TIER DEPTH BYTES PARTITIONS GROUPS DROPS(BOUNDS/TTL/RETRY)" {
			t.Fatalf("queues via %s: header %q", m.id, header)
		}
		if len(rows) != len(want) {
			t.Fatalf("queues via %s: %d rows, want %d:\n%s", m.id, len(rows), len(want), r.stdout)
		}
		for q, w := range want {
			f := rows[q]
			if f == nil || f[1] != w.owner || f[2] != w.tier || f[3] != strconv.Itoa(w.depth) {
				t.Fatalf("queues via %s: row of %s %q, want owner %s, %s, depth %d\n%s", m.id, q, f, w.owner, w.tier, w.depth, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "4 queues on 3 of 3 members") {
			t.Fatalf("queues via %s: footer:\n%s", m.id, r.stdout)
		}
	}

	// --member-only: a's own listing as before: its implicit queue, the
	// declared one with a's zero contents, no OWNER column.
	r := runCtl(t, a.url(""), "queues", "--member-only")
	header, rows := rowsOf(t, r.stdout)
	if r.code != 0 || header != "QUEUE TIER DEPTH BYTES PARTITIONS GROUPS DROPS(BOUNDS/TTL/RETRY)" || len(rows) != 2 ||
		rows[decl] == nil || rows[decl][2] != "0" {
		t.Fatalf("queues --member-only via %s: exit %d\n%s", a.id, r.code, r.stdout)
	}

	// top --once: the cell's rows with owners, every member answering.
	r = runCtl(t, cc.url(""), "top", "--once", "--width", "300")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "3/3 members") {
		t.Fatalf("top --once via %s: exit %d, stderr %q\n%s", cc.id, r.code, r.stderr, r.stdout)
	}
	lines := strings.Split(r.stdout, "\n")
	if h := strings.Fields(lines[2]); len(h) < 2 || h[1] != "OWNER" {
		t.Fatalf("top --once: header %q, want OWNER second", lines[2])
	}
	for q, w := range want {
		found := false
		for _, l := range lines[3:] {
			f := strings.Fields(l)
			if len(f) > 3 && f[0] == q {
				found = f[1] == w.owner && f[3] == strconv.Itoa(w.depth)
			}
		}
		if !found {
			t.Fatalf("top --once: no row %s owned by %s with depth %d:\n%s", q, w.owner, w.depth, r.stdout)
		}
	}
}

// A member whose published URL nothing listens at: given the other
// member, the listing names it on stderr, shows the rest, and exits 5;
// given that member's own (real) URL, the CLI reads it there, and both
// answer.
func TestQueenctlCellMemberNotAnswering(t *testing.T) {
	t.Parallel()
	c := newSteadyTestCell(t)
	closed := "http://127.0.0.1:" + strconv.Itoa(brokertest.Port(t))
	a := c.start(advertise(t), nil)
	b := c.start(advertise(t), map[string]string{"QUEEN_CELL_PUBLIC_URL": closed})
	all := ids(a, b)
	c.waitLive(all...)
	qa, qb := queueOwnedBy(t, "here", a.id, all...), queueOwnedBy(t, "there", b.id, all...)
	a.push(t, qa, "", "1")
	b.push(t, qb, "", "1", "2")

	r := runCtl(t, a.url(""), "queues")
	if r.code != 5 || !strings.Contains(r.stderr, "warning: member "+b.id+" ("+closed+") did not answer") ||
		!strings.Contains(r.stderr, "warning: the listing lacks 1 of the cell's 2 members") {
		t.Fatalf("queues via %s: exit %d, stderr %q; want 5 and a warning naming %s", a.id, r.code, r.stderr, b.id)
	}
	_, rows := rowsOf(t, r.stdout)
	if len(rows) != 1 || rows[qa] == nil || rows[qa][1] != a.id || !strings.Contains(r.stdout, "1 queues on 1 of 2 members") {
		t.Fatalf("queues via %s: want %s alone, owned by %s:\n%s", a.id, qa, a.id, r.stdout)
	}

	r = runCtl(t, a.url(""), "top", "--once")
	if r.code != 5 || !strings.Contains(r.stdout, "1/2 members") || !strings.Contains(r.stdout, "not answering (queues not shown): "+b.id) {
		t.Fatalf("top --once via %s: exit %d, stderr %q\n%s", a.id, r.code, r.stderr, r.stdout)
	}

	r = runCtl(t, b.url(""), "queues")
	_, rows = rowsOf(t, r.stdout)
	if r.code != 0 || r.stderr != "" || len(rows) != 2 || rows[qb] == nil || rows[qb][1] != b.id || rows[qb][3] != "2" {
		t.Fatalf("queues via %s (its own URL): exit %d, stderr %q\n%s", b.id, r.code, r.stderr, r.stdout)
	}
}
