package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/engine/runner/bert"
	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/llama"
	"meshd/internal/buildinfo"
)

func TestSlotContext(t *testing.T) {
	for _, tc := range []struct {
		trained, ctx, slots int
		total, perSlot      int
		err                 string
	}{
		{trained: 2048, ctx: 0, slots: 1, total: 2048, perSlot: 2048},
		{trained: 1 << 20, ctx: 0, slots: 1, total: DefaultContext, perSlot: DefaultContext}, // never the file's maximum
		{trained: 1 << 20, ctx: 0, slots: 4, total: DefaultContext, perSlot: DefaultContext / 4},
		{trained: 8192, ctx: 8192, slots: 2, total: 8192, perSlot: 4096},
		{trained: 8192, ctx: 1001, slots: 2, total: 1001, perSlot: 500},
		{trained: 2048, ctx: 4096, slots: 1, err: "exceeds the model's trained context"},
		{trained: 2048, ctx: 16, slots: 4, err: "per slot"},
	} {
		total, per, err := slotContext(tc.trained, tc.ctx, tc.slots)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc, err, tc.err)
			}
		case err != nil || total != tc.total || per != tc.perSlot:
			t.Errorf("%+v: got %d, %d, %v", tc, total, per, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-m", "x.gguf", "-np", "3", "-c", "300", "--embedding", "--max-body-bytes", "1024", "--t-max-predict-ms", "250", "--no-warmup"}, io.Discard)
	if err != nil || o.parallel != 3 || o.ctx != 300 || !o.embeddings || o.maxBody != 1024 || o.tMaxPredict != 250 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, args := range [][]string{{"-m", "x", "-np", "0"}, {"-m", "x", "--max-body-bytes", "0"}, {"-np", "2"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestParseDraftFlags(t *testing.T) {
	o, err := parseFlags([]string{"-m", "x.gguf", "-md", "d.gguf", "--draft-max", "8", "--draft-min", "2", "--draft-p-min", "0.5", "--draft-fixed"}, io.Discard)
	if err != nil || o.draft != "d.gguf" || o.spec.Max != 8 || o.spec.Min != 2 || o.spec.PMin != 0.5 || !o.spec.Fixed {
		t.Fatalf("%+v %v", o, err)
	}
	// llama-server's other spellings, and its defaults.
	o, err = parseFlags([]string{"-m", "x.gguf", "--model-draft", "d.gguf", "--draft", "5", "--draft-n-min", "1"}, io.Discard)
	if err != nil || o.draft != "d.gguf" || o.spec.Max != 5 || o.spec.Min != 1 || o.spec.PMin != 0.75 || o.spec.Fixed {
		t.Fatalf("%+v %v", o, err)
	}
	for _, args := range [][]string{
		{"-m", "x", "-md", "d", "--draft-max", "0"},
		{"-m", "x", "-md", "d", "--draft-max", "4", "--draft-min", "5"},
		{"-m", "x", "-md", "d", "--draft-p-min", "1.5"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "--draft-max") {
			t.Errorf("%v: %v, want the draft bounds refused", args, err)
		}
	}
}

// TestEndToEndBERTEmbedding builds mesh-gguf, starts it on a synthesised
// BERT file and checks /embedding over HTTP against the encoder run in
// this process: llama-server's shape, the same vector bit for bit, unit
// length; completions answer 501; SIGTERM ends it cleanly.
func TestEndToEndBERTEmbedding(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mesh-gguf")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	model := filepath.Join(dir, "bert.gguf")
	shape := gguf.BERTShape{Layers: 3, Dim: 96, Heads: 6, FF: 256, Vocab: 1000, Ctx: 128, Type: gguf.Q8_0, Pooling: 1}
	fh, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.SynthBERT(fh, shape, 21); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-m", model, "--port", "0", "--embedding", "-t", "2", "-np", "2")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		done <- cmd.Wait()
	}()
	var base string
	deadline := time.After(60 * time.Second)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("mesh-gguf exited before listening")
			}
			if _, addr, found := strings.Cut(l, "listening on "); found {
				base = addr
			}
		case <-deadline:
			t.Fatal("no listening line")
		}
	}
	for ready := false; !ready; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("mesh-gguf exited while loading")
			}
			ready = strings.Contains(l, "loaded in")
			t.Log(l)
		case <-deadline:
			t.Fatal("model not loaded")
		}
	}
	go func() {
		for range lines {
		}
	}()

	post := func(path, body string) (int, []byte) {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	code, raw := post("/embedding", `{"content":"query: how does a solar battery store energy?"}`)
	var out []struct {
		Index     int         `json:"index"`
		Embedding [][]float32 `json:"embedding"`
	}
	if err := json.Unmarshal(raw, &out); code != 200 || err != nil || len(out) != 1 || out[0].Index != 0 || len(out[0].Embedding) != 1 {
		t.Fatalf("/embedding: %d %s", code, raw)
	}
	got := out[0].Embedding[0]

	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := bert.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(1)
	defer pool.Close()
	st, err := m.NewState(shape.Ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want, err := st.Embed(context.Background(), m.Tok.Encode("query: how does a solar battery store energy?", true, true))
	if err != nil {
		t.Fatal(err)
	}
	var n2 float64
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("value %d: served %v, in process %v", i, got[i], want[i])
		}
		n2 += float64(got[i]) * float64(got[i])
	}
	if len(got) != shape.Dim || n2 < 1-1e-5 || n2 > 1+1e-5 {
		t.Fatalf("%d values, |v|² %g", len(got), n2)
	}
	if code, raw := post("/completion", `{"prompt":"hello"}`); code != 501 || !strings.Contains(string(raw), "bert") {
		t.Errorf("/completion: %d %s", code, raw)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
}

// --version prints the build string and -h the flags, neither needing -m.
func TestVersionAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--version"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), buildinfo.Read().String(); got != want {
		t.Errorf("--version = %q, want %q", got, want)
	}
	out.Reset()
	if err := run([]string{"-h"}, &out, &errb); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
	for _, w := range []string{"-m ", "-port", "-np", "-version", "-max-body-bytes"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("-h lacks %q:\n%s", w, errb.String())
		}
	}
}

// The KV cache types are llama-server's flags, checked as they are parsed.
func TestParseCacheTypeFlags(t *testing.T) {
	o, err := parseFlags([]string{"-m", "x.gguf", "--cache-type-k", "q8_0", "-ctv", "q8_0"}, io.Discard)
	if err != nil || o.kv.CacheK != llama.KVQ8_0 || o.kv.CacheV != llama.KVQ8_0 {
		t.Fatalf("%+v %v", o.kv, err)
	}
	if o, err := parseFlags([]string{"-m", "x.gguf"}, io.Discard); err != nil || o.kv != (llama.StateOptions{}) {
		t.Fatalf("default %+v %v", o.kv, err)
	}
	if _, err := parseFlags([]string{"-m", "x.gguf", "-ctk", "q4_0"}, io.Discard); err == nil || !strings.Contains(err.Error(), "q4_0") {
		t.Errorf("-ctk q4_0: %v", err)
	}
}
