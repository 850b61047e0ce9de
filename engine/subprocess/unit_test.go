//go:build unix

package subprocess

import (
	"strings"
	"testing"
	"time"

	"meshd/engine/recipe"
)

func TestBuildArgs(t *testing.T) {
	llama := helpText(`-t,    --threads N   threads
-c,    --ctx-size N  context
-np,   --parallel N  slots
--no-warmup          skip warm-up
-m,    --model FNAME
-md,   --model-draft FNAME
--draft-max, --draft, --draft-n N
--lora FNAME
--lora-scaled FNAME SCALE
-ctk,  --cache-type-k TYPE
-ctv,  --cache-type-v TYPE`)
	goflag := helpText(`Usage of mesh-gguf:
  -c int
    	context size
  -cache-type-k value
    	KV cache storage of keys (-ctk) or values (-ctv): f32, q8_0 (default f32)
  -cache-type-v value
    	KV cache storage of keys (-ctk) or values (-ctv): f32, q8_0 (default f32)
  -host string
  -m string
  -port int
  -t int
`)
	base := Config{Runner: "r", Model: "m.gguf"}
	tests := []struct {
		name string
		help helpText
		mod  func(*Config)
		want string
		err  string
	}{
		{"minimal", llama, nil, "-m m.gguf --host 127.0.0.1 -np 1", ""},
		{"sizes", llama, func(c *Config) { c.ContextSize, c.Threads = 2048, 4 }, "-m m.gguf --host 127.0.0.1 -c 2048 -t 4 -np 1", ""},
		{"go flag help", goflag, func(c *Config) { c.ContextSize, c.Threads = 512, 2 }, "-m m.gguf --host 127.0.0.1 -c 512 -t 2", ""},
		{"no warmup", llama, func(c *Config) { c.NoWarmup = true }, "-m m.gguf --host 127.0.0.1 -np 1 --no-warmup", ""},
		{"no warmup unlisted", goflag, func(c *Config) { c.NoWarmup = true }, "", "does not list --no-warmup"},
		{"draft without length", llama, func(c *Config) { c.DraftModel = "d.gguf" }, "-m m.gguf --host 127.0.0.1 -np 1 -md d.gguf", ""},
		{"draft unlisted", goflag, func(c *Config) { c.DraftModel = "d.gguf" }, "", "does not list -md"},
		{"adapters", llama, func(c *Config) {
			c.Adapters = []recipe.FileAdapter{{Path: "a", Scale: 1}, {Path: "b", Scale: 0.5}}
		}, "-m m.gguf --host 127.0.0.1 -np 1 --lora a --lora-scaled b 0.5", ""},
		{"extra args last", llama, func(c *Config) { c.ExtraArgs = []string{"-ngl", "99"} }, "-m m.gguf --host 127.0.0.1 -np 1 -ngl 99", ""},
		{"only --draft", helpText("-md, --model-draft F\n--draft N\n"), func(c *Config) { c.DraftModel, c.DraftMax = "d", 3 },
			"-m m.gguf --host 127.0.0.1 -md d --draft 3", ""},
		{"no draft length flag", helpText("-md F\n"), func(c *Config) { c.DraftModel, c.DraftMax = "d", 3 }, "", "no draft-length flag"},
		{"draft min, llama.cpp spelling", helpText("-md F\n--draft-max, --draft N\n--draft-min, --draft-n-min N\n"),
			func(c *Config) { c.DraftModel, c.DraftMax, c.DraftMin = "d", 8, 2 }, "-m m.gguf --host 127.0.0.1 -md d --draft-max 8 --draft-min 2", ""},
		{"draft min, newest spelling", helpText("-md F\n--spec-draft-n-max N\n--spec-draft-n-min N\n--draft-min N\n"),
			func(c *Config) { c.DraftModel, c.DraftMin = "d", 2 }, "-m m.gguf --host 127.0.0.1 -md d --spec-draft-n-min 2", ""},
		{"draft min, mesh-gguf's Go flags", helpText("  -md string\n  -draft-max int\n  -draft-min int\n"),
			func(c *Config) { c.DraftModel, c.DraftMax, c.DraftMin = "d", 6, 1 }, "-m m.gguf --host 127.0.0.1 -md d --draft-max 6 --draft-min 1", ""},
		{"no draft min flag", helpText("-md F\n--draft N\n"), func(c *Config) { c.DraftModel, c.DraftMin = "d", 1 }, "", "no draft-minimum flag"},
		{"kv cache, llama.cpp help", llama, func(c *Config) { c.CacheTypeK, c.CacheTypeV = "q8_0", "q4_0" },
			"-m m.gguf --host 127.0.0.1 -np 1 --cache-type-k q8_0 --cache-type-v q4_0", ""},
		{"kv cache, mesh-gguf's Go flags", goflag, func(c *Config) { c.CacheTypeK, c.CacheTypeV = "q8_0", "f32" },
			"-m m.gguf --host 127.0.0.1 --cache-type-k q8_0 --cache-type-v f32", ""},
		{"kv cache before adapters", llama, func(c *Config) {
			c.CacheTypeK, c.CacheTypeV = "f16", "f16"
			c.Adapters = []recipe.FileAdapter{{Path: "a", Scale: 1}}
		}, "-m m.gguf --host 127.0.0.1 -np 1 --cache-type-k f16 --cache-type-v f16 --lora a", ""},
		{"kv cache unlisted", helpText("-m F\n"), func(c *Config) { c.CacheTypeK, c.CacheTypeV = "q8_0", "q8_0" }, "", "does not list --cache-type-k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			if tc.mod != nil {
				tc.mod(&c)
			}
			args, err := buildArgs(c, tc.help)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(args, " "); got != tc.want {
				t.Fatalf("args = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHelpHas(t *testing.T) {
	h := helpText("-np,   --parallel N\n--draft-max, --draft N\n  -port int\n--no-warmup\n")
	for flag, want := range map[string]bool{
		"-np": true, "--parallel": true, "--draft": true, "--draft-max": true,
		"--port": true, "-no-warmup": true, "--draft-n": false, "-n": false, "--par": false, "-m": false,
	} {
		if got := h.has(flag); got != want {
			t.Errorf("has(%s) = %v, want %v", flag, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	ms := time.Millisecond
	b := newBackoff(100*ms, 800*ms, time.Minute)
	steps := []struct {
		crash  bool
		uptime time.Duration
		want   time.Duration
	}{
		{true, 0, 100 * ms},               // first crash
		{false, 0, 200 * ms},              // restart failed
		{false, 0, 400 * ms},              // again
		{false, 0, 800 * ms},              // capped from here
		{false, 0, 800 * ms},              //
		{true, 5 * time.Second, 800 * ms}, // short-lived child: no reset
		{true, time.Minute, 100 * ms},     // healthy for HealthyReset: reset
		{true, 0, 200 * ms},               //
	}
	for i, s := range steps {
		var got time.Duration
		if s.crash {
			got = b.afterCrash(s.uptime)
		} else {
			got = b.afterFailedStart()
		}
		if got != s.want {
			t.Fatalf("step %d: delay %v, want %v", i, got, s.want)
		}
	}
}

func TestRing(t *testing.T) {
	r := newRing(nil)
	for i := range 30 {
		r.Write([]byte("line " + string(rune('a'+i%26)) + "\n"))
	}
	r.Write([]byte("partial " + strings.Repeat("x", 2000)))
	l := r.Lines()
	if len(l) != tailLines {
		t.Fatalf("kept %d lines, want %d", len(l), tailLines)
	}
	if last := l[len(l)-1]; len(last) != maxLine || !strings.HasPrefix(last, "partial ") {
		t.Fatalf("last line %q…: want the capped partial line", last[:20])
	}
	if l[0] != "line l" { // lines 0..10 fell off: 30 full + 1 partial, keep 20
		t.Fatalf("oldest kept line = %q", l[0])
	}
}
