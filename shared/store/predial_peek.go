//go:build linux || darwin

package store

import (
	"net"
	"syscall"
)

// open tells, without waiting, whether the server still holds c open: it
// sends nothing before the startup message, so a peek that finds no data
// yet is an open connection; end of file, an error or data are not.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var waiting bool
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && waiting
}
