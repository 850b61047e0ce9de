package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Environment variables the service manager sets for a Type=notify service.
const (
	EnvNotifySocket = "NOTIFY_SOCKET"
	EnvWatchdogUSec = "WATCHDOG_USEC"
	EnvWatchdogPID  = "WATCHDOG_PID"
)

// Notifier sends readiness, status and watchdog notifications to the
// service manager. Build it with NewNotifier; a nil *Notifier, and one
// built without $NOTIFY_SOCKET, does nothing and returns nil from every
// method. Its methods are safe for concurrent use: each notification is
// written through its own socket.
type Notifier struct {
	// Tick returns the channel Watchdog waits on between liveness checks,
	// given the period (half the watchdog interval). Nil means a
	// time.Ticker, stopped when Watchdog returns. Tests set it to drive
	// the watchdog one tick at a time. Set it before calling Watchdog.
	Tick func(period time.Duration) <-chan time.Time

	addr     *net.UnixAddr // nil: no notify socket, every call is a no-op
	badAddr  string        // a NOTIFY_SOCKET this package cannot speak to
	watchdog time.Duration // 0: no watchdog for this process
}

// NewNotifier reads $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID
// through getenv (os.Getenv in production; nil means os.Getenv). The
// watchdog is enabled only when WATCHDOG_USEC is a positive number of
// microseconds and WATCHDOG_PID, when set, is this process: a child that
// inherited the variables does not ping on its parent's behalf. A
// malformed WATCHDOG_USEC leaves the watchdog off (systemd never sets
// one). Only unix-socket addresses are spoken (a path, or '@' for the
// abstract namespace); any other $NOTIFY_SOCKET (e.g. systemd ≥ 254's
// vsock:) makes every notification return an error naming it.
func NewNotifier(getenv func(string) string) *Notifier {
	if getenv == nil {
		getenv = os.Getenv
	}
	n := &Notifier{}
	sock := getenv(EnvNotifySocket)
	switch {
	case sock == "":
		return n
	case strings.HasPrefix(sock, "/") || strings.HasPrefix(sock, "@"):
		n.addr = &net.UnixAddr{Name: sock, Net: "unixgram"}
	default:
		n.badAddr = sock
	}
	n.watchdog = watchdogInterval(getenv(EnvWatchdogUSec), getenv(EnvWatchdogPID))
	return n
}

// watchdogInterval follows sd_watchdog_enabled(3): usec must be a positive
// integer, and pid, when present, must be this process.
func watchdogInterval(usec, pid string) time.Duration {
	us, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || us == 0 {
		return 0
	}
	if pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil || p != os.Getpid() {
			return 0
		}
	}
	if us > uint64(1<<63-1)/uint64(time.Microsecond) {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool {
	return n != nil && (n.addr != nil || n.badAddr != "")
}

// WatchdogInterval is the interval systemd expects a WATCHDOG=1 within
// (WatchdogSec=), or 0 when there is no watchdog for this process or no
// notify socket to ping.
func (n *Notifier) WatchdogInterval() time.Duration {
	if !n.Enabled() {
		return 0
	}
	return n.watchdog
}

// Ready tells the service manager that start-up (or a reload) is finished:
// READY=1, with STATUS= when status is not empty.
func (n *Notifier) Ready(status string) error {
	return n.send(daemon.SdNotifyReady, statusLine(status, false))
}

// Reloading tells the service manager that the configuration is being
// reloaded: RELOADING=1 with MONOTONIC_USEC= (the CLOCK_MONOTONIC time in
// µs, which Type=notify-reload requires since systemd 253 and older
// versions ignore). Call Ready when the reload is done.
func (n *Notifier) Reloading() error {
	return n.send(daemon.SdNotifyReloading, strings.TrimSuffix(daemon.SdNotifyMonotonicUsec(), "\n"))
}

// Stopping tells the service manager that shutdown has begun: STOPPING=1,
// with STATUS= when status is not empty.
func (n *Notifier) Stopping(status string) error {
	return n.send(daemon.SdNotifyStopping, statusLine(status, false))
}

// Status sets the free-form status `systemctl status` shows. An empty s
// clears it.
func (n *Notifier) Status(s string) error {
	return n.send(statusLine(s, true))
}

// statusLine is STATUS=s on one line: a newline in s would start another
// assignment, so line breaks become spaces.
func statusLine(s string, always bool) string {
	if s == "" && !always {
		return ""
	}
	return "STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

// send writes the non-empty lines as one datagram.
func (n *Notifier) send(lines ...string) error {
	if !n.Enabled() {
		return nil
	}
	if n.addr == nil {
		return fmt.Errorf("systemd: NOTIFY_SOCKET %q is not a unix socket address; notification not sent", n.badAddr)
	}
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(l)
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("systemd: notify %s: %w", n.addr.Name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return fmt.Errorf("systemd: notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// ErrNoPing wraps a failure to deliver WATCHDOG=1 after alive passed.
var ErrNoPing = errors.New("systemd: watchdog ping not delivered")

// Watchdog keeps the service manager's watchdog fed until ctx ends. Every
// WatchdogInterval/2 it calls alive; only when alive returns nil does it
// send WATCHDOG=1. When alive fails it sends nothing, so that systemd
// kills and restarts a wedged daemon once the interval passes, and it
// reports the error through onStall (which may be nil) once per stall
// episode: the first failure after a delivered ping. A ping that cannot be
// delivered is reported the same way, wrapping ErrNoPing. alive and
// onStall run on Watchdog's goroutine, so a slow alive delays the ping
// (and a stuck one lets the watchdog fire, as it should).
//
// A nil alive always passes; an alive that fails after ctx ended is
// shutdown, not a stall, and is not reported. Watchdog also returns when Tick's channel is
// closed. It returns at once when WatchdogInterval is 0 (no notify socket,
// no WatchdogSec=, or the variables were meant for another process), so
// `go n.Watchdog(ctx, alive, onStall)` is always safe.
func (n *Notifier) Watchdog(ctx context.Context, alive func() error, onStall func(error)) {
	interval := n.WatchdogInterval()
	if interval <= 0 {
		return
	}
	period := interval / 2
	var tick <-chan time.Time
	if n.Tick != nil {
		tick = n.Tick(period)
	} else {
		t := time.NewTicker(period)
		defer t.Stop()
		tick = t.C
	}
	stalled := false
	stall := func(err error) {
		if !stalled && onStall != nil {
			onStall(err)
		}
		stalled = true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-tick:
			if !ok {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		if alive != nil {
			if err := alive(); err != nil {
				if ctx.Err() != nil {
					return // shutting down is not a stall
				}
				stall(err)
				continue
			}
		}
		if err := n.send(daemon.SdNotifyWatchdog); err != nil {
			stall(fmt.Errorf("%w: %w", ErrNoPing, err))
			continue
		}
		stalled = false
	}
}
