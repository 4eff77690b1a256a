//go:build unix

package relay

import (
	"net"
	"syscall"
)

// descriptorOf is c's file descriptor number.
func descriptorOf(c net.Conn) (int, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if rc.Control(func(d uintptr) { fd = int(d) }) != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// descriptorLimit is the process's soft RLIMIT_NOFILE, read at each accept
// so that a limit changed while the broker runs (prlimit) is the one in
// force. Unlimited (or absurdly high) is no limit.
func descriptorLimit() (int, bool) {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return 0, false
	}
	return int(rl.Cur), true
}
