// Package swtpmtest starts a software TPM (swtpm, socket interface) for
// tests of the TPM witness.
package swtpmtest

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Start runs swtpm on a fresh state directory under tb's temporary
// directory and returns the path of its command socket. The sockets are
// created here and handed to swtpm as open descriptors, so the TPM is
// reachable as soon as Start returns (the kernel queues a connection until
// swtpm accepts it): nothing waits for it to come up. swtpm is stopped at
// the end of the test. Without swtpm the test is skipped, loudly.
func Start(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("swtpm")
	if err != nil {
		tb.Skip("SKIPPED: swtpm is not installed (Debian: apt-get install swtpm swtpm-tools); the TPM rollback witness is NOT tested here")
	}
	return StartIn(tb, bin, tb.TempDir())
}

// StartIn is Start with swtpm's binary and its state directory given: a
// second StartIn on the same directory after the first has stopped sees
// the same TPM (its NV counters kept).
func StartIn(tb testing.TB, bin, state string) string {
	tb.Helper()
	dir := tb.TempDir()
	sock := filepath.Join(dir, "tpm.sock")
	cmdf := listen(tb, sock)
	ctrlf := listen(tb, filepath.Join(dir, "ctrl.sock"))
	cmd := exec.Command(bin, "socket", "--tpm2",
		"--server", "type=unixio,fd=3", "--ctrl", "type=unixio,fd=4",
		"--tpmstate", "dir="+state, "--flags", "not-need-init,startup-clear")
	cmd.ExtraFiles = []*os.File{cmdf, ctrlf}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // swtpm logs every disconnect: shown only if the test fails
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start swtpm: %v", err)
	}
	cmdf.Close()
	ctrlf.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("swtpm's output:\n%s", stderr.String())
		}
		cmd.Process.Signal(os.Interrupt)
		if err := <-done; err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				tb.Errorf("swtpm: %v", err)
			}
		}
	})
	return sock
}

// listen creates a listening unix socket at path and returns it as a file
// to hand to a child; the socket file stays when the listener is closed.
func listen(tb testing.TB, path string) *os.File {
	tb.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		tb.Fatalf("listen %s: %v", path, err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	if err != nil {
		tb.Fatalf("listener file: %v", err)
	}
	l.Close()
	return f
}
