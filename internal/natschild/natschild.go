// Package natschild runs a JetStream server (file storage) as a child
// process of a test binary, for benchmarks that charge the test process's
// CPU to what they measure and must leave the server's out, as a fleet's
// server runs on a machine of its own. The test binary is the child: its
// TestMain calls Serve first.
package natschild

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// env names the storage directory of the server the child runs.
const env = "MESHD_TEST_CHILD_NATS"

// Serve, called first in a TestMain, makes the process the server when it
// was started by Start: it prints the server's client URL, serves until
// its standard input closes, and reports the exit code. ok is false in the
// parent, which goes on to run its tests.
func Serve() (code int, ok bool) {
	dir := os.Getenv(env)
	if dir == "" {
		return 0, false
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child nats server:", err)
		return 1, true
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "child nats server: not ready within 10s")
		return 1, true
	}
	fmt.Println(srv.ClientURL())
	io.Copy(io.Discard, os.Stdin)
	srv.Shutdown()
	return 0, true
}

// Start runs the test binary as the server (its TestMain calling Serve)
// and returns the server's URL; the server stops when the test ends.
func Start(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+tb.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("child nats server: %v", err)
	}
	return strings.TrimSpace(line)
}
