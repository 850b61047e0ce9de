package api_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/auth"
	"meshd/steward"
)

// officialRun names one official client's conformance script: where it
// lives, the npm package it drives, the backends it expects, and how
// many receipts it must be given.
type officialRun struct {
	client   string // "OpenAI", "Ollama": for messages
	dir      string // the script's directory, from this package
	module   string // the npm package under node_modules, and the make target's stem
	token    string // the bearer token's name in the guarded policy
	backends string
	calls    int
}

// officialClient runs r's test.mjs with Node.js against the real server
// on a TCP port (behind a bearer token when key is set, beyond loopback
// as a deployment behind a token is), and checks that the daemon's log
// holds exactly the receipts the client printed: one per call, none
// sealed that the client never saw.
func officialClient(t *testing.T, r officialRun, key string) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not on PATH; the %s client test needs Node.js (make test installs its package)", r.client)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "node_modules", r.module)); err != nil {
		t.Skipf("%s/node_modules is missing: run `make %s-deps` (make test installs it)", r.dir, r.module)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := apitest.Start(t, r.backends, node.Options{})
	n, url := st.Node, st.URL
	env := append(os.Environ(), "MESHD_API_KEY=")
	if key != "" {
		guarded := api.New(n, api.Options{Auth: auth.New(&auth.Policy{Tokens: []auth.Token{{Name: r.token, SHA256: auth.HashToken(key), Roles: auth.Roles(auth.Serve)}}})})
		hs := httptest.NewUnstartedServer(guarded)
		hs.Config.ConnContext = auth.ConnContext(auth.Public)
		hs.Start()
		t.Cleanup(func() { guarded.Drain(); hs.Close() })
		url, env = hs.URL, append(env, "MESHD_API_KEY="+key)
	}

	cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(r.dir, "test.mjs"))
	cmd.Env = append(env, "MESHD_URL="+url)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("test.mjs: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("test.mjs:\n%s%s", stdout.String(), stderr.String())

	// The receipts the script was given, by sequence.
	got := map[uint64]string{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "receipt" {
			continue
		}
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("test.mjs printed %q: %v", sc.Text(), err)
		}
		if prev, dup := got[seq]; dup {
			t.Fatalf("test.mjs was given sequence %d twice (%s and %s)", seq, prev, f[2])
		}
		got[seq] = f[2]
	}
	if len(got) != r.calls {
		t.Fatalf("test.mjs reports %d receipts, want %d:\n%s", len(got), r.calls, stdout.String())
	}
	log := n.Stores.Log
	if d := log.Durable(); d != uint64(len(got)) {
		t.Fatalf("the log holds %d receipts, the client received %d", d, len(got))
	}
	envs, err := log.Range(ctx, 0, len(got))
	if err != nil {
		t.Fatalf("reading the log: %v", err)
	}
	for i, env := range envs {
		o, err := steward.OpenEnvelope(env, n.Trusted())
		if err != nil {
			t.Fatalf("receipt %d in the log: %v", i, err)
		}
		if id := got[o.Receipt.Sequence]; id != o.ID.String() {
			t.Errorf("log receipt %d is %s; the client was given %q", o.Receipt.Sequence, o.ID, id)
		}
	}
}
