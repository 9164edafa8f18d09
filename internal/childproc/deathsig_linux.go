package childproc

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the child die with its parent, so a killed test binary
// leaves no server behind. It keeps the rest of cmd's SysProcAttr.
func setDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
