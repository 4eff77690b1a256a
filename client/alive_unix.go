//go:build unix

package client

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still open: a non-blocking
// peek finds nothing to read (EAGAIN). End of stream (the broker closed it
// while it rested, e.g. after a restart) or unexpected bytes mean it must
// not be reused. It costs one system call per lease, and saves the error a
// call would otherwise meet on a connection that is already gone.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		_ = n
		ok = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && ok
}
