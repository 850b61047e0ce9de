package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/agent/api/apitest"
	"meshd/agent/api/client"
	"meshd/agent/node"
	"meshd/rag"
	"meshd/steward"
)

func post(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: %v: %s", url, err, raw)
	}
	return resp.StatusCode, out
}

// openRecord checks an answer's record against the steward key: the
// envelope verifies, and the document is what its request_id addresses.
func openRecord(t *testing.T, st *apitest.Stack, ans map[string]any) (*steward.Receipt, []byte) {
	t.Helper()
	env, err1 := base64.StdEncoding.DecodeString(fmt.Sprint(ans["envelope"]))
	doc, err2 := base64.StdEncoding.DecodeString(fmt.Sprint(ans["document"]))
	if err1 != nil || err2 != nil {
		t.Fatalf("answer %v", ans)
	}
	o, err := steward.OpenEnvelope(env, st.Node.Key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if err := steward.CheckRecordDocument(o.Receipt, doc); err != nil {
		t.Fatal(err)
	}
	return o.Receipt, doc
}

// A run over HTTP: opened with the node's inventory bound, served
// concurrently through /v1/serve and the OpenAI endpoint naming it, a run
// not open refused with 409 before any work, closed with the daemon's
// count; a run left open is closed as abandoned by the agent's clock and,
// at shutdown, by the node.
func TestRunsOverHTTP(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_767_225_600, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st := apitest.Start(t, apitest.RefBackends, node.Options{Clock: clock})
	open := map[string]any{"workload_sha256": strings.Repeat("0f", 32), "repetitions": 2, "serves_declared": 4, "harness": "meshctl test", "caller": "lab-a"}
	code, ans := post(t, st.URL+"/v1/runs", open)
	if code != 200 {
		t.Fatalf("open: %d %v", code, ans)
	}
	r, doc := openRecord(t, st, ans)
	od, err := steward.DecodeRunOpenDoc(doc)
	if err != nil || *r.Record != steward.RecordRunOpen || od.Caller != "lab-a" || od.ServesDeclared != 4 || ans["run"] != float64(r.Sequence) {
		t.Fatalf("run-open: %v %+v %+v", err, r, od)
	}
	// The inventory bound is GET /v1/node's, member for member.
	resp, err := http.Get(st.URL + "/v1/node")
	if err != nil {
		t.Fatal(err)
	}
	var nodeInfo struct {
		Board, Meters json.RawMessage
		Version       string
	}
	json.NewDecoder(resp.Body).Decode(&nodeInfo)
	resp.Body.Close()
	if canon(t, nodeInfo.Board) != od.Board || canon(t, nodeInfo.Meters) != od.Meters || nodeInfo.Version != od.Version {
		t.Fatalf("inventory: node %s %s %s, record %s %s %s", nodeInfo.Board, nodeInfo.Meters, nodeInfo.Version, od.Board, od.Meters, od.Version)
	}
	run := r.Sequence

	for _, bad := range []map[string]any{
		{"workload_sha256": "xyz", "repetitions": 1, "serves_declared": 1, "harness": "h", "caller": "c"},
		{"workload_sha256": strings.Repeat("0f", 32), "repetitions": 1, "serves_declared": 0, "harness": "h", "caller": "c"},
		{"workload_sha256": strings.Repeat("0f", 32), "repetitions": 1, "serves_declared": 1, "harness": "h", "caller": "a\nb"},
	} {
		if code, ans := post(t, st.URL+"/v1/runs", bad); code != 400 || ans["error"].(map[string]any)["param"] == nil {
			t.Fatalf("bad open %v: %d %v", bad, code, ans)
		}
	}

	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, ans := post(t, st.URL+"/v1/serve", map[string]any{"prompt": fmt.Sprint("p", i), "max_tokens": 3, "run": run})
			if code != 200 || ans["receipt"].(map[string]any)["receipt"].(map[string]any)["x_run"] != float64(run) {
				t.Errorf("serve in the run: %d %v", code, ans)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if code, ans := post(t, st.URL+"/v1/completions", map[string]any{"prompt": "openai", "max_tokens": 2, "run": run}); code != 200 {
			t.Errorf("completion in the run: %d %v", code, ans)
		}
	}()
	wg.Wait()
	head := st.Node.Stores.Log.Next()
	code, ans = post(t, st.URL+"/v1/serve", map[string]any{"prompt": "p", "max_tokens": 3, "run": run + 100})
	if code != 409 || ans["error"].(map[string]any)["code"] != "run_not_open" || st.Node.Stores.Log.Next() != head {
		t.Fatalf("serve in an unknown run: %d %v", code, ans)
	}
	if code, ans := post(t, st.URL+"/v1/meters/idle", map[string]any{"backend": "ref-tiny", "seconds": 0.01, "run": run}); code != 400 {
		t.Fatalf("idle on an unmetered backend: %d %v", code, ans)
	}
	code, ans = post(t, fmt.Sprintf("%s/v1/runs/%d/close", st.URL, run), map[string]any{})
	if code != 200 || ans["status"] != "complete" || ans["serves_sealed"] != float64(4) {
		t.Fatalf("close: %d %v", code, ans)
	}
	cr, cdoc := openRecord(t, st, ans)
	cd, _ := steward.DecodeRunCloseDoc(cdoc)
	if *cr.Run != run || len(cd.Serves) != 4 || cd.Serves[0] <= run || cd.Serves[3] >= cr.Sequence {
		t.Fatalf("run-close: %+v", cd)
	}
	if code, ans := post(t, fmt.Sprintf("%s/v1/runs/%d/close", st.URL, run), map[string]any{}); code != 409 {
		t.Fatalf("second close: %d %v", code, ans)
	}

	// Abandoned by the agent's clock; then one left open at shutdown.
	_, ans = post(t, st.URL+"/v1/runs", open)
	left := uint64(ans["run"].(float64))
	mu.Lock()
	now = now.Add(st.Node.Agent.RunTimeout())
	mu.Unlock()
	recs, err := st.Node.Agent.CloseAbandoned(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Node.Agent.OpenRuns()) != 0 {
		t.Fatalf("run %d still open after its timeout (closed %d)", left, len(recs))
	}
	if code, ans := post(t, st.URL+"/v1/serve", map[string]any{"prompt": "late", "max_tokens": 3, "run": left}); code != 409 {
		t.Fatalf("serve in an abandoned run: %d %v", code, ans)
	}
	_, ans = post(t, st.URL+"/v1/runs", open)
	if ans["run"] == nil {
		t.Fatalf("open: %v", ans)
	}
	recs, err = st.Node.Agent.CloseRuns(context.Background(), "abandoned: the daemon shut down")
	if err != nil || len(recs) != 1 {
		t.Fatalf("shutdown close: %d %v", len(recs), err)
	}
}

func canon(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	c, err := rag.Canonical(raw)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

// The client's record calls verify what they return: a run opened, a
// serve in it, and its close, each checked against the steward key and
// its document.
func TestRunsThroughClient(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	c, err := client.New(st.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	open, err := c.OpenRun(ctx, client.RunOpen{WorkloadSHA256: strings.Repeat("a1", 32), Repetitions: 1, ServesDeclared: 1, Harness: "h", Caller: "c"})
	if err != nil {
		t.Fatal(err)
	}
	run := open.Sequence
	s, err := c.Serve(ctx, client.ServeRequest{Prompt: "in the run", MaxTokens: 2, Run: &run})
	if err != nil || s.Receipt.Receipt.Run == nil || *s.Receipt.Receipt.Run != run {
		t.Fatalf("serve: %v", err)
	}
	cl, err := c.CloseRun(ctx, run, "")
	if err != nil {
		t.Fatal(err)
	}
	d, err := steward.DecodeRunCloseDoc(cl.Document)
	if err != nil || d.Status != steward.RunComplete || d.Serves[0] != s.Receipt.Receipt.Sequence {
		t.Fatalf("close: %+v %v", d, err)
	}
	if _, err := c.CloseRun(ctx, run, ""); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("second close: %v", err)
	}
}
