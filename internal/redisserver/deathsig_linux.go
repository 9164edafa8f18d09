package redisserver

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the child die with its parent, so a killed test binary
// leaves no redis-server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
