package e2e

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestIdleFloodNewClientServed: the gateway under a descriptor limit of
// 256 (soft and hard), 300 client connections each served /health once and
// held idle; while they are held, 20 new clients in turn, each keeping its
// connection open once served (more than one shed frees), are each served
// /health 200 within 5 s of its first try (a try closed unanswered is
// tried again on a new connection). The gateway closes its longest-idle
// clients when accepting fails for lack of descriptors (docs/gateway.md,
// "Accepting clients"). Without that, every new client is closed unanswered
// while the flood is held.
func TestIdleFloodNewClientServed(t *testing.T) {
	t.Parallel()
	const limit, flood, clients = 256, 300, 20
	const bound = 5 * time.Second
	b := startBroker(t, nil)
	p := brokertest.New(t, brokertest.Binary(t, gatewayPkg), gatewayEnv([]string{b.URL()}, nil))
	p.LogTail = 4000
	p.NoFile = limit
	p.Start(t)
	addr := strings.TrimPrefix(p.URL(), "http://")

	// The flood: each connection served /health once (3 s given), every
	// one kept open on this side.
	var served atomic.Int32
	conns := brokertest.Hold(addr, flood, func(c net.Conn) bool {
		if brokertest.HealthOn(c, 3*time.Second) == 200 {
			served.Add(1)
		}
		return true
	})
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if served.Load() < limit/2 {
		t.Fatalf("only %d of the flood's %d connections were served: the flood did not fill the descriptors", served.Load(), flood)
	}

	kept, tries := brokertest.NewClients(addr, clients, bound)
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	if len(kept) < clients {
		t.Fatalf("new client %d of %d: not served /health 200 within %v (%d tries so far) while %d idle connections are held", len(kept)+1, clients, bound, tries, len(conns))
	}
	t.Logf("flood: %d connections, %d served; %d new clients served in %d tries", flood, served.Load(), clients, tries)
}
