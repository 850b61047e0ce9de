//go:build unix

package subprocess

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tailLines is how many of the child's last output lines are kept for
// error messages; maxLine caps one line so a runner printing without
// newlines cannot grow the ring without bound.
const (
	tailLines = 20
	maxLine   = 512
)

// ring keeps the last lines written to it. exec.Cmd serialises writes when
// Stdout and Stderr are the same writer, but Lines is called from other
// goroutines, hence the mutex.
type ring struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	logLine func(string)
}

func newRing(logLine func(string)) *ring { return &ring{logLine: logLine} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			r.push()
			continue
		}
		if len(r.partial) < maxLine {
			r.partial = append(r.partial, b)
		}
	}
	return len(p), nil
}

func (r *ring) push() {
	line := strings.TrimRight(string(r.partial), "\r")
	r.partial = r.partial[:0]
	if r.logLine != nil {
		r.logLine(line)
	}
	if len(r.lines) == tailLines {
		copy(r.lines, r.lines[1:])
		r.lines = r.lines[:tailLines-1]
	}
	r.lines = append(r.lines, line)
}

// Lines returns the kept lines, including an unterminated last line.
func (r *ring) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.lines...)
	if len(r.partial) > 0 {
		out = append(out, string(r.partial))
	}
	if len(out) > tailLines {
		out = out[len(out)-tailLines:]
	}
	return out
}

// String formats the lines for an error message.
func (r *ring) String() string {
	l := r.Lines()
	if len(l) == 0 {
		return "(no output)"
	}
	return strings.Join(l, " | ")
}

// instance is one run of the runner process.
type instance struct {
	cmd     *exec.Cmd
	pid     int
	base    string // http://127.0.0.1:port
	tail    *ring
	exited  chan struct{} // closed once Wait has returned
	waitErr error         // valid after exited is closed
	healthy time.Time     // when /health first answered 200
	recipe  string
	nCtx    int // the context per slot, as /props states it; 0 unknown
}

func (in *instance) hasExited() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// exitStatus describes how the child ended; valid after exited is closed.
func (in *instance) exitStatus() string {
	if in.waitErr == nil {
		return "exit status 0"
	}
	return in.waitErr.Error()
}

// freePort asks the kernel for an unused loopback port. It is released
// before the child binds it, so another process can take it first; the
// caller retries on a bind failure.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("choosing a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// spawn starts the runner on a given port. The child is not yet healthy.
func spawn(runner string, args, env []string, port int, logLine func(string)) (*instance, error) {
	cmd := exec.Command(runner, append(args, "--port", strconv.Itoa(port))...)
	cmd.Env = childEnviron(env)
	cmd.SysProcAttr = sysProcAttr()
	tail := newRing(logLine)
	cmd.Stdout, cmd.Stderr = tail, tail
	// A grandchild holding the output pipes must not keep Wait from
	// reporting the runner's exit.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting runner %s: %w", runner, err)
	}
	in := &instance{
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		base:   "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		tail:   tail,
		exited: make(chan struct{}),
	}
	go func() {
		in.waitErr = cmd.Wait()
		close(in.exited)
	}()
	return in, nil
}

func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// kill ends the whole process group at once and reaps the runner.
func (in *instance) kill() {
	_ = killGroup(in.pid)
	<-in.exited
}

// terminate asks the runner to shut down (SIGTERM to its group), waits for
// it up to grace or until ctx ends, then SIGKILLs whatever is left of the
// group: a runner that ignored the signal, or helpers it spawned.
func (in *instance) terminate(ctx context.Context, grace time.Duration) error {
	if !in.hasExited() {
		if err := syscall.Kill(-in.pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping engine pid %d: %w", in.pid, err)
		}
		t := time.NewTimer(grace)
		select {
		case <-in.exited:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if err := killGroup(in.pid); err != nil {
		return fmt.Errorf("killing engine process group %d: %w", in.pid, err)
	}
	<-in.exited
	return nil
}

// errHealth is why a start did not reach /health 200; bind says whether
// the child's output shows it lost the race for its port.
type errHealth struct {
	err  error
	bind bool
}

func (e *errHealth) Error() string { return e.err.Error() }
func (e *errHealth) Unwrap() error { return e.err }

// ErrStartTimeout is wrapped when a runner does not become healthy within
// Config.HealthTimeout.
var ErrStartTimeout = errors.New("engine did not become healthy in time")

// ErrExited is wrapped when a runner exits before becoming healthy.
var ErrExited = errors.New("engine exited before becoming healthy")

// waitHealthy polls /health until it answers 200, the child exits, the
// timeout passes or ctx ends. On failure the child is killed and reaped.
func (in *instance) waitHealthy(ctx context.Context, client *http.Client, timeout, interval time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := "no answer yet"
	for {
		status, err := probeHealth(ctx, client, in.base, min(interval*10, 5*time.Second))
		switch {
		case err == nil && status == http.StatusOK:
			if in.hasExited() { // someone else answered on our port
				break
			}
			in.healthy = time.Now()
			return nil
		case err != nil:
			last = err.Error()
		case status == http.StatusServiceUnavailable:
			last = "503 (loading model)"
		default:
			last = fmt.Sprintf("unexpected HTTP %d", status)
		}
		select {
		case <-in.exited:
			_ = killGroup(in.pid) // anything it left behind in its group
			out := in.tail.String()
			return &errHealth{
				err:  fmt.Errorf("%w (pid %d, %s); last output: %s", ErrExited, in.pid, in.exitStatus(), out),
				bind: looksLikeBindFailure(out),
			}
		case <-deadline.C:
			in.kill()
			return &errHealth{err: fmt.Errorf("%w: pid %d gave no /health 200 within %v (last: %s); last output: %s",
				ErrStartTimeout, in.pid, timeout, last, in.tail.String())}
		case <-ctx.Done():
			in.kill()
			return &errHealth{err: fmt.Errorf("waiting for engine pid %d to become healthy: %w", in.pid, ctx.Err())}
		case <-tick.C:
		}
	}
}

func looksLikeBindFailure(out string) bool {
	o := strings.ToLower(out)
	return strings.Contains(o, "bind") || strings.Contains(o, "address already in use")
}

func probeHealth(ctx context.Context, client *http.Client, base string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode, nil
}
