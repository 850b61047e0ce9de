// Package serialmeter reads power meters on a serial port: the RDTech
// UM24C, UM25C and UM34C USB meters (request 0xF0, 130-byte big-endian
// reply), and a plain line protocol that a microcontroller can speak.
//
// Line protocol, one reading per line ("\n" or "\r\n"), two decimal
// integer fields separated by a comma:
//
//	<unix_ns>,<microwatts>      e.g. 1735689600123456789,4520000
//	<millivolts>,<milliamps>    e.g. 5012,-903
//
// The first form is recognised by its first field being at least 1e15 (a
// nanosecond time after 12 January 1970); no plausible millivolt reading
// is that large. In that form the meter's timestamps must increase: a
// repeated or older one is dropped as a duplicate. Power may be negative in
// both forms. Lines that do not parse, or run past 128 bytes, are skipped
// and counted (Garbled), and reading resumes at the next newline. A meter
// that sends nothing valid for Timeout makes Next fail with an error that
// says so.
//
// The UM meters give no conversion flag or counter: Next sends one request
// per PollInterval and returns the reply, so two replies may show the same
// display update. A reply that is short or does not start with the model
// id seen at open is treated as lost sync: the input is drained until the
// line is quiet and the request repeated once.
package serialmeter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tarm/serial"
)

// slice bounds a single blocking read, so that ctx and deadlines are
// checked at least this often. tarm/serial's resolution is 100 ms.
const slice = 100 * time.Millisecond

// port is the part of *serial.Port the meters use.
type port interface {
	io.ReadWriteCloser
	Flush() error
}

func openPort(path string, baud int) (port, error) {
	p, err := serial.OpenPort(&serial.Config{Name: path, Baud: baud, ReadTimeout: slice})
	if err != nil {
		return nil, fmt.Errorf("serialmeter: open %s at %d baud: %w", path, baud, err)
	}
	return p, nil
}

// readSome reads what is available within one slice; a timed-out read
// returns 0 bytes and no error.
func readSome(p port, buf []byte) (int, error) {
	n, err := p.Read(buf)
	if errors.Is(err, io.EOF) {
		err = nil // VTIME expiry reads as end of file
	}
	return n, err
}

// readFull reads len(buf) bytes before deadline.
func readFull(ctx context.Context, p port, buf []byte, deadline time.Time) (int, error) {
	got := 0
	for got < len(buf) {
		if err := ctx.Err(); err != nil {
			return got, err
		}
		if time.Now().After(deadline) {
			return got, errTimeout
		}
		n, err := readSome(p, buf[got:])
		got += n
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// drain discards input until the line has been quiet for one slice.
func drain(ctx context.Context, p port, limit time.Duration) {
	var buf [256]byte
	end := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(end) {
		n, err := readSome(p, buf[:])
		if n == 0 || err != nil {
			return
		}
	}
}

var errTimeout = errors.New("timed out")
