//go:build !linux

package redisserver

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
