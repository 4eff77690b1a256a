package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/cell/rendezvous"
)

// Owner routing (docs/sdk-transport.md, "Owner routing"; D19).
//
// In a cell, a push, pop or ack that lands on a member that does not own
// its queue is relayed to the owner, which with N members is (N−1)/N of
// them and costs the cell about twice the CPU of serving them where they
// land (docs/cell.md, "How a cell scales"). The client learns the cell
// from the URL it was given: it keeps one view read waiting
// (GET /api/v1/ephemeral/cell?after=G) on a configured URL, and sends each
// call of a queue (push, pop, ack, the depth read) to the member that owns
// it in the view it holds, over that member's public URL. Anything it
// cannot route (no view, a member without a URL, one that cannot be
// dialled) goes to the configured URL, which relays. Given a
// single broker or a gateway (generation 0, or a 404 from a release before
// the view read), it stops after that one read and nothing changes.

const (
	// viewWait is each waiting view read's timeout; the broker answers
	// at once when its view changes.
	viewWait = 30 * time.Second
	// viewBackoffMin, viewBackoffMax: after a failed view read, the next
	// is tried after a wait doubling between these.
	viewBackoffMin = time.Second
	viewBackoffMax = 30 * time.Second
	// memberDownFor: a member whose URL could not be dialled is passed
	// over for this long (its queues go to the configured URL).
	memberDownFor = 5 * time.Second
	// refreshBound bounds a refresh read after a cell refusal.
	refreshBound = 5 * time.Second
	// inboxTries: how many inbox names a Request mints at most to find
	// one owned by the request queue's owner (inboxFor).
	inboxTries = 32
)

// cellView is the client's view of the cell: the members the view read
// answered, with their seeds precomputed, so that routing a call costs
// two hashes and a score per member, and nothing allocated.
type cellView struct {
	generation uint64
	self       string // the member that answered it: generations are its own
	tenant     string
	seeds      []uint64      // rendezvous.Seed of each member's id, sorted by id
	members    []*cellMember // same order; nil: the member publishes no URL
}

// cellMember is one member URL and its endpoint, kept across views (its
// links stay open when a new view still lists it).
type cellMember struct {
	url string
	ep  endpoint
	// downUntil: unix nanos before which the member is passed over (its
	// URL could not be dialled).
	downUntil atomic.Int64
}

func (m *cellMember) down() bool {
	at := m.downUntil.Load()
	return at != 0 && time.Now().UnixNano() < at
}

// cellState is the client's knowledge of the cell.
type cellState struct {
	view     atomic.Pointer[cellView]
	watching atomic.Bool // the watch was started (or is not to be)
	// notCell: the configured URL answered generation 0 or 404; no
	// refresh is ever read.
	notCell atomic.Bool
	// reads counts the view reads sent (for tests).
	reads atomic.Int64

	mu         sync.Mutex
	members    map[string]*cellMember // by URL
	refreshing chan struct{}          // closed when the refresh under way ends
}

// owner answers the endpoint of queue's owner in the current view, nil
// when the call goes to the configured URL (no view, not a queue's call,
// an owner without a URL or passed over).
func (c *Client) owner(queue string) *cellMember {
	if queue == "" {
		return nil
	}
	v := c.cell.view.Load()
	if v == nil || len(v.seeds) == 0 {
		return nil
	}
	m := v.members[rendezvous.Owner(rendezvous.Key(v.tenant, queue), v.seeds)]
	if m == nil || m.down() {
		return nil
	}
	return m
}

// onOwner sends a call through send to owner m. It answers done=false
// when the call is to go to the configured URL instead: m could not be
// dialled (it is passed over for memberDownFor), or the call provably did
// not reach it and may be sent again.
func (c *Client) onOwner(ctx context.Context, m *cellMember, method, prefix, route string, send func(endpoint) error) (done bool, err error) {
	err = send(m.ep)
	if err == nil {
		return true, nil
	}
	var ce *connError
	if errors.As(err, &ce) && ctx.Err() == nil {
		if ce.dial {
			m.downUntil.Store(time.Now().Add(memberDownFor).UnixNano())
			return false, nil
		}
		if ce.retry {
			return false, nil
		}
	}
	return true, fmt.Errorf("queen: %s %s: %w", method, m.url+prefix+route, err)
}

// failoverCell is failover over the configured URLs; when none of them can
// be dialled and the client holds a view, send is tried on the view's
// other members in turn (each relays what it does not own): a client given
// one member's URL goes on when that member dies, and its view read learns
// the view without it from another.
func (c *Client) failoverCell(ctx context.Context, method, prefix, route string, send func(endpoint) error) error {
	err := c.failover(ctx, method, prefix, route, send)
	if err == nil || !isDialFailure(err) || ctx.Err() != nil {
		return err
	}
	v := c.cell.view.Load()
	if v == nil {
		return err
	}
	for _, m := range v.members {
		if m == nil || m.down() || c.isConfigured(m) {
			continue
		}
		if done, merr := c.onOwner(ctx, m, method, prefix, route, send); done {
			return merr
		}
	}
	return err
}

// isDialFailure reports whether err says no connection could be made.
func isDialFailure(err error) bool {
	var ce *connError
	return errors.As(err, &ce) && ce.dial
}

// isConfigured reports whether m shares a configured URL's endpoint.
func (c *Client) isConfigured(m *cellMember) bool {
	for _, ep := range c.eps {
		if ep == m.ep {
			return true
		}
	}
	return false
}

// watchCell starts the view's watch at the client's first call.
func (c *Client) watchCell() {
	if c.cell.watching.Load() || !c.cell.watching.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Add(1)
	go c.watch()
}

// watch keeps one view read waiting, re-armed with each answer's
// generation, until the client closes or the URL says it is not a cell.
func (c *Client) watch() {
	defer c.wg.Done()
	var gen uint64
	after := false
	backoff := viewBackoffMin
	for c.ctx.Err() == nil {
		v, err := c.readView(c.ctx, gen, after, viewWait)
		if err != nil {
			if isNotFound(err) {
				c.cell.notCell.Store(true)
				return
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, viewBackoffMax)
			after = false
			continue
		}
		backoff = viewBackoffMin
		if v.Generation == 0 {
			// Not a cell (a single broker, a gateway): generation 0 never
			// changes, there is nothing to wait for.
			c.cell.notCell.Store(true)
			c.cell.view.Store(nil)
			return
		}
		c.install(v)
		gen, after = v.Generation, true
	}
}

func isNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// viewAnswer is the view read's answer (docs/routes.md, "cell").
type viewAnswer struct {
	Generation uint64 `json:"generation"`
	Tenant     string `json:"tenant"`
	Self       string `json:"self"`
	Members    []struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	} `json:"members"`
}

// readView reads the view from the configured URLs (failover as any call),
// waiting up to wait for a generation other than gen when after.
func (c *Client) readView(ctx context.Context, gen uint64, after bool, wait time.Duration) (*viewAnswer, error) {
	timeout := c.timeout
	if after && timeout > 0 {
		timeout += wait
	}
	cl := newCall(http.MethodGet, "/cell", timeout)
	cl.safe = true
	if after {
		cl.exclusive = true
		cl.target = append(cl.target, "?after="...)
		cl.target = strconv.AppendUint(cl.target, gen, 10)
		cl.target = append(cl.target, "&timeout="...)
		cl.target = strconv.AppendInt(cl.target, wait.Milliseconds(), 10)
	}
	c.cell.reads.Add(1)
	var out viewAnswer
	err := c.authorize(ctx, cl)
	if err == nil {
		err = c.failoverCell(ctx, cl.method, cl.prefix, cl.route, func(ep endpoint) error { return ep.do(ctx, cl) })
	}
	if err == nil {
		err = c.answer(cl, false, &out)
	}
	release(cl, err)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// install makes a the view calls are routed by, from then on (calls in
// flight finish where they are).
func (c *Client) install(a *viewAnswer) {
	v := &cellView{generation: a.Generation, self: a.Self, tenant: a.Tenant}
	for _, m := range a.Members {
		v.seeds = append(v.seeds, rendezvous.Seed(m.ID))
		v.members = append(v.members, c.memberAt(m.URL))
	}
	// Sorted by id, as the broker lists them (a tie goes to the lower id,
	// as rendezvous.OwnerOf decides).
	sortView(v, a)
	c.cell.mu.Lock()
	defer c.cell.mu.Unlock()
	if cur := c.cell.view.Load(); cur != nil && cur.self == v.self && cur.generation > v.generation {
		return // an older view of the same member (the watch's and a refresh's answers crossed)
	}
	c.cell.view.Store(v)
}

// sortView sorts v's members by id, in case a broker listed them otherwise.
func sortView(v *cellView, a *viewAnswer) {
	for i := 1; i < len(a.Members); i++ {
		for j := i; j > 0 && a.Members[j].ID < a.Members[j-1].ID; j-- {
			a.Members[j], a.Members[j-1] = a.Members[j-1], a.Members[j]
			v.seeds[j], v.seeds[j-1] = v.seeds[j-1], v.seeds[j]
			v.members[j], v.members[j-1] = v.members[j-1], v.members[j]
		}
	}
}

// memberAt answers the member reached at raw (a member's public URL), its
// endpoint made at its first view and kept; a URL equal to a configured
// one shares that URL's endpoint (and links). nil for no URL, one that
// does not parse, or when the client is closed.
func (c *Client) memberAt(raw string) *cellMember {
	if raw == "" {
		return nil
	}
	u, err := parseBase(raw)
	if err != nil {
		return nil
	}
	norm := u.String()
	c.cell.mu.Lock()
	defer c.cell.mu.Unlock()
	if m := c.cell.members[norm]; m != nil {
		return m
	}
	if c.isClosed() {
		return nil
	}
	m := &cellMember{url: norm}
	for i, s := range c.urls {
		if s == norm {
			m.ep = c.eps[i]
		}
	}
	if m.ep == nil {
		m.ep = c.endpointFor(u)
	}
	if c.cell.members == nil {
		c.cell.members = map[string]*cellMember{}
	}
	c.cell.members[norm] = m
	return m
}

// refreshView reads the view at once, after a cell refusal says that
// ownership moved behind the client's back; concurrent refusals share
// one read. Nothing happens when the client holds no view (not a cell, or
// not learned yet: the watch brings it).
func (c *Client) refreshView(ctx context.Context) {
	if c.cell.notCell.Load() || c.cell.view.Load() == nil {
		return
	}
	c.cell.mu.Lock()
	if ch := c.cell.refreshing; ch != nil {
		c.cell.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	c.cell.refreshing = ch
	c.cell.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, refreshBound)
	if a, err := c.readView(rctx, 0, false, 0); err == nil && a.Generation != 0 {
		c.install(a)
	}
	cancel()
	c.cell.mu.Lock()
	c.cell.refreshing = nil
	c.cell.mu.Unlock()
	close(ch)
}

// closeMembers closes the idle connections of the members' endpoints that
// are not configured URLs' (Close closes those).
func (c *Client) closeMembers() {
	c.cell.mu.Lock()
	defer c.cell.mu.Unlock()
	for _, m := range c.cell.members {
		m.ep.closeIdle()
	}
}
