package redistest

import (
	"fmt"
	"net/netip"
	"syscall"
)

// reserveRefusingPort binds a TCP socket to a free loopback port without
// listening on it: the kernel refuses connections to the port (a reset)
// and hands it to no other socket until release closes this one.
func reserveRefusingPort() (addr string, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("redistest: a socket for a refusing port: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("redistest: binding a refusing port: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("redistest: the refusing port's address: %w", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return "", nil, fmt.Errorf("redistest: the refusing port's address is a %T", sa)
	}
	ap := netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port))
	return ap.String(), func() { syscall.Close(fd) }, nil
}
