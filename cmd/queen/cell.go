package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/server"
	"github.com/queenmq/ephemeral/store/storeenv"
)

// cellParts are what a member of a cell runs beside the server (D17): its
// membership, the relay server on the advertised port and the relay
// client. A cell of one has none.
type cellParts struct {
	m   *cell.Membership
	rs  *relay.Server
	rc  *relay.Client
	ln  net.Listener // the relay's, served once the server's loops run (serve)
	log *slog.Logger
}

// serve starts accepting other members' relay connections; called once the
// server has started, since they are served on its event loops.
func (p *cellParts) serve() {
	if p == nil {
		return
	}
	go func() {
		if err := p.rs.Serve(p.ln); err != nil {
			p.log.Error("the relay server stopped", "err", err)
		}
	}()
}

// testRelayDelay names a fault-injection setting read only by the tests
// (not in --help): the owner waits this many milliseconds before serving
// each relayed request, so a test can move ownership while one is in
// flight and see 503 owner_moved (docs/cell.md, "Relaying in the server");
// each held request logs a warning a test can wait for.
const testRelayDelay = "QUEEN_TEST_RELAY_DELAY_MS"

// cellConfig reads the QUEEN_CELL_* variables and refuses what cannot run:
// the cell package's own rules, and a relay port equal to publicPort (PORT,
// its default applied). An unset QUEEN_CELL_PUBLIC_URL is derived from
// HOST and publicPort when HOST names a dialable address.
func cellConfig(getenv func(string) string, publicPort string) (cell.Config, error) {
	cc, err := cell.FromEnv(getenv)
	if err != nil || !cc.Enabled() {
		return cc, err
	}
	if cc.PublicURL == "" {
		cc.PublicURL = cell.DerivePublicURL(getenv("HOST"), publicPort)
	}
	_, port, err := net.SplitHostPort(cc.Advertise)
	if err != nil {
		return cc, fmt.Errorf("QUEEN_CELL_ADVERTISE: %w", err)
	}
	if port == publicPort {
		return cc, fmt.Errorf("QUEEN_CELL_ADVERTISE: port %s is also the public port (PORT); the relay between members listens on the advertised port and needs one of its own", port)
	}
	return cc, nil
}

// startCell joins the cell and starts relaying; the server is attached
// before anything can call it, and must not have started yet.
func startCell(cc cell.Config, delay time.Duration, stcfg storeenv.Choice, e *engine.Engine, srv *server.Server, log *slog.Logger) (*cellParts, error) {
	// The relay's port is bound before joining: a member that joined and
	// then could not listen would move queues to itself (emptying them on
	// their owners) only to leave again.
	ln, err := relayListener(cc)
	if err != nil {
		return nil, err
	}
	if w := unreachableRelay(cc); w != "" {
		log.Warn(w)
	}
	if w := noPublicURL(cc); w != "" {
		log.Warn(w)
	}
	// The relay's bounds before authentication are the package's defaults
	// (docs/cell-relay.md); what it refuses and sheds is counted in the
	// server's metrics (attached below, before Serve runs).
	rs, err := relay.NewServer(relay.ServerConfig{
		Secret:    cc.Secret,
		Adopt:     srv.AdoptRelayConn,
		OnRefused: srv.CountRelayRefused,
		OnShed:    srv.CountRelayShed,
		Logger:    log,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	// A relay connection silent for a member timeout is given up on, as the
	// cell gives up on the member; pinged five times in that span (the
	// relay's defaults, 1 s and 5 s, at the default timeout). rc carries
	// the fan-out of reset and delete; requests are relayed on the loops.
	rc, err := relay.NewClient(relay.ClientConfig{
		Secret:       cc.Secret,
		PingInterval: cc.MemberTimeout / 5,
		PingTimeout:  cc.MemberTimeout,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv.AttachCell(rc, server.RelayOptions{
		Secret:         cc.Secret,
		PingInterval:   cc.MemberTimeout / 5,
		PingTimeout:    cc.MemberTimeout,
		FanOutDeadline: cc.MemberTimeout,
		Delay:          delay,
	})
	m, err := cell.Start(cell.Options{
		Config:       cc,
		DatabaseURL:  stcfg.Postgres.URL,
		Schema:       stcfg.Postgres.Schema,
		Incarnation:  e.Incarnation(),
		OnChange:     srv.CellChanged,
		BeforeChange: srv.CellChanging,
		Logger:       log,
	})
	if err != nil {
		ln.Close()
		rc.Close()
		return nil, fmt.Errorf("join the cell: %w", err)
	}
	srv.SetMembership(m)
	log.Info("cell member", "advertise", cc.Advertise, "public_url", cc.PublicURL, "heartbeat", cc.Heartbeat, "member_timeout", cc.MemberTimeout)
	return &cellParts{m: m, rs: rs, rc: rc, ln: ln, log: log}, nil
}

// relayListener binds the relay's port: QUEEN_CELL_ADVERTISE's port on
// QUEEN_CELL_LISTEN's host (default HOST; neither set: every interface).
func relayListener(cc cell.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", cc.RelayAddr())
	if err != nil {
		return nil, fmt.Errorf("the relay's listener (QUEEN_CELL_ADVERTISE's port on QUEEN_CELL_LISTEN, default HOST): %w", err)
	}
	return ln, nil
}

// unreachableRelay says why the other members may not reach a relay bound
// to a loopback address (QUEEN_CELL_LISTEN, or HOST, which it follows by
// default) while the advertised address is not one: "" when there is
// nothing to say. A warning, not a refusal: a local proxy may forward to
// it.
func unreachableRelay(cc cell.Config) string {
	if !isLoopback(cc.Listen) {
		return ""
	}
	host, _, _ := net.SplitHostPort(cc.Advertise)
	if isLoopback(host) {
		return "" // a cell on one machine
	}
	return fmt.Sprintf("the relay listens on %s (QUEEN_CELL_LISTEN, default HOST) but QUEEN_CELL_ADVERTISE=%s: members on other hosts cannot reach it unless something local forwards to it; set QUEEN_CELL_LISTEN to an address they reach",
		cc.RelayAddr(), cc.Advertise)
}

// noPublicURL says that a member publishes no public URL (neither
// QUEEN_CELL_PUBLIC_URL nor a dialable HOST gave one): "" when it does. A
// warning, not a refusal: the member serves and relays as ever, and
// clients that route by owner send its queues' calls through any member.
func noPublicURL(cc cell.Config) string {
	if !cc.Enabled() || cc.PublicURL != "" {
		return ""
	}
	return "this member publishes no public URL: QUEEN_CELL_PUBLIC_URL is unset and HOST names no address a client can dial (unset, 0.0.0.0 or ::); clients cannot send this member's queues to it directly, and other members relay them. Set QUEEN_CELL_PUBLIC_URL to the URL clients reach this broker's port at, e.g. http://10.0.0.1:6632"
}

// isLoopback: "localhost" or a loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// leave takes this member out of the cell (its row deleted, the others
// notified at once).
func (p *cellParts) leave(ctx context.Context) {
	if p != nil {
		_ = p.m.Stop(ctx)
	}
}

// stop closes the relay and leaves the cell if leave did not run; called
// before the store closes.
func (p *cellParts) stop(ctx context.Context) {
	if p == nil {
		return
	}
	p.ln.Close() // if serve never ran (rs.Close closes it otherwise)
	p.rs.Close()
	p.rc.Close()
	_ = p.m.Stop(ctx)
}
