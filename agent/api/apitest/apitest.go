// Package apitest runs a node and its HTTP API on loopback for tests,
// assembled as `meshd serve` assembles them (package main of cmd/meshd
// cannot be imported), so that what a test talks to is the daemon's own
// stack.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"meshd/agent"
	"meshd/agent/api"
	"meshd/agent/config"
	"meshd/agent/node"
	"meshd/steward"
)

// RefBackends are two reference engines: no model files, deterministic
// answers; ref-tiny (F1, 40 µJ/token) is cheaper, ref-mid (F3, 300) serves
// a higher floor.
const RefBackends = `
[[backend]]
name = "ref-tiny"
kind = "reference"
fidelity = 1
uj_per_token = 40
work = 8

[[backend]]
name = "ref-mid"
kind = "reference"
fidelity = 3
uj_per_token = 300
work = 16
`

// Stack is a running node and its API.
type Stack struct {
	Node   *node.Node
	API    *api.Server
	Server *httptest.Server
	// URL is the API's base (http://127.0.0.1:port), Addr its host:port.
	URL, Addr string
	// Dir holds the node's state.
	Dir string
}

// Start opens a node from cfg (TOML without the [steward] table, which
// Start adds with a state directory of its own) and serves its API until
// the test ends. opts are passed to the node, with the API's live stream
// told of every serve besides opts.Observe.
func Start(t testing.TB, cfg string, opts node.Options) *Stack {
	t.Helper()
	dir := t.TempDir()
	c, err := config.Parse([]byte(fmt.Sprintf("[steward]\nstate_dir = %q\n%s", filepath.Join(dir, "state"), cfg)), "apitest.toml")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	var srv atomic.Pointer[api.Server]
	outer := opts.Observe
	opts.Observe = func(ev agent.Event) {
		if s := srv.Load(); s != nil {
			s.Served(ev)
		}
		if outer != nil {
			outer(ev)
		}
	}
	var current atomic.Pointer[node.Node]
	metrics := api.NewMetrics(current.Load)
	if opts.Metrics == nil {
		opts.Metrics = metrics
	}
	n, err := node.Open(context.Background(), c, opts)
	if err != nil {
		t.Fatalf("opening the node: %v", err)
	}
	current.Store(n)
	a := api.New(n, api.Options{Metrics: metrics})
	srv.Store(a)
	hs := httptest.NewServer(a)
	t.Cleanup(func() {
		a.Drain() // live streams end, so Close does not wait on them
		hs.Close()
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("closing the node: %v", err)
		}
	})
	return &Stack{Node: n, API: a, Server: hs, URL: hs.URL, Addr: hs.Listener.Addr().String(), Dir: dir}
}

// Logged opens receipt seq from n's own log, under n's key.
func Logged(t testing.TB, n *node.Node, seq uint64) *steward.Opened {
	t.Helper()
	envs, err := n.Stores.Log.Range(context.Background(), seq, 1)
	if err != nil || len(envs) != 1 {
		t.Fatalf("receipt %d from the log: %v (%d)", seq, err, len(envs))
	}
	o, err := steward.OpenEnvelope(envs[0], n.Trusted())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Alter changes the byte skip bytes after the first occurrence of marker
// after the first occurrence of within in data (a report, say), so that a
// test can say which place a verifier must name.
func Alter(t testing.TB, data []byte, within, marker string, skip int) []byte {
	t.Helper()
	return AlterNth(t, data, within, marker, 0, skip)
}

// AlterNth is Alter at marker's n-th occurrence (from 0) after within.
func AlterNth(t testing.TB, data []byte, within, marker string, n, skip int) []byte {
	t.Helper()
	start := bytes.Index(data, []byte(within))
	if start < 0 {
		t.Fatalf("no %q in the report", within)
	}
	at := start
	for k := 0; k <= n; k++ {
		i := bytes.Index(data[at:], []byte(marker))
		if i < 0 {
			t.Fatalf("no %d-th %q after %q in the report", n, marker, within)
		}
		at += i
		if k < n {
			at += len(marker)
		}
	}
	at += len(marker) + skip
	out := bytes.Clone(data)
	switch c := out[at]; {
	case c >= '0' && c <= '8', c >= 'a' && c <= 'y', c >= 'A' && c <= 'Y':
		out[at] = c + 1
	default:
		out[at] = 'a'
	}
	return out
}

// StartBare is Start without the API's metrics and live stream: a node
// and a bare API, as a measurement of the serve path alone wants them.
// The node's context lasts until the test's cleanup has closed it, so
// meters sampling under it run for the test's life.
func StartBare(t testing.TB, cfg string, opts node.Options) *Stack {
	t.Helper()
	dir := t.TempDir()
	c, err := config.Parse([]byte(fmt.Sprintf("[steward]\nstate_dir = %q\n%s", filepath.Join(dir, "state"), cfg)), "apitest.toml")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n, err := node.Open(ctx, c, opts)
	if err != nil {
		cancel()
		t.Fatalf("opening the node: %v", err)
	}
	a := api.New(n, api.Options{})
	hs := httptest.NewServer(a)
	t.Cleanup(func() {
		hs.Close()
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("closing the node: %v", err)
		}
		cancel()
	})
	return &Stack{Node: n, API: a, Server: hs, URL: hs.URL, Addr: hs.Listener.Addr().String(), Dir: dir}
}
