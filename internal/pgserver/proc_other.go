//go:build !linux

package pgserver

import (
	"errors"
	"os/exec"
	"os/user"
)

func runAsOwner(_ *exec.Cmd, owner *user.User) error {
	if owner != nil {
		return errors.New("pgserver: running PostgreSQL as another user is supported on Linux only: run the tests as a normal user")
	}
	return nil
}
