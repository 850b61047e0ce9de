package main

import (
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// childNATSEnv makes the test binary a JetStream server with file storage
// in the directory it names: it prints its client URL and serves until its
// standard input closes. A benchmark that charges this process's CPU to
// the daemon runs the server so, in a process of its own, as a fleet's
// server runs on a machine of its own.
const childNATSEnv = "MESHD_TEST_CHILD_NATS"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childNATSEnv); dir != "" {
		os.Exit(childNATS(dir))
	}
	os.Exit(m.Run())
}

func childNATS(dir string) int {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child nats server:", err)
		return 1
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "child nats server: not ready within 10s")
		return 1
	}
	fmt.Println(srv.ClientURL())
	io.Copy(io.Discard, os.Stdin)
	srv.Shutdown()
	return 0
}
