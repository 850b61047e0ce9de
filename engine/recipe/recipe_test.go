package recipe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/wire"
)

func cid(b byte) wire.ContentID {
	var c wire.ContentID
	for i := range c {
		c[i] = b
	}
	return c
}

func TestFormatParseRoundTrip(t *testing.T) {
	m, d, a1, a2 := cid(0xaa), cid(0xbb), cid(0x01), cid(0x02)
	tests := []struct {
		name string
		r    Recipe
		want string
	}{
		{"model only", Recipe{Model: m}, "gguf:" + m.String()},
		{"draft", Recipe{Model: m, Draft: d}, "gguf:" + m.String() + "+draft:" + d.String()},
		{"adapters in order", Recipe{Model: m, Adapters: []Adapter{{a2, 1}, {a1, 0.5}}},
			"gguf:" + m.String() + "+lora:" + a2.String() + "+lora:" + a1.String() + "@0.5"},
		{"everything", Recipe{Model: m, Draft: d, Adapters: []Adapter{{a1, -2}}},
			"gguf:" + m.String() + "+draft:" + d.String() + "+lora:" + a1.String() + "@-2"},
		{"kv cache", Recipe{Model: m, KV: KVCache{"q8_0", "q8_0"}}, "gguf:" + m.String() + "+kv:q8_0/q8_0"},
		{"kv cache of the default type", Recipe{Model: m, KV: KVCache{"f32", "f32"}}, "gguf:" + m.String() + "+kv:f32/f32"},
		{"kv types differ", Recipe{Model: m, KV: KVCache{"q4_0", "iq4_nl"}}, "gguf:" + m.String() + "+kv:q4_0/iq4_nl"},
		{"kv between draft and adapters", Recipe{Model: m, Draft: d, KV: KVCache{"bf16", "q5_1"}, Adapters: []Adapter{{a1, 0.5}}},
			"gguf:" + m.String() + "+draft:" + d.String() + "+kv:bf16/q5_1+lora:" + a1.String() + "@0.5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Format(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("Format = %q, want %q", got, tc.want)
			}
			back, err := Parse(got)
			if err != nil {
				t.Fatalf("Parse(%q): %v", got, err)
			}
			if again, _ := Format(back); again != got {
				t.Fatalf("round trip changed %q to %q", got, again)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	m, d := cid(0xaa).String(), cid(0xbb).String()
	bad := map[string]string{
		"no prefix":         m,
		"wrong prefix":      "ggml:" + m,
		"short id":          "gguf:abcd",
		"upper-case id":     "gguf:" + strings.ToUpper(m),
		"zero model":        "gguf:" + wire.ContentID{}.String(),
		"unknown part":      "gguf:" + m + "+merge:" + d,
		"two drafts":        "gguf:" + m + "+draft:" + d + "+draft:" + d,
		"draft after lora":  "gguf:" + m + "+lora:" + d + "+draft:" + d,
		"scale of one":      "gguf:" + m + "+lora:" + d + "@1",
		"non-canonical":     "gguf:" + m + "+lora:" + d + "@0.50",
		"not finite":        "gguf:" + m + "+lora:" + d + "@NaN",
		"empty part":        "gguf:" + m + "+",
		"garbage scale":     "gguf:" + m + "+lora:" + d + "@x",
		"empty draft id":    "gguf:" + m + "+draft:",
		"trailing junk":     "gguf:" + m + "x",
		"whitespace around": " gguf:" + m,
		"kv without slash":  "gguf:" + m + "+kv:q8_0",
		"kv empty":          "gguf:" + m + "+kv:",
		"kv only a slash":   "gguf:" + m + "+kv:/",
		"kv half empty":     "gguf:" + m + "+kv:q8_0/",
		"kv key empty":      "gguf:" + m + "+kv:/q8_0",
		"kv unknown type":   "gguf:" + m + "+kv:q8_0/q2_k",
		"kv upper-case":     "gguf:" + m + "+kv:Q8_0/Q8_0",
		"kv three types":    "gguf:" + m + "+kv:q8_0/q8_0/q8_0",
		"kv spaces":         "gguf:" + m + "+kv:q8_0 /q8_0",
		"two kv parts":      "gguf:" + m + "+kv:q8_0/q8_0+kv:f16/f16",
		"kv before draft":   "gguf:" + m + "+kv:q8_0/q8_0+draft:" + d,
		"kv after lora":     "gguf:" + m + "+lora:" + d + "+kv:q8_0/q8_0",
	}
	for name, s := range bad {
		if r, err := Parse(s); err == nil {
			t.Errorf("%s: Parse(%q) = %+v, want error", name, s, r)
		}
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestContentIDStreamsSameAsContentOf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	// Larger than one BLAKE3 chunk and not a multiple of io.Copy's buffer.
	b := make([]byte, 3<<20+17)
	for i := range b {
		b[i] = byte(i * 7)
	}
	writeFile(t, path, b)
	got, err := NewCache().ContentID(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if want := wire.ContentOf(b); got != want {
		t.Fatalf("streamed id %s != ContentOf %s", got, want)
	}
}

func TestCacheRecomputesOnlyOnChange(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	writeFile(t, path, []byte("version one"))
	c := NewCache()

	id1, err := c.ContentID(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	// The same file by another spelling of its path is the same entry.
	rel, _ := filepath.Rel(mustWd(t), path)
	for _, p := range []string{path, path, filepath.Join(dir, ".", "m.gguf"), rel} {
		if id, err := c.ContentID(ctx, p); err != nil || id != id1 {
			t.Fatalf("ContentID(%s) = %s, %v; want cached %s", p, id, err, id1)
		}
	}
	if n := c.Computations(); n != 1 {
		t.Fatalf("computations after repeated lookups = %d, want 1", n)
	}

	// Same size, new content, new mtime.
	writeFile(t, path, []byte("version two"))
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	id2, err := c.ContentID(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id1 || id2 != wire.ContentOf([]byte("version two")) {
		t.Fatalf("after rewrite id = %s (old %s)", id2, id1)
	}
	if n := c.Computations(); n != 2 {
		t.Fatalf("computations after one change = %d, want 2", n)
	}

	// Size change with mtime forced back to the previous value.
	writeFile(t, path, []byte("version three, longer"))
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	id3, err := c.ContentID(ctx, path)
	if err != nil || id3 != wire.ContentOf([]byte("version three, longer")) {
		t.Fatalf("after size change id = %s, %v", id3, err)
	}

	// Same size and mtime restored: only the change time betrays the rewrite.
	time.Sleep(10 * time.Millisecond)
	writeFile(t, path, []byte("version four, longer"))
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	id4, err := c.ContentID(ctx, path)
	if err != nil || id4 != wire.ContentOf([]byte("version four, longer")) {
		t.Fatalf("after same-size same-mtime rewrite id = %s, %v", id4, err)
	}
	if n := c.Computations(); n != 4 {
		t.Fatalf("computations = %d, want 4", n)
	}
	if id, _ := c.ContentID(ctx, path); id != id4 || c.Computations() != 4 {
		t.Fatalf("unchanged file was rehashed")
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestCacheSymlinkRetarget(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, b, link := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "model.gguf")
	writeFile(t, a, []byte("model a"))
	writeFile(t, b, []byte("model b"))
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	c := NewCache()
	if id, err := c.ContentID(ctx, link); err != nil || id != wire.ContentOf([]byte("model a")) {
		t.Fatalf("link to a: %s, %v", id, err)
	}
	os.Remove(link)
	if err := os.Symlink(b, link); err != nil {
		t.Fatal(err)
	}
	if id, err := c.ContentID(ctx, link); err != nil || id != wire.ContentOf([]byte("model b")) {
		t.Fatalf("link retargeted to b: %s, %v", id, err)
	}
}

func TestCacheConcurrentSharesOneComputation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	writeFile(t, path, make([]byte, 1<<20))
	c := NewCache()
	var wg sync.WaitGroup
	ids := make([]wire.ContentID, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := c.ContentID(context.Background(), path)
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatal("concurrent lookups disagree")
		}
	}
	if n := c.Computations(); n != 1 {
		t.Fatalf("computations = %d, want 1", n)
	}
}

func TestCacheErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := NewCache()
	if _, err := c.ContentID(ctx, filepath.Join(dir, "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
	if _, err := c.ContentID(ctx, dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: err = %v", err)
	}
	path := filepath.Join(dir, "m.gguf")
	writeFile(t, path, []byte("x"))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ContentID(cancelled, path); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
	// A failed computation is not remembered.
	if id, err := c.ContentID(ctx, path); err != nil || id != wire.ContentOf([]byte("x")) {
		t.Errorf("after cancelled attempt: %s, %v", id, err)
	}
}

func TestCacheRecipe(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, d, l := filepath.Join(dir, "m"), filepath.Join(dir, "d"), filepath.Join(dir, "l")
	writeFile(t, m, []byte("target"))
	writeFile(t, d, []byte("draft"))
	writeFile(t, l, []byte("lora"))
	r, err := NewCache().Recipe(ctx, Files{Model: m, Draft: d, Adapters: []FileAdapter{{l, 0.25}}})
	if err != nil {
		t.Fatal(err)
	}
	want := "gguf:" + wire.ContentOf([]byte("target")).String() +
		"+draft:" + wire.ContentOf([]byte("draft")).String() +
		"+lora:" + wire.ContentOf([]byte("lora")).String() + "@0.25"
	if r.String() != want {
		t.Fatalf("recipe = %q, want %q", r, want)
	}
	if _, err := NewCache().Recipe(ctx, Files{Model: m, Draft: filepath.Join(dir, "nope")}); err == nil || !strings.Contains(err.Error(), "draft") {
		t.Fatalf("missing draft: err = %v", err)
	}
	r, err = NewCache().Recipe(ctx, Files{Model: m, KV: KVCache{K: "q8_0", V: "f16"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "gguf:" + wire.ContentOf([]byte("target")).String() + "+kv:q8_0/f16"; r.String() != want {
		t.Fatalf("recipe with a kv cache = %q, want %q", r, want)
	}
	for _, kv := range []KVCache{{K: "q8_0"}, {V: "q8_0"}, {K: "q8_0", V: "q3_k"}, {K: "Q8_0", V: "q8_0"}} {
		if r, err := NewCache().Recipe(ctx, Files{Model: m, KV: kv}); err == nil || !strings.Contains(err.Error(), "kv cache") {
			t.Errorf("kv %+v: recipe %q, err = %v; want a kv cache error", kv, r, err)
		}
	}
}

// TestFormatRefusesKV checks that Format never writes a kv part Parse
// would refuse, so a sealed recipe always parses.
func TestFormatRefusesKV(t *testing.T) {
	for _, kv := range []KVCache{{K: "q8_0"}, {V: "f16"}, {K: "q8_0", V: "Q8_0"}, {K: "q8_0/q8_0", V: "q8_0"}, {K: "q8_0", V: "q8_0+lora:x"}} {
		if s, err := Format(Recipe{Model: cid(0xaa), KV: kv}); err == nil {
			t.Errorf("Format with kv %+v = %q, want error", kv, s)
		}
	}
	// Every listed type round-trips as either half.
	for _, k := range KVTypes {
		for _, v := range KVTypes {
			r := Recipe{Model: cid(0xaa), KV: KVCache{K: k, V: v}}
			s, err := Format(r)
			if err != nil {
				t.Fatalf("Format kv %s/%s: %v", k, v, err)
			}
			back, err := Parse(s)
			if err != nil || back.KV != r.KV {
				t.Fatalf("Parse(%q) = %+v, %v", s, back.KV, err)
			}
		}
	}
}

// BenchmarkContentID compares hashing a model version for the first time
// with recalling it, which is what every restart of an unchanged model pays.
func BenchmarkContentID(b *testing.B) {
	path := filepath.Join(b.TempDir(), "m.gguf")
	if err := os.WriteFile(path, make([]byte, 16<<20), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(16 << 20)
		for b.Loop() {
			if _, err := NewCache().ContentID(ctx, path); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		c := NewCache()
		if _, err := c.ContentID(ctx, path); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.ContentID(ctx, path); err != nil {
				b.Fatal(err)
			}
		}
		if c.Computations() != 1 {
			b.Fatalf("cached lookups rehashed: %d computations", c.Computations())
		}
	})
}
