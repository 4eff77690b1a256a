package brokertest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes a broker die with the test process.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
