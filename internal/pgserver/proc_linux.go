package pgserver

import (
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// prepare makes cmd die with its parent, so a killed test binary leaves no
// postgres behind, and run as owner when one is given.
func prepare(cmd *exec.Cmd, owner *user.User) error {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if owner != nil {
		uid, err1 := strconv.ParseUint(owner.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(owner.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("pgserver: user %s has ids %s:%s", owner.Username, owner.Uid, owner.Gid)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	cmd.SysProcAttr = attr
	return nil
}
