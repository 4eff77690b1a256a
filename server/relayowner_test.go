package server

import (
	"net"
	"testing"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
)

// relayOwner is a broker serving the relay port as cmd/queen wires it: a
// relay.Server that passes the handshake and hands every connection to
// the broker's loops (AdoptRelayConn). It owns, in its view, the queues
// queueOf gives to selfAddr.
type relayOwner struct {
	*testServer
	addr string     // the relay port
	view *cell.View // the owner's view: self is selfAddr
	rs   *relay.Server
}

// startRelayOwner starts a relayOwner relaying (what it does not own) with
// opts.
func startRelayOwner(t testing.TB, opts RelayOptions) *relayOwner {
	t.Helper()
	m := twoMembers("127.0.0.1:2")
	ts := startLanding(t, m, opts)
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: ts.s.AdoptRelayConn})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	return &relayOwner{testServer: ts, addr: ln.Addr().String(), view: m.View(), rs: rs}
}

// queue is a queue of the default tenant that the owner owns.
func (o *relayOwner) queue(t testing.TB) string { return queueOf(t, o.view, selfAddr) }
