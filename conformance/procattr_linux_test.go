package conformance

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a broker die with the test process, so that a test
// binary killed by a timeout leaves no broker behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
