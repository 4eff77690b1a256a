package brokertest

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/rendezvous"
)

// The cell's timings for tests: a heartbeat of 100 ms, a member timeout of
// one second, so that a member that leaves is out of every view within
// about a second.
const (
	CellHeartbeatMS     = 100
	CellMemberTimeoutMS = 1000
)

// SteadyCellTimings is the extra environment (NewCell's env, or Env's
// extra) for a cell whose test stops no member but cleanly (a clean stop
// deletes the member's row: the others see it go at once): the tests'
// heartbeat with a member timeout of 5 s instead of 1 s. Detecting a dead
// member quickly is what the short timeout buys, and such a test has none;
// what it costs is a member fenced whenever a loaded machine stalls one
// heartbeat for a second, which a CI run on two cores did
// (TestQueenctlCellMemberNotAnswering's member fenced, and the listing
// through it then had no member to read).
func SteadyCellTimings() map[string]string {
	return map[string]string{"QUEEN_CELL_MEMBER_TIMEOUT_MS": "5000"}
}

// MeasuredCellTimings is the extra environment (Env's extra) that gives a
// member the broker's default heartbeat and member timeout instead of the
// tests' short ones. Cost measurements run cells at it: the membership's
// own cost is part of what they measure, and at the tests' timings (ten
// heartbeats a second) it is ten times what a cell pays.
func MeasuredCellTimings() map[string]string {
	return map[string]string{
		"QUEEN_CELL_HEARTBEAT_MS":      strconv.FormatInt(cell.DefaultHeartbeat.Milliseconds(), 10),
		"QUEEN_CELL_MEMBER_TIMEOUT_MS": strconv.FormatInt(cell.DefaultMemberTimeout.Milliseconds(), 10),
	}
}

// StoreAcquireTimeoutMS is how long a test broker's store waits for a
// PostgreSQL connection (QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS; 2000 by
// default). A package's brokers share one test PostgreSQL, which starts a
// backend for each connection one at a time, at 20 ms or more of a busy
// two-core machine's CPU each: members starting in several cells at once
// under CI's load once kept a configure waiting past 2 s. The cell tests
// are not about that bound; a test that is sets its own.
const StoreAcquireTimeoutMS = 10000

// Cell is the brokers of one cell (D17, docs/cell.md) on one PostgreSQL
// schema: the environment each member starts with, and the members
// started, whose views WaitLive reads. Starting a member is the caller's
// (each suite starts brokers its own way): Env, then Add.
type Cell struct {
	url    string
	schema string
	env    map[string]string

	mu      sync.Mutex
	members map[string]*Broker // by advertised address, the last added with it
}

// NewCell is a cell whose members keep their store and their member table
// in schema of the PostgreSQL server at dbURL, each started with env too
// (QUEEN_CELL_SECRET, the auth mode, ...).
func NewCell(dbURL, schema string, env map[string]string) *Cell {
	return &Cell{url: dbURL, schema: schema, env: env, members: map[string]*Broker{}}
}

// Advertise is a free loopback address for a member's relay, what it
// advertises (QUEEN_CELL_ADVERTISE) and so its id in the cell.
func Advertise(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(Port(t))
}

// Env is the environment of the member advertising id: the cell's store
// and schema, the test timings (StoreAcquireTimeoutMS too), the cell's
// env, then extra, which wins.
func (c *Cell) Env(id string, extra map[string]string) map[string]string {
	env := map[string]string{
		"QUEEN_DATABASE_URL":           c.url,
		"QUEEN_DATABASE_SCHEMA":        c.schema,
		"QUEEN_CELL_ADVERTISE":         id,
		"QUEEN_CELL_HEARTBEAT_MS":      strconv.Itoa(CellHeartbeatMS),
		"QUEEN_CELL_MEMBER_TIMEOUT_MS": strconv.Itoa(CellMemberTimeoutMS),
		// The shared test PostgreSQL may be slow to hand out a connection.
		"QUEEN_DATABASE_ACQUIRE_TIMEOUT_MS": strconv.Itoa(StoreAcquireTimeoutMS),
	}
	maps.Copy(env, c.env)
	maps.Copy(env, extra)
	return env
}

// Add records b, started with Env(id, ...), as the member advertising id
// (in place of any before it with that id), so that WaitLive reads its
// view.
func (c *Cell) Add(id string, b *Broker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[id] = b
}

// WaitLive waits (20 s at most) until exactly ids are the live rows of the
// cell's member table and every one of those members this cell added
// counts exactly len(ids) members in its view and is not fenced (GET
// /health's "cell"): the table shows a change a heartbeat or more before a
// member's view does, longer on a loaded machine. It fails t otherwise.
func (c *Cell) WaitLive(t testing.TB, ids ...string) {
	t.Helper()
	want := slices.Sorted(slices.Values(ids))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	q := "SELECT member FROM " + pgx.Identifier{c.schema, "cell_members"}.Sanitize() + " WHERE expires_at > now() ORDER BY member"
	var live []string
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, q)
		if err == nil {
			live, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err == nil && slices.Equal(live, want) && c.viewsHold(ctx, want) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("the cell's live members are %v, want %v, each counting them all in its view", live, want)
}

// viewsHold waits (within ctx) until every member of ids this cell added
// counts len(ids) members in its view and is not fenced; false when ctx
// ends first.
func (c *Cell) viewsHold(ctx context.Context, ids []string) bool {
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, id := range ids {
		c.mu.Lock()
		b := c.members[id]
		c.mu.Unlock()
		if b == nil {
			continue
		}
		for !viewHolds(ctx, probe, b.URL(), len(ids)) {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return true
}

// viewHolds is GET /health at base answering a cell of n members, not
// fenced.
func viewHolds(ctx context.Context, probe *http.Client, base string, n int) bool {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := probe.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Cell *struct {
			Members int  `json:"members"`
			Fenced  bool `json:"fenced"`
		} `json:"cell"`
	}
	return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&h) == nil &&
		h.Cell != nil && h.Cell.Members == n && !h.Cell.Fenced
}

// QueueOwnedBy is a queue name, prefix-N, that a cell whose live set is
// ids gives to owner for tenant (the cell's rendezvous function,
// docs/cell.md): so a test knows which requests are relayed.
func QueueOwnedBy(t testing.TB, ids []string, tenant, prefix, owner string) string {
	t.Helper()
	for i := range 10000 {
		q := prefix + "-" + strconv.Itoa(i)
		if rendezvous.OwnerOf(ids, tenant, q) == owner {
			return q
		}
	}
	t.Fatalf("no queue %s-N owned by %s among %v", prefix, owner, ids)
	return ""
}
