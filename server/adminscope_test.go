package server

import (
	"net"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for _, c := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"127.8.9.10", true}, {"::1", true}, {"::ffff:127.0.0.1", true},
		{"192.0.2.2", false}, {"10.0.0.1", false}, {"::", false}, {"fd00::2", false}, {"0.0.0.0", false},
	} {
		if got := isLoopback(&net.TCPAddr{IP: net.ParseIP(c.ip), Port: 1}); got != c.want {
			t.Errorf("%s: %v, want %v", c.ip, got, c.want)
		}
	}
	if isLoopback(&net.UnixAddr{Name: "x", Net: "unix"}) || isLoopback(nil) {
		t.Error("a non-TCP address counted as loopback")
	}
}
