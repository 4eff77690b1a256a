package bench

import (
	"os"
	"testing"
)

// The target's CPU is summed over every process of -cpu-pids, and is
// unknown (-1) when one of them cannot be read, never a partial sum.
func TestMarkCPUSumsTheTargetsProcesses(t *testing.T) {
	self := os.Getpid()
	burn := func() {
		x := 0
		for i := range 20_000_000 {
			x += i * i
		}
		_ = x
	}
	burn() // some CPU time to read
	before, _, err := cpuSeconds(self)
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	m := markCPU([]int{self, self}, 0)
	after, _, _ := cpuSeconds(self)
	if m.target < 2*before || m.target > 2*after {
		t.Fatalf("target of [self self] = %v s, want between %v and %v (twice one reading)", m.target, 2*before, 2*after)
	}
	if m.rw < 0 {
		t.Fatalf("read/write system calls of [self self] unknown (%d)", m.rw)
	}
	gone := markCPU([]int{self, 1 << 30}, 0) // no such process
	if gone.target != -1 || gone.sys != -1 || gone.rw != -1 {
		t.Fatalf("with one process unreadable: target %v, sys %v, rw %d; want -1 each", gone.target, gone.sys, gone.rw)
	}
	if none := markCPU(nil, 0); none.target != -1 {
		t.Fatalf("no process: target %v, want -1", none.target)
	}
	cfg := &Config{PID: 7, CPUPIDs: []int{8, 9}}
	if got := targetPIDs(cfg); len(got) != 2 || got[0] != 8 {
		t.Fatalf("targetPIDs with -cpu-pids = %v, want [8 9]", got)
	}
	if got := targetPIDs(&Config{PID: 7}); len(got) != 1 || got[0] != 7 {
		t.Fatalf("targetPIDs with -pid alone = %v, want [7]", got)
	}
}
