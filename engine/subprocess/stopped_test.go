//go:build unix

package subprocess

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// waitStopped returns once every thread of pid is in the stopped state.
// kill(SIGSTOP) returns before the stop takes effect: one thread dequeues
// the signal and only then stops the others, so on a loaded machine the
// child's other threads can still answer a request written right after
// the kill. The wait polls the threads' states (Linux's /proc, else ps)
// until all are stopped; it is a synchronisation, not a timing assumption,
// and fails the test only if the child never stops.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		all, err := threadsStopped(pid)
		if err != nil {
			t.Fatalf("state of pid %d: %v", pid, err)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not stop within 30 s of SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// threadsStopped reports whether every thread of pid is stopped ('T').
func threadsStopped(pid int) (bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		if _, perr := os.Stat("/proc/self/task"); perr == nil {
			return false, err
		}
		// No /proc: ps names the process's state, the first letter T once
		// the whole process is stopped.
		out, err := exec.Command("ps", "-o", "state=", "-p", strconv.Itoa(pid)).Output()
		if err != nil {
			return false, err
		}
		return bytes.HasPrefix(bytes.TrimSpace(out), []byte("T")), nil
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return false, err
		}
		// The state follows the command name's closing parenthesis, which
		// is the last one: the name itself may hold parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false, &os.PathError{Op: "parse", Path: dir, Err: os.ErrInvalid}
		}
		if s := stat[i+2]; s != 'T' && s != 't' {
			return false, nil
		}
	}
	return true, nil
}
