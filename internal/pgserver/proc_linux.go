package pgserver

import (
	"fmt"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// runAsOwner makes cmd run as owner, when one is given.
func runAsOwner(cmd *exec.Cmd, owner *user.User) error {
	if owner == nil {
		return nil
	}
	uid, err1 := strconv.ParseUint(owner.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(owner.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("pgserver: user %s has ids %s:%s", owner.Username, owner.Uid, owner.Gid)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return nil
}
