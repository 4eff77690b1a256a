package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queenmq/ephemeral/internal/pg"
)

// Options configure a Membership.
type Options struct {
	Config
	// DatabaseURL and Schema name the store's database and schema
	// (QUEEN_DATABASE_URL, QUEEN_DATABASE_SCHEMA; see store/postgres). The
	// cell's table, cell_members, lives beside the store's tables.
	DatabaseURL string
	Schema      string
	// Incarnation is the broker process's incarnation (the engine's), so
	// that a member restarted on the same address is another member.
	Incarnation string
	// OnChange, when set, is called on the membership goroutine after each
	// new view is published, in order. It must return quickly (hand the
	// work to another goroutine): the next heartbeat waits for it.
	OnChange func(prev, next *View)
	// BeforeChange, when set, is called like OnChange but before the new
	// view is published: readers still see prev while it runs. The server
	// empties there the queues it is about to own (docs/cell.md,
	// "Membership changes"). Same rule: it must return quickly.
	BeforeChange func(prev, next *View)
	// Logger receives joins, leaves and fencing; nil discards them.
	Logger *slog.Logger

	// Test hooks. clock replaces the monotonic clock used for fencing;
	// beforeBeat runs before each heartbeat and, failing, fails it (a
	// database that does not answer); beforeRows runs in Rows on its
	// connection (a slow admin read).
	clock      func() time.Duration
	beforeBeat func(context.Context) error
	beforeRows func(context.Context)
}

// gcEvery is how many heartbeats pass between removals of long-dead rows.
const gcEvery = 60

// Membership keeps this member's row alive and publishes its views.
type Membership struct {
	opts   Options
	self   string
	schema string
	sql    statements
	clock  func() time.Duration
	log    *slog.Logger

	pool    *pg.Pool
	reading chan struct{}   // one slot: the admin read holding a connection (Rows)
	listen  *pgx.ConnConfig // the LISTEN connection's configuration

	view    atomic.Pointer[View]
	refresh chan struct{} // a notification arrived: reload the live set

	// Owned by the loop goroutine.
	gen       uint64
	announced bool // joined and not fenced since: the next beat needs no join
	failing   bool // the last beat failed: log the next failure at debug
	displaced bool // another live process holds this address's row
	tableOK   bool
	beats     int

	stats struct {
		heartbeats, roundTrips, statements, notifications, heartbeatFailures atomic.Int64
		listening                                                            atomic.Bool
	}

	cancel context.CancelFunc
	done   sync.WaitGroup
	// stop ends the membership loop between two round trips, and ran is
	// closed when it has: Stop deletes the row only then, so that no
	// heartbeat still on its way to the database (a cancelled query may
	// yet run there) can put the row back after the delete and show the
	// member alive to the others for another member timeout.
	stop     chan struct{}
	ran      chan struct{}
	stopOnce sync.Once
}

// Start joins the cell: it publishes a first view (fenced, empty), then
// renews the member's row every heartbeat and listens for the others'. It
// fails only on options it cannot use; an unreachable database leaves the
// member fenced and retrying every heartbeat.
func Start(opts Options) (*Membership, error) {
	if !opts.Enabled() {
		return nil, errors.New("cell: no advertised address")
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = DefaultHeartbeat
	}
	if opts.MemberTimeout <= 0 {
		opts.MemberTimeout = DefaultMemberTimeout
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.Incarnation == "" {
		return nil, errors.New("cell: no incarnation")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.clock == nil {
		opts.clock = monotonic
	}
	// Two connections: heartbeats and reloads run one at a time on the
	// loop, and admin reads (Rows) take turns on the other, so that no
	// read ever holds the connection a beat needs. LISTEN has its own
	// connection outside the pool.
	// No ping on acquire: pgxpool pings a connection idle over a second,
	// which at the default heartbeat is most beats, an extra round trip
	// each (measured: 1.7 transactions per member per second instead of
	// 1). The beat is the liveness check; one that finds its connection
	// dead before sending is tried again at once (internal/pg's rule).
	pool, err := pg.Open(pg.Config{
		URL:              opts.DatabaseURL,
		Name:             "queen/cell",
		ConnectTimeout:   opts.MemberTimeout,
		StatementTimeout: opts.MemberTimeout,
		MaxConns:         2,
		NoPingOnAcquire:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("cell: %w", err)
	}
	m := &Membership{
		opts:    opts,
		self:    opts.Advertise,
		schema:  opts.Schema,
		sql:     newStatements(opts.Schema),
		clock:   opts.clock,
		log:     opts.Logger.With("cell", opts.Advertise, "incarnation", opts.Incarnation),
		pool:    pool,
		reading: make(chan struct{}, 1),
		listen:  pool.ConnConfig(),
		refresh: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		ran:     make(chan struct{}),
	}
	m.gen = 1
	m.view.Store(newView(m.gen, m.self, nil, true, 0, m.clock))
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.done.Add(2)
	go m.run(ctx)
	go m.listenLoop(ctx)
	return m, nil
}

// View is the current view. It never blocks and never returns nil.
func (m *Membership) View() *View { return m.view.Load() }

// Fenced reports whether the member must not answer as an owner now.
func (m *Membership) Fenced() bool { return m.view.Load().Fenced() }

// Stats counts the member's traffic with the database since Start.
type Stats struct {
	Heartbeats        int64 // heartbeats begun
	RoundTrips        int64 // network round trips (a heartbeat is one)
	Statements        int64 // SQL statements sent
	Notifications     int64 // notifications received from other members
	HeartbeatFailures int64
	// Listening: the LISTEN connection is up, so changes are seen at once
	// rather than within a heartbeat.
	Listening bool
}

// Stats reports the member's database traffic so far.
func (m *Membership) Stats() Stats {
	return Stats{
		Heartbeats:        m.stats.heartbeats.Load(),
		RoundTrips:        m.stats.roundTrips.Load(),
		Statements:        m.stats.statements.Load(),
		Notifications:     m.stats.notifications.Load(),
		HeartbeatFailures: m.stats.heartbeatFailures.Load(),
		Listening:         m.stats.listening.Load(),
	}
}

// Stop leaves the cell cleanly: it stops heartbeating, deletes the
// member's row and notifies the others in one transaction (within ctx),
// publishes a last, fenced view and closes its connections. The error is
// the delete's: on failure the others see the member leave after the
// timeout instead. It is safe to call more than once.
func (m *Membership) Stop(ctx context.Context) error {
	var err error
	m.stopOnce.Do(func() {
		close(m.stop)
		<-m.ran // the beat in flight, if any, has been answered
		m.cancel()
		m.done.Wait()
		err = m.leave(ctx)
		cur := m.view.Load()
		m.publish(without(cur.Members, m.self), true)
		m.pool.Close()
	})
	return err
}

func (m *Membership) leave(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.MemberTimeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(m.sql.leave, m.self, m.opts.Incarnation)
	b.Queue(m.sql.notify, m.sql.channel, payload("leave", m.self, m.opts.Incarnation))
	// Idempotent: a second delete finds nothing, a second notification
	// makes the others reload once more.
	err := m.pool.Do(ctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		m.count(b.Len())
		return c.SendBatch(ctx, b).Close()
	})
	if err != nil {
		m.log.Warn("cell: leaving without deleting the row; the others see the member leave after the timeout", "err", err)
		return fmt.Errorf("cell: leave: %w", err)
	}
	m.log.Info("cell: left")
	return nil
}

func (m *Membership) count(statements int) {
	m.stats.roundTrips.Add(1)
	m.stats.statements.Add(int64(statements))
}

// run is the membership loop: a heartbeat each tick, a reload on each
// notification, and fencing when the last renewal expires. Every database
// call and every publication happens here, one at a time.
func (m *Membership) run(ctx context.Context) {
	defer m.done.Done()
	defer close(m.ran)
	tick := time.NewTicker(m.opts.Heartbeat)
	defer tick.Stop()
	fence := time.NewTimer(m.opts.MemberTimeout)
	defer fence.Stop()
	m.beat(ctx, fence)
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.stop:
			return
		case <-tick.C:
			m.checkFence()
			m.beat(ctx, fence)
		case <-m.refresh:
			m.reload(ctx)
		case <-fence.C:
			m.checkFence()
		}
	}
}

// beat renews the member's row and loads the live set in one round trip
// (the upsert, a join notification when the member is (re)joining, now
// and then a removal of long-dead rows, and the select). The statements
// run in one implicit transaction, so the select sees the renewal.
func (m *Membership) beat(ctx context.Context, fence *time.Timer) {
	m.stats.heartbeats.Add(1)
	sent := m.clock()
	// A beat may take until the current renewal expires; a member already
	// fenced (or not yet joined) gives it a whole timeout.
	wait := time.Duration(m.view.Load().deadline.Load()) - sent
	if !m.announced || wait <= 0 {
		wait = m.opts.MemberTimeout
	}
	bctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	members, err := m.renew(bctx)
	if errors.Is(err, errDisplaced) {
		m.displace(m.view.Load().Members)
		return
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		m.stats.heartbeatFailures.Add(1)
		// A database that stays away would log every heartbeat: warn on
		// the first failure of a run, and when fencing follows.
		if m.failing {
			m.log.Debug("cell: heartbeat failed", "err", err)
		} else {
			m.log.Warn("cell: heartbeat failed", "err", err)
		}
		m.failing = true
		m.checkFence()
		return
	}
	if m.failing {
		m.failing = false
		m.log.Info("cell: heartbeat renewed again")
	}
	deadline := sent + m.opts.MemberTimeout
	if m.clock() >= deadline {
		// Renewed, but too late to count: the others may have seen the
		// row expire meanwhile. Stay fenced; the next beat rejoins.
		m.stats.heartbeatFailures.Add(1)
		m.checkFence()
		return
	}
	joining := !m.announced
	m.announced = true
	if m.displaced {
		m.displaced = false
		m.log.Info("cell: the address's row is this process's again")
	}
	cur := m.view.Load()
	if !joining && cur.sameSet(members, false) {
		cur.deadline.Store(int64(deadline))
	} else {
		m.publishDeadline(members, false, deadline)
	}
	if joining {
		m.log.Info("cell: joined", "members", len(members))
	}
	fence.Reset(deadline - m.clock())
}

// renew sends the beat. A beat that provably never ran (its pooled
// connection had died: the database restarted) is sent again at once on
// another connection; one that may have run is not: it fails, and the
// next heartbeat renews (internal/pg's rule, Unsent).
func (m *Membership) renew(ctx context.Context) ([]Member, error) {
	if !m.tableOK {
		m.stats.roundTrips.Add(1) // the table check: a few statements, once per join
		if err := m.pool.Locked(ctx, "queen-ephemeral cell "+m.schema, m.ensureTable); err != nil {
			return nil, err
		}
		m.tableOK = true
	}
	// A joining member takes its address's row over; a member displaced
	// from it waits for the other process's row to expire instead, so two
	// processes on one address do not take turns.
	takeover := !m.announced && !m.displaced
	b := &pgx.Batch{}
	b.Queue(m.sql.heartbeat, m.self, m.opts.Incarnation, m.opts.MemberTimeout.Milliseconds(), takeover, m.opts.PublicURL)
	if takeover {
		b.Queue(m.sql.notify, m.sql.channel, payload("join", m.self, m.opts.Incarnation))
	}
	if m.beats++; m.beats%gcEvery == 1 {
		b.Queue(m.sql.gc, m.opts.MemberTimeout.Milliseconds())
	}
	b.Queue(m.sql.live)
	var (
		members []Member
		renewed bool
	)
	err := m.pool.Do(ctx, pg.Unsent, func(ctx context.Context, c *pgxpool.Conn) error {
		if m.opts.beforeBeat != nil {
			if err := m.opts.beforeBeat(ctx); err != nil {
				return err
			}
		}
		m.count(b.Len())
		br := c.SendBatch(ctx, b)
		for i := range b.Len() - 1 {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			if i == 0 {
				renewed = tag.RowsAffected() == 1
			}
		}
		var err error
		members, err = scanMembers(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	m.tableGone(err)
	if err != nil {
		return nil, err
	}
	if !renewed {
		return nil, errDisplaced
	}
	return members, nil
}

// errDisplaced: the heartbeat found this address's row held, and renewed
// within the timeout, by another incarnation.
var errDisplaced = errors.New("another live process advertises this address")

// tableGone notices a table dropped under the cell, so the next beat
// creates it again, and a table without the public_url column (dropped and
// made again by a member of the release before it: 42703), so the next
// beat adds it.
func (m *Membership) tableGone(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000" || pe.Code == "42703") {
		m.tableOK = false
	}
}

func scanMembers(br pgx.BatchResults) ([]Member, error) {
	return collectMembers(br.Query())
}

// collectMembers reads the rows of the live-set query (sql.live), as a
// heartbeat and a reload both run it.
func collectMembers(rows pgx.Rows, err error) ([]Member, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		var mb Member
		err := r.Scan(&mb.ID, &mb.Incarnation, &mb.URL)
		return mb, err
	})
}

// reload loads the live set after a notification. It never unfences: only
// a renewal does.
func (m *Membership) reload(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, m.opts.MemberTimeout)
	defer cancel()
	var members []Member
	err := m.pool.Do(rctx, pg.Idempotent, func(ctx context.Context, c *pgxpool.Conn) error {
		m.count(1)
		var err error
		members, err = collectMembers(c.Query(ctx, m.sql.live))
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("cell: reload failed", "err", err)
		}
		return
	}
	if m.announced && heldByAnother(members, m.self, m.opts.Incarnation) {
		// Another process took this address's row over since our last
		// renewal (its join notification is likely what we are reloading
		// on): it answers for the address now, so do not wait for the next
		// beat to find out (and do not let with() put us back in its place).
		m.displace(members)
		return
	}
	m.checkFence()
	fenced := !m.announced
	m.publish(members, fenced)
}

// heldByAnother reports whether members list self's address with another
// incarnation than inc.
func heldByAnother(members []Member, self, inc string) bool {
	for _, mb := range members {
		if mb.ID == self {
			return mb.Incarnation != inc
		}
	}
	return false
}

// displace fences the member at once, without waiting for its renewal to
// expire: another process answers for this address now. It stays fenced
// until that process's row expires (or is deleted) and its own beat takes
// the row back. members is the live set to publish (less this member).
func (m *Membership) displace(members []Member) {
	m.stats.heartbeatFailures.Add(1)
	if !m.displaced {
		m.log.Error("cell: another live broker advertises this address (QUEEN_CELL_ADVERTISE); fenced until its row expires", "address", m.self)
	}
	m.displaced = true
	m.announced = false
	m.publish(members, true)
}

// checkFence fences the member when its last renewal has expired: it
// publishes a view without itself, and its next successful beat rejoins.
func (m *Membership) checkFence() {
	cur := m.view.Load()
	if !m.announced || m.clock() < time.Duration(cur.deadline.Load()) {
		return
	}
	m.announced = false
	m.log.Warn("cell: fenced: could not renew the member's row within the timeout", "timeout", m.opts.MemberTimeout)
	m.publish(cur.Members, true)
}

// publish makes members (sorted by ID) the current view when they, or the
// fencing, differ from it; the deadline carries over.
func (m *Membership) publish(members []Member, fenced bool) {
	m.publishDeadline(members, fenced, time.Duration(m.view.Load().deadline.Load()))
}

func (m *Membership) publishDeadline(members []Member, fenced bool, deadline time.Duration) {
	if fenced {
		members = without(members, m.self)
	} else {
		members = with(members, Member{ID: m.self, Incarnation: m.opts.Incarnation, URL: m.opts.PublicURL})
	}
	cur := m.view.Load()
	if cur.sameSet(members, fenced) {
		cur.deadline.Store(int64(deadline))
		return
	}
	m.gen++
	next := newView(m.gen, m.self, members, fenced, deadline, m.clock)
	if m.opts.BeforeChange != nil {
		m.opts.BeforeChange(cur, next)
	}
	m.view.Store(next)
	close(cur.next)
	m.log.Info("cell: view", "generation", next.Generation, "members", len(members), "fenced", fenced)
	if m.opts.OnChange != nil {
		m.opts.OnChange(cur, next)
	}
}

// without returns members less id, copying when it must remove.
func without(members []Member, id string) []Member {
	for i := range members {
		if members[i].ID == id {
			out := make([]Member, 0, len(members)-1)
			out = append(out, members[:i]...)
			return append(out, members[i+1:]...)
		}
	}
	return members
}

// with returns members with self in its sorted place: a member that has
// renewed is live, whatever a reload read a moment earlier.
func with(members []Member, self Member) []Member {
	i := sort.Search(len(members), func(i int) bool { return members[i].ID >= self.ID })
	if i < len(members) && members[i] == self {
		return members
	}
	out := make([]Member, 0, len(members)+1)
	out = append(out, members[:i]...)
	out = append(out, self)
	if i < len(members) && members[i].ID == self.ID {
		i++ // a row of ours with another incarnation: ours replaces it
	}
	return append(out, members[i:]...)
}
