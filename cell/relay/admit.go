package relay

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Admission: what an unauthenticated connection may cost the process
// before it has proved the secret (docs/cell-relay.md, "Bounded before
// authentication"). Each accepted connection holds a descriptor and a
// goroutine for as long as its handshake lasts (HandshakeTimeout), so the
// handshakes in progress are capped in total and per source address, and
// a connection is not taken at all when the process is close to its
// descriptor limit: the relay port must never starve the public port. A
// connection over any bound is closed at once, before a byte is written.

// Defaults of the admission bounds. A member dials one link per event loop
// and two for its fan-out client, possibly all at once when it starts
// relaying under load: 32 per address leaves room for a member with 30
// loops; 128 in total lets four such members handshake at once.
const (
	defaultMaxHandshakes        = 128
	defaultMaxHandshakesPerAddr = 32
)

// admission counts the handshakes in progress.
type admission struct {
	max, perAddr int
	// limit and reserve: see ServerConfig.DescriptorLimit and
	// DescriptorReserve.
	limit, reserve int

	mu     sync.Mutex
	total  int
	byAddr map[netip.Addr]int

	shed    atomic.Int64 // connections closed at accept by a bound
	lastLog atomic.Int64 // unix nanos of the last shedding logged
}

// Why a connection was shed (the log says which bound).
const (
	shedNone = iota
	shedTotal
	shedAddr
	shedDescriptors
)

var shedReasons = [...]string{
	shedTotal:       "handshakes in progress at their bound (MaxHandshakes)",
	shedAddr:        "handshakes in progress from this address at their bound (MaxHandshakesPerAddr)",
	shedDescriptors: "the process is within DescriptorReserve of its descriptor limit",
}

// admit takes a handshake slot for c, or reports why there is none. A
// taken slot is given back with release(ip) when the handshake ends.
func (a *admission) admit(c net.Conn) (ip netip.Addr, reason int) {
	if a.nearDescriptorLimit(c) {
		return ip, shedDescriptors
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip = ta.AddrPort().Addr().Unmap()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.max {
		return ip, shedTotal
	}
	if a.byAddr[ip] >= a.perAddr {
		return ip, shedAddr
	}
	a.total++
	a.byAddr[ip]++
	return ip, shedNone
}

// release gives back the slot admit took for ip.
func (a *admission) release(ip netip.Addr) {
	a.mu.Lock()
	a.total--
	if n := a.byAddr[ip] - 1; n > 0 {
		a.byAddr[ip] = n
	} else {
		delete(a.byAddr, ip)
	}
	a.mu.Unlock()
}

// inProgress is the number of handshakes in progress.
func (a *admission) inProgress() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// nearDescriptorLimit reports whether c's descriptor lies within reserve
// of the descriptor limit. The kernel gives an accepted connection the
// lowest free descriptor, so every number below c's is in use: a number
// at or past limit − reserve means fewer than reserve descriptors were
// free. (The converse does not hold: a low number may fill a hole left by
// a closed connection while many higher ones are in use; the handshake
// caps bound what the relay can take then.)
func (a *admission) nearDescriptorLimit(c net.Conn) bool {
	fd, ok := descriptorOf(c)
	if !ok {
		return false
	}
	limit := a.limit
	if limit <= 0 {
		if limit, ok = descriptorLimit(); !ok {
			return false
		}
	}
	return fd >= limit-reserveFor(a.reserve, limit)
}

// reserveFor is the descriptors kept for the public port under limit: the
// configured reserve, or by default an eighth of the limit, 16 to 1,024 (128
// under the usual `ulimit -n 1024`).
func reserveFor(reserve, limit int) int {
	if reserve > 0 {
		return reserve
	}
	return min(max(limit/8, 16), 1024)
}

// logShed logs a shed connection at most once per refusalLogEvery, so
// that a flood cannot flood the log (Shed counts them all).
func (s *Server) logShed(c net.Conn, reason int) {
	total := s.adm.shed.Add(1)
	if s.cfg.OnShed != nil {
		s.cfg.OnShed()
	}
	now := time.Now().UnixNano()
	if last := s.adm.lastLog.Load(); now-last >= int64(refusalLogEvery) && s.adm.lastLog.CompareAndSwap(last, now) {
		s.cfg.Logger.Warn("relay connection closed before its handshake", "peer", c.RemoteAddr().String(),
			"why", shedReasons[reason], "shed_total", total)
	}
}
