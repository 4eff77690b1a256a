//go:build unix

package relay

import (
	"syscall"
	"testing"
)

// With no DescriptorLimit configured, the limit is the process's soft
// RLIMIT_NOFILE, read at each accept, so a limit changed while the broker
// runs is the one in force (ServerConfig; descriptor_unix.go).
func TestDescriptorLimitIsTheSoftRlimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	saved := rl
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved) })
	for _, soft := range []uint64{4096, 1024} {
		rl.Cur = min(soft, rl.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
		if got, ok := descriptorLimit(); !ok || got != int(rl.Cur) {
			t.Errorf("soft limit %d: descriptorLimit() = %d, %v", rl.Cur, got, ok)
		}
	}
}
