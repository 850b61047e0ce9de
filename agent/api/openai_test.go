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

// openaiDir is the OpenAI client conformance script, from this package.
const openaiDir = "../../test/openai"

// TestOfficialOpenAIClient runs the official OpenAI Node client
// (test/openai/test.mjs) against the real server on a TCP port, and then
// checks that the daemon's log holds exactly the receipts the client was
// given: one per call, none sealed that the client never saw. It runs
// against an open node (the client's placeholder key ignored) and
// against one that requires a bearer token, given as the API key.
func TestOfficialOpenAIClient(t *testing.T) {
	for _, key := range []string{"", "mshd_openai-client-key"} {
		t.Run(map[bool]string{true: "open", false: "token"}[key == ""], func(t *testing.T) { officialClient(t, key) })
	}
}

// openaiBackends are the reference backends, ref-mid with an alias, and
// a reference embedding backend.
const openaiBackends = apitest.RefBackends + `aliases = ["mid-alias"]

[[backend]]
name = "ref-embed"
kind = "reference"
fidelity = 1
uj_per_token = 5
embedding = true
`

func officialClient(t *testing.T, key string) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH; the OpenAI client test needs Node.js (make test installs its package)")
	}
	if _, err := os.Stat(filepath.Join(openaiDir, "node_modules", "openai")); err != nil {
		t.Skipf("%s/node_modules is missing: run `make openai-deps` (make test installs it)", openaiDir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := apitest.Start(t, openaiBackends, node.Options{})
	n, url := st.Node, st.URL
	env := append(os.Environ(), "MESHD_API_KEY=")
	if key != "" {
		// Beyond loopback, as a deployment behind a token is.
		guarded := api.New(n, api.Options{Auth: auth.New(&auth.Policy{Tokens: []auth.Token{{Name: "openai", SHA256: auth.HashToken(key), Roles: auth.Roles(auth.Serve)}}})})
		hs := httptest.NewUnstartedServer(guarded)
		hs.Config.ConnContext = auth.ConnContext(auth.Public)
		hs.Start()
		t.Cleanup(func() { guarded.Drain(); hs.Close() })
		url, env = hs.URL, append(env, "MESHD_API_KEY="+key)
	}

	cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(openaiDir, "test.mjs"))
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
	// completions, chat, chat stream, completions stream; stop: unstopped,
	// stopped, streamed; unique ids: two; embeddings: base64 and float;
	// pinned: by name and by alias.
	const calls = 13
	if len(got) != calls {
		t.Fatalf("test.mjs reports %d receipts, want %d:\n%s", len(got), calls, stdout.String())
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
