package llama

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// shape7B is a Llama-2-7B-class model with Mistral's grouped-query
// attention: dim 4096, 32 layers, 32 query and 8 KV heads, FF 14336,
// 32 000 tokens, quantised as llama.cpp's Q4_K_M (about 4.1 GB).
var shape7B = gguf.Shape{Layers: 32, Dim: 4096, Heads: 32, KVHeads: 8, FF: 14336, Vocab: 32000, Ctx: 4096, Mix: gguf.MixQ4_K_M}

// procStatus reads the memory lines of /proc/self/status, in bytes.
func procStatus(t testing.TB) map[string]int64 {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer fh.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if n, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[k] = n << 10
		}
	}
	return out
}

func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(v)
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n << 10
		}
	}
	return 0
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// TestBench7B loads a 7B-class Q4_K_M model through the code that loads
// any GGUF file (mapped, not copied), then runs a 512-token prompt and
// decodes, and reports load time, resident memory at each stage (anonymous
// and file pages apart: the weights are file pages of the mapping, counted
// once touched) and prompt and decode speed. It asserts the memory
// target: resident memory at most 1.1 × the file plus the state's KV
// cache and scratch (Model.StateBytes).
//
// It runs only under `make bench-7b` (MESH_BENCH_7B=1), and skips where
// the disk or memory is short. The file is synthesised by
// gguf.SynthStream into MESH_BENCH_7B_FILE (kept, and reused when it is
// already there) or a temporary directory (removed). MESH_BENCH_7B_THREADS
// sets the threads (default: GOMAXPROCS); MESH_BENCH_7B_DECODE the tokens
// decoded (default 16); MESH_BENCH_7B_KV the cache types run, one state
// each (default "f32,q8_0").
func TestBench7B(t *testing.T) {
	if os.Getenv("MESH_BENCH_7B") == "" {
		t.Skip("MESH_BENCH_7B unset: `make bench-7b` runs the 7B-class benchmark")
	}
	const fileEstimate = 4_200_000_000
	path := os.Getenv("MESH_BENCH_7B_FILE")
	if path == "" {
		path = filepath.Join(t.TempDir(), "synthetic-7b-q4_k_m.gguf")
	}
	if _, err := os.Stat(path); err != nil {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
			t.Skipf("statfs %s: %v", filepath.Dir(path), err)
		}
		if free := int64(st.Bavail) * st.Bsize; free < fileEstimate+(1<<30) {
			t.Skipf("%s free in %s, the model needs about %s", mib(free), filepath.Dir(path), mib(fileEstimate))
		}
		t0 := time.Now()
		if err := synthFile7B(path, shape7B); err != nil {
			t.Fatal(err)
		}
		t.Logf("synthesised %s in %v (SynthStream)", path, time.Since(t0).Round(time.Millisecond))
	} else {
		t.Logf("reusing %s", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	if avail := memAvailable(); avail < size+(2<<30) {
		t.Skipf("%s of memory available, the model needs %s and room to run", mib(avail), mib(size+(2<<30)))
	}
	threads, _ := strconv.Atoi(os.Getenv("MESH_BENCH_7B_THREADS"))
	nDecode, _ := strconv.Atoi(os.Getenv("MESH_BENCH_7B_DECODE"))
	if nDecode <= 0 {
		nDecode = 16
	}
	const nPrompt = 512
	nCtx := nPrompt + nDecode

	runtime.GC()
	base := procStatus(t)
	t0 := time.Now()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	loadTime := time.Since(t0)
	afterLoad := procStatus(t)
	pool := kernels.NewPool(threads)
	defer pool.Close()
	t.Logf("model: %d layers, dim %d, %d/%d heads, ff %d, vocab %d, %s; file %s; %d threads",
		m.Layers, m.Dim, m.Heads, m.KVHeads, m.FF, m.Vocab, shape7B.Mix, mib(size), pool.Workers())
	t.Logf("load (mmap + parse, no copy): %v", loadTime.Round(time.Microsecond))
	row := func(stage string, s map[string]int64) {
		t.Logf("%-30s VmRSS %9s  RssAnon %9s  RssFile %9s (mapped file pages touched)", stage, mib(s["VmRSS"]), mib(s["RssAnon"]), mib(s["RssFile"]))
	}
	row("before load", base)
	row("after load", afterLoad)
	kvNames := os.Getenv("MESH_BENCH_7B_KV")
	if kvNames == "" {
		kvNames = "f32,q8_0"
	}
	rng := rand.New(rand.NewPCG(7, 7))
	prompt := make([]int, nPrompt)
	for i := range prompt {
		prompt[i] = 3 + rng.IntN(m.Vocab-3)
	}
	wb := float64(m.WeightBytesPerToken())
	for _, name := range strings.Split(kvNames, ",") {
		kt, err := ParseKVType(name)
		if err != nil {
			t.Fatal(err)
		}
		o := StateOptions{CacheK: kt, CacheV: kt}
		// Hand the previous state's memory back first, so that this
		// state's anonymous pages are its own (a measurement aid only).
		debug.FreeOSMemory()
		before := procStatus(t)
		st, err := m.NewStateWith(nCtx, pool, o)
		if err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		logits, err := st.EvalBatch(context.Background(), prompt)
		if err != nil {
			t.Fatal(err)
		}
		promptTime := time.Since(t1)
		afterPrompt := procStatus(t)
		tok := Argmax(logits)
		t2 := time.Now()
		for range nDecode {
			if logits, err = st.Eval(tok); err != nil {
				t.Fatal(err)
			}
			tok = Argmax(logits)
		}
		decodeTime := time.Since(t2)
		afterDecode := procStatus(t)
		kv := m.KVBytes(nCtx, o)
		t.Logf("KV cache %s/%s: %s (%d positions), state %s", kt, kt, mib(kv), nCtx, mib(m.StateBytesWith(nCtx, o)))
		row(fmt.Sprintf("%s: after %d-token prompt", kt, nPrompt), afterPrompt)
		row(fmt.Sprintf("%s: after %d decoded", kt, nDecode), afterDecode)
		t.Logf("%s: state's anonymous memory %s", kt, mib(afterDecode["RssAnon"]-before["RssAnon"]))
		t.Logf("%s: prompt %d tokens in %v = %.2f t/s", kt, nPrompt, promptTime.Round(time.Millisecond), nPrompt/promptTime.Seconds())
		t.Logf("%s: decode %d tokens in %v = %.3f t/s (%.2f GB/s of weights)", kt, nDecode, decodeTime.Round(time.Millisecond),
			float64(nDecode)/decodeTime.Seconds(), float64(nDecode)*wb/decodeTime.Seconds()/1e9)
		limit := int64(1.1*float64(size)) + m.StateBytesWith(nCtx, o)
		t.Logf("%s: target VmRSS ≤ 1.1 × file + state = %s", kt, mib(limit))
		for _, s := range []map[string]int64{afterPrompt, afterDecode} {
			if s["VmRSS"] > limit {
				t.Errorf("%s: VmRSS %s over the target %s", kt, mib(s["VmRSS"]), mib(limit))
			}
		}
		if grow := afterDecode["RssAnon"] - base["RssAnon"]; grow > m.StateBytesWith(nCtx, o)+(64<<20) {
			t.Errorf("%s: anonymous memory grew %s, more than the state's %s: weights copied?", kt, mib(grow), mib(m.StateBytesWith(nCtx, o)))
		}
		runtime.KeepAlive(st)
	}
}

// synthFile7B writes shape's model to path through a temporary name, so
// that an interrupted run leaves no half file to be reused.
func synthFile7B(path string, s gguf.Shape) error {
	tmp := path + ".partial"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := gguf.SynthStream(fh, s, 1); err != nil {
		fh.Close()
		os.Remove(tmp)
		return fmt.Errorf("synthesising %s: %w", path, err)
	}
	if err := fh.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
