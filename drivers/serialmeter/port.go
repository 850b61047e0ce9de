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
// says so (wrapping drivers.ErrStalled). The protocol carries no range, so
// the meter's full scale must be configured (LineConfig.MaxPower).
//
// The UM meters give no conversion flag or counter: Next sends one request
// per PollInterval and returns the reply, so two replies may show the same
// display update. A reply that is short or does not start with the model
// id seen at open is treated as lost sync: the input is drained until the
// line is quiet and the request repeated once.
//
// Both meters are point samplers (drivers.KindPoint): each reading is an
// instant (Start == End), placed within Uncertainty by the serial
// transaction that carried it, and nothing proves what the load did
// between readings. A load that changes faster than the reading rate
// aliases, so their readings can never support a hardware claim, and the
// sampler charges the time between them at the meter's full scale.
//
// The sensor's clock (the Clock in each config, drivers.System by default)
// stamps readings and paces the UM requests through drivers.Pacer. The
// port's own read timeout (100 ms) bounds each blocking read so that ctx
// and the meters' timeouts are checked; a timeout expires on the clock or
// in port time, whichever passes it first (see budget).
package serialmeter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"meshd/drivers"

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

// budget measures one timeout two ways and expires when either passes its
// limit: on the sensor's clock, and in port time (the read timeouts that
// expired plus the wire time of the bytes received). Port time makes the
// timeout hold on a simulated clock, which does not move while a read
// blocks; the clock catches a meter trickling bytes too slowly to add up.
type budget struct {
	clock        drivers.Clock
	start        time.Time
	spent, limit time.Duration
	baud         int
}

func newBudget(clock drivers.Clock, limit time.Duration, baud int) *budget {
	return &budget{clock: clock, start: clock.Now(), limit: limit, baud: baud}
}

// read is readSome, charged to the budget.
func (b *budget) read(p port, buf []byte) (int, error) {
	n, err := readSome(p, buf)
	if n == 0 {
		b.spent += slice
	} else {
		b.spent += wireTime(n, b.baud)
	}
	return n, err
}

func (b *budget) expired() bool {
	return b.spent > b.limit || b.clock.Now().Sub(b.start) > b.limit
}

// readFull reads len(buf) bytes within the budget.
func readFull(ctx context.Context, b *budget, p port, buf []byte) (int, error) {
	got := 0
	for got < len(buf) {
		if err := ctx.Err(); err != nil {
			return got, err
		}
		if b.expired() {
			return got, errTimeout
		}
		n, err := b.read(p, buf[got:])
		got += n
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// drain discards input until the line has been quiet for one slice, or
// the budget is spent.
func drain(ctx context.Context, b *budget, p port) {
	var buf [256]byte
	for ctx.Err() == nil && !b.expired() {
		n, err := b.read(p, buf[:])
		if n == 0 || err != nil {
			return
		}
	}
}

var errTimeout = errors.New("timed out")

// wireTime is how long n bytes take on the line at baud, 8N1 (ten bit
// times a byte): the least time a transaction carrying them can take.
func wireTime(n, baud int) time.Duration {
	return time.Duration(int64(n) * 10 * int64(time.Second) / int64(baud))
}
