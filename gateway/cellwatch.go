package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// The gateway's view of the cell behind it (docs/gateway.md, "Routing to
// owners"): one goroutine keeps one view read waiting (GET
// /api/v1/ephemeral/cell?after=G, docs/routes.md "cell") on one configured
// member, over HTTP, as the gateway speaks to brokers (the secret, a tenant,
// read-only access), and publishes each new member list as an ownerView
// (owners.go). One read for the whole gateway, not one per member or per
// loop: every member lists the same set within a heartbeat, and the
// generation is local to the member that answers, so a read moves to the
// next configured member (asking afresh, without after) only when the one
// asked fails.
//
// The tenant it asks as. A broker in gateway mode serves a read only to a
// tenant it admits (with QUEEN_EPHEMERAL_REQUIRE_GRANT, one with a grant),
// and the gateway holds no tenant of its own; the member list is the same
// for every tenant. So it asks as the tenant of a request it is forwarding
// (offered by the loops while none is held: one atomic load per request
// otherwise), and, refused for that tenant, drops it and waits for another.
// The ownership key is always the request's own tenant, never this one.
//
// A broker that is not a cell (generation 0, no members) or that predates
// the route (404) is asked again only after notCellRecheck, or at once when
// a member's answer says ownership moved: a gateway in front of one broker
// keeps no read waiting.

const (
	// viewWaitMs is how long a view read waits for a change.
	viewWaitMs = 10000
	// notCellRecheck: a broker that answered "not a cell" is asked again
	// after this long (a broker restarted into a cell is then learned).
	notCellRecheck = 5 * time.Minute
	// viewRetry paces reads after a failure or a refusal.
	viewRetry = time.Second
	// refreshEvery bounds the immediate re-reads that answers saying
	// ownership moved ask for (refreshView).
	refreshEvery = 250 * time.Millisecond
	// maxViewBody bounds a view read's answer the gateway reads.
	maxViewBody = 1 << 20
)

// cellWatch is the watcher's state shared with the loops.
type cellWatch struct {
	// wantTenant is true while the watcher has no tenant to ask as; tenant
	// is the one a loop offered.
	wantTenant atomic.Bool
	tenant     atomic.Pointer[string]
	offered    chan struct{} // signalled when a tenant is offered
	refresh    chan struct{} // signalled by refreshView
	lastPoke   atomic.Int64  // unix nanos of the last refreshView honoured
	// learned maps a member's dial address (host:port) not among the
	// configured upstreams to its index in Gateway.upstreams; the watcher's
	// alone.
	learned map[string]int
}

// offerTenant gives the watcher a tenant to ask as, when it wants one: on
// every push, pop and ack, so the check is one atomic load and nothing
// escapes unless it is taken (giveTenant).
func (g *Gateway) offerTenant(tenant string) {
	if g.watch.wantTenant.Load() {
		g.giveTenant(tenant)
	}
}

func (g *Gateway) giveTenant(tenant string) {
	w := &g.watch
	if !w.wantTenant.CompareAndSwap(true, false) {
		return
	}
	w.tenant.Store(&tenant)
	select {
	case w.offered <- struct{}{}:
	default:
	}
}

// refreshView asks the watcher to read the view again now (a member
// answered owner_moved or ephemeral_forward_failed), at most every
// refreshEvery.
func (g *Gateway) refreshView() {
	w := &g.watch
	now := time.Now().UnixNano()
	last := w.lastPoke.Load()
	if now-last < int64(refreshEvery) || !w.lastPoke.CompareAndSwap(last, now) {
		return
	}
	select {
	case w.refresh <- struct{}{}:
	default:
	}
}

// viewAnswer is what a view read found.
type viewAnswer struct {
	notCell bool // generation 0 and no members, or a 404: one broker
	gen     uint64
	members []viewMember
}

// errViewTenant: the member refused the tenant asked as (no grant, a
// tenant it does not admit): another is needed.
var errViewTenant = errors.New("the member refused the tenant the view was asked as")

// watchCell keeps the view until the gateway stops.
func (g *Gateway) watchCell() {
	defer g.bg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-g.quit
		cancel()
	}()
	hc := &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: g.cfg.DialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1,
	}, Timeout: viewWaitMs*time.Millisecond + 2*time.Second}
	defer hc.CloseIdleConnections()
	w := &g.watch
	from, have := 0, false // the configured member asked; whether gen is its
	var gen uint64
	for ctx.Err() == nil {
		tenant := g.awaitTenant(ctx)
		if tenant == "" {
			return
		}
		a, poked, err := g.readView(ctx, hc, from, tenant, gen, have)
		switch {
		case ctx.Err() != nil:
			return
		case poked:
			have = false // asked again now, without after
		case errors.Is(err, errViewTenant):
			w.tenant.Store(nil)
			w.wantTenant.Store(true)
			g.pause(ctx, viewRetry)
		case err != nil:
			g.cfg.Logger.Debug("gateway: reading the cell's view", "broker", g.upstreams[from].host, "err", err)
			from, have = (from+1)%g.nConfigured, false
			g.pause(ctx, viewRetry)
		case a.notCell:
			g.publishView(a)
			have = false
			g.pause(ctx, notCellRecheck)
		default:
			g.publishView(a)
			gen, have = a.gen, true
		}
	}
}

// awaitTenant returns a tenant to ask as, waiting for a loop to offer one;
// "" when the gateway stops.
func (g *Gateway) awaitTenant(ctx context.Context) string {
	w := &g.watch
	for {
		if t := w.tenant.Load(); t != nil {
			return *t
		}
		w.wantTenant.Store(true)
		if t := w.tenant.Load(); t != nil { // offered in between
			return *t
		}
		select {
		case <-w.offered:
		case <-ctx.Done():
			return ""
		}
	}
}

// pause waits d, or less when a refresh is asked for or the gateway stops.
func (g *Gateway) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-g.watch.refresh:
	case <-ctx.Done():
	}
}

// readView sends one view read to configured member from as tenant: a
// waiting one (after gen) when have, else one answered at once. poked: a
// refresh was asked for while it waited, and it was given up.
func (g *Gateway) readView(ctx context.Context, hc *http.Client, from int, tenant string, gen uint64, have bool) (a viewAnswer, poked bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	target := "http://" + g.upstreams[from].host + cellViewPath
	if have {
		target += "?after=" + strconv.FormatUint(gen, 10) + "&timeout=" + strconv.Itoa(viewWaitMs)
		done := make(chan struct{})
		defer close(done)
		var gaveUp atomic.Bool
		go func() {
			select {
			case <-g.watch.refresh:
				gaveUp.Store(true)
				cancel()
			case <-done:
			}
		}()
		defer func() {
			if gaveUp.Load() && ctx.Err() == nil {
				a, poked, err = viewAnswer{}, true, nil
			}
		}()
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, target, nil)
	if err != nil {
		return a, false, err
	}
	req.Host = g.upstreams[from].host
	req.Header.Set("X-Queen-Gateway-Secret", g.cfg.Secret)
	req.Header.Set("X-Queen-Tenant", tenant)
	req.Header.Set("X-Queen-Access", "read-only")
	g.m.viewReads.Inc()
	resp, err := hc.Do(req)
	if err != nil {
		return a, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxViewBody))
	if err != nil {
		return a, false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		// A broker, or a gateway, older than the route: not a cell.
		return viewAnswer{notCell: true}, false, nil
	case http.StatusUnauthorized, http.StatusForbidden:
		return a, false, errViewTenant
	default:
		return a, false, fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	}
	var v struct {
		Generation uint64       `json:"generation"`
		Members    []viewMember `json:"members"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return a, false, fmt.Errorf("the view read's answer: %w", err)
	}
	if v.Generation == 0 && len(v.Members) == 0 {
		return viewAnswer{notCell: true}, false, nil
	}
	return viewAnswer{gen: v.Generation, members: v.Members}, false, nil
}

// publishView makes a the loops' view (nil: not a cell), learning the
// addresses of members the configured upstreams do not name. A view with
// no member (a member that has not joined yet) routes nothing: nil too.
func (g *Gateway) publishView(a viewAnswer) {
	var v *ownerView
	if !a.notCell && len(a.members) > 0 {
		v = newOwnerView(a.gen, a.members, g.memberAddr)
	}
	old := g.owners.Load()
	if v == nil && old == nil || v.sameMembers(old) {
		return
	}
	g.owners.Store(v)
}

// memberAddr is the index in Gateway.upstreams of a member's public URL: a
// configured upstream's when it is the same address, else one learned
// (filled in here, before the view naming it is published, so that a loop
// reading the view reads the address); -1 for a URL the gateway cannot
// dial (not http://host:port) or when maxLearned are learned already.
func (g *Gateway) memberAddr(url string) int {
	a, err := parseUpstream(url)
	if err != nil {
		return -1
	}
	for i := range g.nConfigured {
		if g.upstreams[i].dial == a.dial {
			return i
		}
	}
	w := &g.watch
	if i, ok := w.learned[a.dial]; ok {
		return i
	}
	i := g.nConfigured + len(w.learned)
	if i >= len(g.upstreams) {
		g.cfg.Logger.Warn("gateway: too many cell member addresses learned; this member's queues are reached through the others", "url", url, "most", maxLearned)
		return -1
	}
	if w.learned == nil {
		w.learned = map[string]int{}
	}
	w.learned[a.dial] = i
	g.upstreams[i] = a
	return i
}
