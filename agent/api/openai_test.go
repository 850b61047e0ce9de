package api_test

import (
	"testing"

	"meshd/agent/api/apitest"
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
		t.Run(map[bool]string{true: "open", false: "token"}[key == ""], func(t *testing.T) { officialClient(t, openaiRun, key) })
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

// openaiRun: completions, chat, chat stream, completions stream; stop:
// unstopped, stopped, streamed; unique ids: two; embeddings: base64 and
// float; pinned: by name and by alias.
var openaiRun = officialRun{client: "OpenAI", dir: openaiDir, module: "openai", token: "openai", backends: openaiBackends, calls: 13}
