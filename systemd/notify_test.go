package systemd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// recvTimeout bounds every read from the fake notify socket so that a
// missing datagram fails the test instead of hanging it; nothing waits for
// it to pass.
const recvTimeout = 10 * time.Second

// fakeSystemd is the service manager's end of $NOTIFY_SOCKET.
type fakeSystemd struct {
	t    *testing.T
	conn *net.UnixConn
	addr string
}

func listenAt(t *testing.T, name string) *fakeSystemd {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen %s: %v", name, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fakeSystemd{t: t, conn: conn, addr: name}
}

// newFakeSystemd listens on a socket file in t.TempDir().
func newFakeSystemd(t *testing.T) *fakeSystemd {
	return listenAt(t, filepath.Join(t.TempDir(), "notify"))
}

// recv returns the next datagram.
func (f *fakeSystemd) recv() string {
	f.t.Helper()
	if err := f.conn.SetReadDeadline(time.Now().Add(recvTimeout)); err != nil {
		f.t.Fatal(err)
	}
	buf := make([]byte, 4096)
	k, _, err := f.conn.ReadFromUnix(buf)
	if err != nil {
		f.t.Fatalf("no notification arrived: %v", err)
	}
	return string(buf[:k])
}

// expect asserts that the next datagram is exactly want.
func (f *fakeSystemd) expect(want string) {
	f.t.Helper()
	if got := f.recv(); got != want {
		f.t.Fatalf("datagram = %q, want %q", got, want)
	}
}

// env is a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestNotificationsAreExactDatagrams(t *testing.T) {
	sd := newFakeSystemd(t)
	n := NewNotifier(env(map[string]string{EnvNotifySocket: sd.addr}))
	if !n.Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
	}
	steps := []struct {
		send func() error
		want string
	}{
		{func() error { return n.Ready("") }, "READY=1"},
		{func() error { return n.Ready("serving on 127.0.0.1:8477") }, "READY=1\nSTATUS=serving on 127.0.0.1:8477"},
		{func() error { return n.Status("3 serves in flight") }, "STATUS=3 serves in flight"},
		{func() error { return n.Status("") }, "STATUS="},
		// A newline would start another assignment (here a forged READY=1).
		{func() error { return n.Status("a\nREADY=1") }, "STATUS=a READY=1"},
		{func() error { return n.Stopping("draining 2 serves") }, "STOPPING=1\nSTATUS=draining 2 serves"},
		{func() error { return n.Stopping("") }, "STOPPING=1"},
	}
	for i, s := range steps {
		if err := s.send(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		sd.expect(s.want)
	}
}

func TestReloadingCarriesMonotonicTime(t *testing.T) {
	sd := newFakeSystemd(t)
	n := NewNotifier(env(map[string]string{EnvNotifySocket: sd.addr}))
	before := monotonicUsec(t)
	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	after := monotonicUsec(t)
	got := sd.recv()
	rest, ok := strings.CutPrefix(got, "RELOADING=1\nMONOTONIC_USEC=")
	if !ok {
		t.Fatalf("datagram = %q, want RELOADING=1 then MONOTONIC_USEC=", got)
	}
	us, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		t.Fatalf("MONOTONIC_USEC=%q: %v", rest, err)
	}
	if us < before || us > after {
		t.Fatalf("MONOTONIC_USEC=%d outside [%d, %d] (CLOCK_MONOTONIC around the call)", us, before, after)
	}
	if err := n.Ready("reloaded"); err != nil {
		t.Fatal(err)
	}
	sd.expect("READY=1\nSTATUS=reloaded")
}

func monotonicUsec(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() / 1000
}

func TestAbstractNamespaceSocket(t *testing.T) {
	// '@' names Linux's abstract namespace: no file, the name is unique
	// to this test run.
	name := fmt.Sprintf("@meshd-systemd-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	sd := listenAt(t, name)
	n := NewNotifier(env(map[string]string{EnvNotifySocket: name}))
	if err := n.Ready("abstract"); err != nil {
		t.Fatal(err)
	}
	sd.expect("READY=1\nSTATUS=abstract")
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abstract socket left a file %q behind (stat: %v)", name, err)
	}
}

func TestNoNotifySocketIsANoOp(t *testing.T) {
	for _, n := range []*Notifier{
		NewNotifier(env(map[string]string{
			// A watchdog without a socket to ping is no watchdog.
			EnvWatchdogUSec: "30000000",
			EnvWatchdogPID:  strconv.Itoa(os.Getpid()),
		})),
		nil,
	} {
		if n.Enabled() {
			t.Fatal("Enabled() = true without NOTIFY_SOCKET")
		}
		for name, call := range map[string]func() error{
			"Ready":     func() error { return n.Ready("x") },
			"Reloading": n.Reloading,
			"Stopping":  func() error { return n.Stopping("x") },
			"Status":    func() error { return n.Status("x") },
		} {
			if err := call(); err != nil {
				t.Errorf("%s without NOTIFY_SOCKET: %v", name, err)
			}
		}
		if d := n.WatchdogInterval(); d != 0 {
			t.Errorf("WatchdogInterval() = %v without NOTIFY_SOCKET", d)
		}
		// Returns at once: the context is never cancelled and alive must
		// never be called.
		n.Watchdog(context.Background(), func() error {
			t.Error("alive called without a watchdog")
			return nil
		}, nil)
	}
}

func TestUnsupportedSocketAddressFails(t *testing.T) {
	n := NewNotifier(env(map[string]string{EnvNotifySocket: "vsock:2:1234"}))
	err := n.Ready("")
	if err == nil || !strings.Contains(err.Error(), "vsock:2:1234") {
		t.Fatalf("Ready with a vsock NOTIFY_SOCKET: err = %v, want one naming the address", err)
	}
}

func TestMissingSocketFails(t *testing.T) {
	n := NewNotifier(env(map[string]string{EnvNotifySocket: filepath.Join(t.TempDir(), "gone")}))
	if err := n.Ready(""); err == nil {
		t.Fatal("Ready to a socket nobody listens on returned nil")
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"30000000", self, 30 * time.Second},
		{"30000000", "", 30 * time.Second}, // WATCHDOG_PID is optional
		{"1", self, time.Microsecond},
		{"", self, 0},
		{"0", self, 0},
		{"-5", self, 0},
		{"30s", self, 0},
		{"99999999999999999999", self, 0},
		{"30000000", "1", 0}, // meant for another process (PID 1 is never a test)
		{"30000000", "x", 0},
	} {
		n := NewNotifier(env(map[string]string{
			EnvNotifySocket: "/nonexistent/notify",
			EnvWatchdogUSec: c.usec,
			EnvWatchdogPID:  c.pid,
		}))
		if got := n.WatchdogInterval(); got != c.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: WatchdogInterval() = %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}

// watchdogRig drives Watchdog one tick at a time: each step sends a tick,
// then the result alive returns for it, both over unbuffered channels, so
// the test and the watchdog move in lockstep and nothing depends on time.
type watchdogRig struct {
	t       *testing.T
	sd      *fakeSystemd
	n       *Notifier
	period  time.Duration
	ticks   chan time.Time
	results chan error
	stalls  chan error
	cancel  context.CancelFunc
	done    chan struct{}
}

func newWatchdogRig(t *testing.T) *watchdogRig {
	r := &watchdogRig{
		t:       t,
		sd:      newFakeSystemd(t),
		ticks:   make(chan time.Time),
		results: make(chan error),
		stalls:  make(chan error, 16),
		done:    make(chan struct{}),
	}
	r.n = NewNotifier(env(map[string]string{
		EnvNotifySocket: r.sd.addr,
		EnvWatchdogUSec: "30000000",
		EnvWatchdogPID:  strconv.Itoa(os.Getpid()),
	}))
	r.n.Tick = func(p time.Duration) <-chan time.Time {
		r.period = p
		return r.ticks
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		alive := func() error {
			select {
			case err := <-r.results:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		r.n.Watchdog(ctx, alive, func(err error) { r.stalls <- err })
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// step delivers one tick whose liveness check returns err. When step
// returns, the watchdog has received the tick and alive has returned; the
// ping (if any) may still be on its way, which is why assertions read the
// socket instead of looking at state.
func (r *watchdogRig) step(err error) {
	r.t.Helper()
	select {
	case r.ticks <- time.Time{}:
	case <-time.After(recvTimeout):
		r.t.Fatal("watchdog did not take the tick")
	}
	select {
	case r.results <- err:
	case <-time.After(recvTimeout):
		r.t.Fatal("watchdog did not call alive after the tick")
	}
}

// settle returns once the previous step has been handled completely (its
// ping sent or its stall reported): the watchdog only takes the next tick
// after finishing the last one. The tick it sends is answered by ctx's end
// or by the next step's result.
func (r *watchdogRig) settle() {
	r.t.Helper()
	select {
	case r.ticks <- time.Time{}:
	case <-time.After(recvTimeout):
		r.t.Fatal("watchdog did not come back for the next tick")
	}
}

func (r *watchdogRig) expectStalls(want int) []error {
	r.t.Helper()
	if got := len(r.stalls); got != want {
		r.t.Fatalf("onStall called %d times, want %d", got, want)
	}
	var errs []error
	for range want {
		errs = append(errs, <-r.stalls)
	}
	return errs
}

func TestWatchdogPingsOnlyWhileAlive(t *testing.T) {
	r := newWatchdogRig(t)
	errWedged := errors.New("serve loop wedged")

	r.step(nil)
	r.sd.expect("WATCHDOG=1")
	if r.period != 15*time.Second {
		t.Fatalf("tick period = %v, want half of WatchdogSec=30s", r.period)
	}

	// Three failing checks: one stall episode, reported once, and no
	// datagram at all. Datagrams on a unix socket arrive in order, so if
	// any of these ticks had pinged, that ping would be read before the
	// one sent after recovery.
	r.step(errWedged)
	r.step(errWedged)
	r.step(errWedged)
	r.settle()
	if errs := r.expectStalls(1); !errors.Is(errs[0], errWedged) {
		t.Fatalf("onStall got %v, want %v", errs[0], errWedged)
	}

	// Recovery: the pings resume with the first passing check.
	r.results <- nil
	r.sd.expect("WATCHDOG=1")
	r.step(nil)
	r.sd.expect("WATCHDOG=1")

	// A new failure after a delivered ping is a new episode.
	r.step(errWedged)
	r.settle()
	r.expectStalls(1)
	r.results <- nil
	r.sd.expect("WATCHDOG=1")

	// Only the watchdog's pings went out: a marker sent now is the next
	// datagram.
	if err := r.n.Status("marker"); err != nil {
		t.Fatal(err)
	}
	r.sd.expect("STATUS=marker")

	r.cancel()
	select {
	case <-r.done:
	case <-time.After(recvTimeout):
		t.Fatal("Watchdog did not return after ctx ended")
	}
	r.expectStalls(0)
}

func TestWatchdogReportsUndeliveredPing(t *testing.T) {
	r := newWatchdogRig(t)
	r.step(nil)
	r.sd.expect("WATCHDOG=1")

	// systemd's end goes away: alive passes but the ping cannot be sent.
	r.sd.conn.Close()
	os.Remove(r.sd.addr)
	r.step(nil)
	r.step(nil)
	r.settle()
	errs := r.expectStalls(1)
	if !errors.Is(errs[0], ErrNoPing) {
		t.Fatalf("onStall got %v, want ErrNoPing", errs[0])
	}
}

func TestWatchdogEndsWithItsTickChannel(t *testing.T) {
	sd := newFakeSystemd(t)
	n := NewNotifier(env(map[string]string{EnvNotifySocket: sd.addr, EnvWatchdogUSec: "2000000"}))
	ticks := make(chan time.Time, 1)
	ticks <- time.Time{}
	close(ticks)
	n.Tick = func(time.Duration) <-chan time.Time { return ticks }
	n.Watchdog(context.Background(), nil, nil) // nil alive always passes
	sd.expect("WATCHDOG=1")
}

func TestWatchdogWithRealTicker(t *testing.T) {
	// The production path: a time.Ticker at half of a 2 ms interval. The
	// test waits for pings to arrive, never for time to pass.
	sd := newFakeSystemd(t)
	n := NewNotifier(env(map[string]string{EnvNotifySocket: sd.addr, EnvWatchdogUSec: "2000"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Watchdog(ctx, func() error { return nil }, nil)
	}()
	sd.expect("WATCHDOG=1")
	sd.expect("WATCHDOG=1")
	cancel()
	<-done
}
