// Package ptypair opens a pseudo-terminal pair so that serial-port code can
// be tested against a simulated device: the device writes and reads the
// master side, the code under test opens the slave path as a serial port.
package ptypair

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Pair is an open pseudo-terminal.
type Pair struct {
	// Master is the device's side. It stays in the runtime poller, so
	// Close unblocks a pending Read and read deadlines work.
	Master *os.File
	// Slave is the path the code under test opens as a serial port.
	Slave string

	// hold keeps the slave open for the pair's life: once every slave
	// descriptor has closed, the master's reads fail with EIO, which
	// would end a simulated device before the code under test opens the
	// port, or between two opens.
	hold *os.File
}

// Open opens a pair. The slave starts in raw mode, as a serial line is:
// bytes written to the master before the code under test opens the slave
// wait for it unchanged (no echo, no line editing), so a test can queue a
// meter's output up front instead of racing the code's open.
func Open() (*Pair, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("ptypair: %w", err)
	}
	rc, err := m.SyscallConn()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("ptypair: %w", err)
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
		m.Close()
		return nil, fmt.Errorf("ptypair: unlock/name: %w", err)
	}
	p := &Pair{Master: m, Slave: fmt.Sprintf("/dev/pts/%d", n)}
	if p.hold, err = os.OpenFile(p.Slave, os.O_RDWR|unix.O_NOCTTY, 0); err != nil {
		m.Close()
		return nil, fmt.Errorf("ptypair: open slave: %w", err)
	}
	if err := makeRaw(p.hold); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close closes both sides.
func (p *Pair) Close() error {
	return errors.Join(p.Master.Close(), p.hold.Close())
}

// makeRaw sets the slave's line discipline to raw 8-bit mode, which every
// later open of the slave finds.
func makeRaw(s *os.File) error {
	t, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS)
	if err != nil {
		return fmt.Errorf("ptypair: get termios: %w", err)
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	if err := unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, t); err != nil {
		return fmt.Errorf("ptypair: set raw mode: %w", err)
	}
	return nil
}
