//go:build unix

package main

import (
	"fmt"
	"syscall"
)

// raiseFileLimit raises the soft limit on open files to the hard one: a
// fleet of 1,000 replicas × 5 caches holds several thousand connections.
func raiseFileLimit() error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading the open-file limit: %w", err)
	}
	if l.Cur >= l.Max {
		return nil
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("raising the open-file limit to %d: %w", l.Max, err)
	}
	return nil
}
