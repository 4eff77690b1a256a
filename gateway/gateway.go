package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/acceptloop"
	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/wire"
)

// Config is what a Gateway needs; zero durations take defaults.
type Config struct {
	// Addr is host:port to listen on (PORT, default 6630, and HOST).
	Addr string
	// Upstreams are the brokers' base URLs (QUEEN_GATEWAY_UPSTREAMS), any
	// of which may answer: brokers of one cell, or one broker.
	Upstreams []string
	// Secret is sent to the brokers as X-Queen-Gateway-Secret
	// (QUEEN_GATEWAY_SECRET); they run with QUEEN_AUTH_MODE=gateway.
	Secret string
	// Auth identifies the end clients: JWT (the broker's QUEEN_JWT_*
	// variables), or mode none (every client tenant default with the admin
	// role, the admin routes on loopback only).
	Auth *identity.Auth
	// The admin scope (adminscope.go, docs/gateway.md "Admin routes"), the
	// broker's rules. AdminToken (QUEEN_ADMIN_TOKEN), sent as
	// "Authorization: Bearer <token>", makes a request the gateway's
	// operator whatever the identity; empty = none. OperatorTenant
	// (QUEEN_OPERATOR_TENANT): with JWT identity, an admin of this tenant
	// is the operator too; empty = no tenant is, and a tenant's admin may
	// change no plan or tenant and read only its own tenant and usage.
	AdminToken     []byte
	OperatorTenant string
	// Browsers holds what the operator lets browsers do (D20, as on the
	// broker): trusted origins (QUEEN_TRUSTED_ORIGINS) exempt from the
	// cross-origin refusal, and trusted hosts (QUEEN_TRUSTED_HOSTS) that
	// protected mode accepts in a loopback client's Host. nil trusts neither.
	Browsers *crossorigin.Guard
	// Catalog holds plans, tenants and usage.
	Catalog catalog.Store
	// Routes is the route classification; nil is routes.Default().
	Routes *routes.Table
	// Loops is the number of event loops (GOMAXPROCS).
	Loops int
	// PollInterval is how often the catalog's revision is read (1 s).
	PollInterval time.Duration
	// FlushInterval is how often usage is written (5 s).
	FlushInterval time.Duration
	// DialTimeout bounds a connection to a broker (2 s).
	DialTimeout time.Duration
	// IdleTimeout closes a client connection with nothing in flight for
	// this long (120 s).
	IdleTimeout time.Duration
	// NoLink keeps every request on HTTP connections to the brokers, never
	// on a link (link.go; QUEEN_GATEWAY_LINK=false).
	NoLink bool
	// MaxBodyBytes bounds a request body (64 MiB, the broker's).
	MaxBodyBytes int64
	// HeaderTimeout closes a client connection whose request head has been
	// arriving for this long (QUEEN_HEADER_TIMEOUT_MS, 10 s); BodyTimeout
	// one whose request body has (QUEEN_BODY_TIMEOUT_MS, 30 s). The
	// broker's.
	HeaderTimeout time.Duration
	BodyTimeout   time.Duration
	// MaxInflightBytes bounds the request bytes all client connections
	// together may hold while bodies arrive or wait to be read
	// (QUEEN_MAX_INFLIGHT_BYTES, 64 MiB): a body that cannot be reserved is
	// refused on its head with 503 ephemeral_unavailable (body.go).
	MaxInflightBytes int64
	Logger           *slog.Logger
}

func (c *Config) fillDefaults() {
	if c.Routes == nil {
		c.Routes = routes.Default()
	}
	if c.Loops <= 0 {
		c.Loops = runtime.GOMAXPROCS(0)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 5 * time.Second
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 64 << 20
	}
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 30 * time.Second
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Gateway is the proxy. Start serves; Shutdown stops.
type Gateway struct {
	gnet.BuiltinEventEngine
	cfg Config
	// upstreams are the configured brokers (the first nConfigured), then
	// the cell members' addresses learned from views (cellwatch.go),
	// room for maxLearned of them; a learned entry is written once, before
	// the view naming it is published.
	upstreams   []upstreamAddr
	nConfigured int
	// owners is the view of the cell behind the gateway that push, pop
	// and ack are routed by (owners.go); nil: not a cell, or not known yet.
	owners atomic.Pointer[ownerView]
	watch  cellWatch

	view     atomic.Pointer[catalogView]
	revision atomic.Int64
	tenants  *tenantsMap

	loops *xsync.Map[gnet.EventLoop, *loopState]
	cli   *gnet.Client
	ln    net.Listener

	clients atomic.Int64 // client connections open
	links   atomic.Int64 // links to brokers open (link.go)
	// clientLinks counts clients' links open (clientlink.go).
	clientLinks atomic.Int64
	flushes     atomic.Int64 // usage writes that succeeded
	now         atomic.Int64 // unix nanos, set every tick
	inflight    atomic.Int64 // request bytes reserved by clients (body.go)
	m           gatewayMetrics
	quit        chan struct{}
	stopping    atomic.Bool
	booted      chan struct{}
	bg          sync.WaitGroup // the catalog watcher, the usage writer, the cell's watcher
	accept      sync.WaitGroup
}

// New checks cfg and makes a Gateway; Start serves it.
func New(cfg Config) (*Gateway, error) {
	cfg.fillDefaults()
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("QUEEN_GATEWAY_UPSTREAMS: no broker URL")
	}
	if cfg.Secret == "" {
		return nil, errors.New("QUEEN_GATEWAY_SECRET is required: the brokers trust the tenancy headers only with it")
	}
	if cfg.Catalog == nil {
		return nil, errors.New("gateway: no catalog")
	}
	g := &Gateway{
		cfg:     cfg,
		tenants: xsync.NewMap[string, *tenantState](),
		loops:   xsync.NewMap[gnet.EventLoop, *loopState](),
		quit:    make(chan struct{}),
		booted:  make(chan struct{}),
		watch:   cellWatch{offered: make(chan struct{}, 1), refresh: make(chan struct{}, 1)},
	}
	for _, u := range cfg.Upstreams {
		a, err := parseUpstream(u)
		if err != nil {
			return nil, fmt.Errorf("QUEEN_GATEWAY_UPSTREAMS: %w", err)
		}
		g.upstreams = append(g.upstreams, a)
	}
	g.nConfigured = len(g.upstreams)
	g.upstreams = append(g.upstreams, make([]upstreamAddr, maxLearned)...)
	g.initMetrics()
	return g, nil
}

// Start loads the catalog and the period's usage, then listens. A catalog
// that cannot be read at start is an error: serving without plans would
// refuse every tenant.
func (g *Gateway) Start(ctx context.Context) error {
	if err := g.reload(ctx); err != nil {
		return fmt.Errorf("loading plans and tenants: %w", err)
	}
	if err := g.loadUsage(ctx); err != nil {
		return fmt.Errorf("loading usage: %w", err)
	}
	g.now.Store(time.Now().UnixNano())
	ln, cli, err := acceptloop.Listen(g.cfg.Addr, g, g.cfg.Loops, g.cfg.Logger)
	if err != nil {
		return err
	}
	g.cli, g.ln = cli, ln
	<-g.booted
	g.bg.Add(2)
	go g.watchCatalog()
	go g.flushEvery()
	if !g.cfg.NoLink {
		// Owners are reached on links only (owners.go): without them
		// there is nothing to route by.
		g.bg.Add(1)
		go g.watchCell()
	}
	g.accept.Add(1)
	go g.acceptLoop()
	return nil
}

// Addr is the address the gateway listens on.
func (g *Gateway) Addr() net.Addr { return g.ln.Addr() }

// acceptLoop hands every accepted connection to the loops until the
// listener closes (internal/acceptloop: an accept error pauses it, never
// ends it).
func (g *Gateway) acceptLoop() {
	defer g.accept.Done()
	l := acceptloop.Loop{
		Listener: g.ln,
		Enroll:   func(c net.Conn) error { _, err := g.cli.Enroll(c); return err },
		Stopping: g.stopping.Load,
		Quit:     g.quit,
		Failed:   func(error) { g.m.acceptErrors.Inc() },
		Shed:     g.shedIdle,
	}
	l.Run()
}

// Shutdown stops accepting, writes the last usage and stops the loops.
// Requests in flight are cut: their clients see the connection close.
func (g *Gateway) Shutdown(ctx context.Context) error {
	if g.stopping.Swap(true) {
		return nil
	}
	close(g.quit)
	if g.ln == nil {
		return nil
	}
	g.ln.Close()
	g.accept.Wait()
	done := make(chan error, 1)
	go func() {
		g.bg.Wait() // the last usage written
		done <- g.cli.Stop()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loopState is what one event loop keeps: its connections to the brokers
// and the work it does once per poll. Touched only on its loop.
type loopState struct {
	g    *Gateway
	loop gnet.EventLoop
	// shared are the pipelined connections per configured upstream (index
	// as in Gateway.upstreams); idle the spare dedicated ones.
	shared [][]*upConn
	idle   [][]*upConn
	// downUntil: after a failed dial, an upstream is skipped until then
	// (unix nanos).
	downUntil []int64
	next      int // round robin over the upstreams for new clients

	// links are the links per upstream (link.go), nil when there is none,
	// to the configured upstreams and the members learned (owners.go);
	// linkRetryAt: a link is not asked for again before then (unix nanos).
	links       []*linkConn
	linkRetryAt []int64
	dirtyLinks  []*linkConn // links with frames to write this poll (flush)

	dirty        []*upConn // shared connections with requests to write this poll (flush, a task)
	dirtyOwn     []*upConn // clients' own connections with requests to write (flushOwn)
	flushPending bool
	flushTask    gnet.RunnableFunc

	clients map[*clientConn]struct{} // open client connections (closeIdle)
	toWrite []*clientConn            // clients given answers this round
	// Clients' links (clientlink.go): those open (tendLinks), those given
	// frames this round, and those stalled behind their unread answers.
	clientLinks  map[*clientLink]struct{}
	linksToWrite []*clientLink
	stalledLinks []*clientLink
	parsers      wire.ParserPool // lends parsers to the loop's clients
	push         wire.PushBody   // a push's items and queue (queueOf)
	ack          wire.AckBody    // an ack's queue, in front of a cell (queueOf)
	spareEx      []*exchange     // settled exchanges for reuse

	// Clients stalled behind their unread answers (outbound.go), and the
	// check that looks at them again.
	stalled    []*clientConn
	stallArmed bool
	stallTask  gnet.RunnableFunc
}

func (g *Gateway) loopOf(loop gnet.EventLoop) *loopState {
	ls, _ := g.loops.LoadOrCompute(loop, func() (*loopState, bool) {
		n, all := g.nConfigured, len(g.upstreams)
		ls := &loopState{g: g, loop: loop, shared: make([][]*upConn, n), idle: make([][]*upConn, n), downUntil: make([]int64, n), links: make([]*linkConn, all), linkRetryAt: make([]int64, all), clients: map[*clientConn]struct{}{}, clientLinks: map[*clientLink]struct{}{}}
		ls.parsers.Limits = wire.Limits{MaxBody: g.cfg.MaxBodyBytes}
		ls.flushTask = ls.flush
		ls.stallTask = ls.checkStalled
		return ls, false
	})
	return ls
}

// OnBoot reports the loops up.
func (g *Gateway) OnBoot(gnet.Engine) gnet.Action {
	close(g.booted)
	return gnet.None
}

// OnOpen gives a client connection its state; an upstream connection was
// made with its own (upstream.go).
func (g *Gateway) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	switch x := c.Context().(type) {
	case *upConn:
		x.opened(c)
		return nil, gnet.None
	case *linkConn:
		x.opened(c)
		return nil, gnet.None
	}
	cc := newClientConn(g, c)
	c.SetContext(cc)
	g.clients.Add(1)
	return nil, gnet.None
}

// OnClose ends a client connection's exchanges, or fails an upstream
// connection's.
func (g *Gateway) OnClose(c gnet.Conn, err error) gnet.Action {
	switch x := c.Context().(type) {
	case *clientConn:
		x.closed()
		g.clients.Add(-1)
	case *upConn:
		x.failed(err)
	case *linkConn:
		x.failed()
	case *clientLink:
		x.closedConn()
	}
	return gnet.None
}

// OnTraffic reads what arrived on either kind of connection.
func (g *Gateway) OnTraffic(c gnet.Conn) gnet.Action {
	switch x := c.Context().(type) {
	case *clientConn:
		return x.onTraffic()
	case *upConn:
		return x.onTraffic()
	case *linkConn:
		return x.onTraffic()
	case *clientLink:
		return x.onTraffic()
	}
	return gnet.Close
}

// OnTick keeps the clock and closes idle client connections.
func (g *Gateway) OnTick() (time.Duration, gnet.Action) {
	now := time.Now().UnixNano()
	g.now.Store(now)
	g.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		_ = ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ls.closeIdle(now)
			ls.tendLinks(now)
			ls.closeIdleUpstreams(now)
			return nil
		}))
		return true
	})
	return time.Second, gnet.None
}
