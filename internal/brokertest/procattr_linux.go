package brokertest

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes a broker die with the test process, so that a test
// run killed halfway leaves no broker behind (Linux; elsewhere a no-op).
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
