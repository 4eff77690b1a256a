//go:build unix

package client

import (
	"syscall"
	"testing"
)

// reportCPU starts counting the process's CPU time (user and system, every
// thread); the function it answers stops and reports it per op.
func reportCPU(b *testing.B) func() {
	var r0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	return func() {
		var r1 syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
		ns := r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano()
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}
