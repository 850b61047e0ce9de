package auth

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerOf asks the kernel who is at the other end of a unix socket
// (SO_PEERCRED): the credentials the peer had when it connected, which
// it cannot forge.
func PeerOf(c *net.UnixConn) (PeerCred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var uc *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		uc, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return PeerCred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return PeerCred{}, fmt.Errorf("peer credentials (SO_PEERCRED): %w", serr)
	}
	return PeerCred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
}
