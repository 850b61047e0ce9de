// Package ptypair opens a pseudo-terminal pair so that serial-port code can
// be tested against a simulated device: the device writes and reads the
// master side, the code under test opens the slave path as a serial port.
package ptypair

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open returns the master side and the path of the slave side. The master
// stays in the runtime poller, so Close unblocks a pending Read and read
// deadlines work.
func Open() (master *os.File, slave string, err error) {
	f, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, "", fmt.Errorf("ptypair: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("ptypair: %w", err)
	}
	var n uint32
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr != nil {
			return
		}
		n, ioErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("ptypair: unlock/name: %w", err)
	}
	return f, fmt.Sprintf("/dev/pts/%d", n), nil
}
