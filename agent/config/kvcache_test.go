package config

import (
	"errors"
	"testing"
)

// kvBackend is a [[backend]] of the given kind; the keys under test follow
// on line 6.
func kvBackend(kind, keys string) string {
	return "[[backend]]\nname = \"edge\"\nkind = \"" + kind + "\"\nmodel = \"/m.gguf\"\nfidelity = 1\n" + keys + "uj_per_token = 100\n"
}

// TestCacheTypeKeys checks what the backend's cache types become: both
// halves whenever either is set (the other the kind's own default, which
// differs between the kinds), none when neither is.
func TestCacheTypeKeys(t *testing.T) {
	for _, tc := range []struct {
		name, kind, keys string
		k, v             string
	}{
		{"unset", "mesh-gguf", "", "", ""},
		{"both, mesh-gguf", "mesh-gguf", "cache_type_k = \"q8_0\"\ncache_type_v = \"q8_0\"\n", "q8_0", "q8_0"},
		{"keys only, mesh-gguf", "mesh-gguf", "cache_type_k = \"q8_0\"\n", "q8_0", "f32"},
		{"values only, mesh-gguf", "mesh-gguf", "cache_type_v = \"q8_0\"\n", "f32", "q8_0"},
		{"keys only, llama-server", "llama-server", "cache_type_k = \"q4_0\"\n", "q4_0", "f16"},
		{"the default named, llama-server", "llama-server", "cache_type_v = \"f16\"\n", "f16", "f16"},
		{"mixed, llama-server", "llama-server", "cache_type_k = \"bf16\"\ncache_type_v = \"iq4_nl\"\n", "bf16", "iq4_nl"},
		{"extra args of another flag", "llama-server", "extra_args = [\"-ctkd\", \"q8_0\", \"--flash-attn\", \"on\"]\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(kvBackend(tc.kind, tc.keys)), "kv.toml")
			if err != nil {
				t.Fatal(err)
			}
			if b := c.Backends[0]; b.CacheTypeK != tc.k || b.CacheTypeV != tc.v {
				t.Fatalf("cache types %q/%q, want %q/%q", b.CacheTypeK, b.CacheTypeV, tc.k, tc.v)
			}
		})
	}
}

// TestCacheTypeProblems checks the refusals: a type the kind does not take,
// a key on a kind without a KV cache, and extra_args that would set the
// cache behind the recipe's back, in every spelling the runners read.
func TestCacheTypeProblems(t *testing.T) {
	useKeys := `use cache_type_k and cache_type_v`
	for _, tc := range []struct {
		name, kind, keys string
		want             []want
	}{
		{"llama-server's type on mesh-gguf", "mesh-gguf", "cache_type_k = \"f16\"\n", []want{
			{6, "backend[0].cache_type_k", `"f16" is not a KV cache type kind mesh-gguf takes ("f32" or "q8_0")`}}},
		{"unknown type", "llama-server", "cache_type_v = \"q2_k\"\n", []want{
			{6, "backend[0].cache_type_v", `"q2_k" is not a KV cache type kind llama-server takes`}}},
		{"upper case", "llama-server", "cache_type_k = \"Q8_0\"\ncache_type_v = \"\"\n", []want{
			{6, "backend[0].cache_type_k", `"Q8_0" is not a KV cache type`},
			{7, "backend[0].cache_type_v", `"" is not a KV cache type`}}},
		{"short flag, separate value", "mesh-gguf", "extra_args = [\"-t\", \"2\", \"-ctk\", \"q8_0\"]\n", []want{
			{6, "backend[0].extra_args[2]", `"-ctk" sets the KV cache type, which the receipt's recipe would not name: ` + useKeys}}},
		{"long flag with =", "llama-server", "extra_args = [\"--cache-type-v=q4_0\"]\n", []want{
			{6, "backend[0].extra_args[0]", `"--cache-type-v=q4_0" sets the KV cache type`}}},
		{"every spelling", "llama-server", "extra_args = [\"--ctv\", \"f16\", \"-cache-type-k\", \"q8_0\", \"-ctk=q8_0\", \"--cache-type-k\", \"q8_0\"]\n", []want{
			{6, "backend[0].extra_args[0]", `"--ctv"`},
			{6, "backend[0].extra_args[2]", `"-cache-type-k"`},
			{6, "backend[0].extra_args[4]", `"-ctk=q8_0"`},
			{6, "backend[0].extra_args[5]", `"--cache-type-k"`}}},
		{"flag beside the keys", "mesh-gguf", "cache_type_k = \"q8_0\"\nextra_args = [\"-ctv\", \"q8_0\"]\n", []want{
			{7, "backend[0].extra_args[0]", `"-ctv" sets the KV cache type`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(kvBackend(tc.kind, tc.keys)), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("error %v is not *Problems", err)
			}
			checkProblems(t, ps, tc.want)
		})
	}
	// A kind with no KV cache of its own does not take the keys.
	doc := "[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 0\nuj_per_token = 1\ncache_type_k = \"q8_0\"\n"
	_, err := Parse([]byte(doc), "bad.toml")
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v is not *Problems", err)
	}
	checkProblems(t, ps, []want{{6, "backend[0].cache_type_k", "not used by kind reference"}})
}
