// Package recipe owns the naming of a composed GGUF model (mesh/1 §4): the
// recipe string sealed into every receipt, and the content ids of the files
// it is made from, hashed once and cached.
//
// # Grammar
//
//	recipe   = base *( "+" part )
//	base     = "gguf:" cid                 ; the target model file
//	part     = draft / kv / adapter
//	draft    = "draft:" cid                ; speculative-decoding draft model
//	kv       = "kv:" kvtype "/" kvtype     ; KV cache storage of keys / values
//	adapter  = "lora:" cid [ "@" scale ]   ; LoRA adapter, in load order
//	cid      = 64 lower-case hex digits    ; BLAKE3-256 of the whole file
//	kvtype   = "f32" / "f16" / "bf16" / "q8_0" / "q4_0" / "q4_1" /
//	           "iq4_nl" / "q5_0" / "q5_1"  ; llama-server's spelling
//	scale    = shortest decimal (Go strconv 'g' format) of a finite float64,
//	           omitted when the scale is exactly 1
//
// Parts come in the order draft, kv, adapters; at most one draft part and
// at most one kv part. Adapter order is significant (it is the order they
// are applied in), so two recipes that differ only in adapter order name
// different models. Example:
// "gguf:af13…9c+draft:07be…d2+kv:q8_0/q8_0+lora:5e0a…11@0.5".
//
// The kv part is present exactly when the engine was told a cache type: a
// quantised KV cache changes the outputs, so a receipt must say so. Absent,
// the engine ran with its own default, which depends on the engine
// (mesh-gguf f32, llama-server f16); the part then adds nothing the
// backend's kind does not already say.
//
// A content id is wire.ContentOf of the file's bytes, computed by streaming
// the file so a many-gigabyte model never has to fit in memory.
package recipe

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"meshd/wire"
)

// Adapter is one LoRA adapter applied on top of the base model.
type Adapter struct {
	ID wire.ContentID
	// Scale is the adapter's strength; 1 is the engines' default.
	Scale float64
}

// KVTypes are the KV cache storage types a kv part may name, as
// llama-server spells its --cache-type-k and --cache-type-v values. An
// engine may accept fewer (mesh-gguf: f32 and q8_0).
var KVTypes = []string{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}

// KVCache is the storage type of the keys and of the values in the engine's
// KV cache. The zero value means the engine was not told one and runs with
// its default.
type KVCache struct {
	K, V string
}

// IsZero reports whether no cache type was set.
func (c KVCache) IsZero() bool { return c == KVCache{} }

// Validate checks that c is zero or names a known type for both keys and
// values: a recipe never names half a cache.
func (c KVCache) Validate() error {
	if c.IsZero() {
		return nil
	}
	for _, t := range []struct{ what, v string }{{"key", c.K}, {"value", c.V}} {
		if !slices.Contains(KVTypes, t.v) {
			return fmt.Errorf("recipe: kv cache %s type %q: want one of %s", t.what, t.v, strings.Join(KVTypes, ", "))
		}
	}
	return nil
}

// cacheTypeFlags are the runner flags that set what the kv part names, in
// llama-server's spellings (mesh-gguf takes the same ones).
var cacheTypeFlags = []string{"ctk", "cache-type-k", "ctv", "cache-type-v"}

// CacheTypeArg reports the index of the first argument in args that sets
// the KV cache type, spelled with one dash or two, with its value after
// "=" or as the next argument. A runner command line that carries one
// outside the configured cache type would run a cache the recipe does not
// name. The draft model's own cache (-ctkd, -ctvd) is not one: it changes
// which tokens are proposed (counted in the receipt's spec counters), not
// the target's output.
func CacheTypeArg(args []string) (int, bool) {
	for i, a := range args {
		name, ok := strings.CutPrefix(a, "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, _, _ = strings.Cut(name, "=")
		if slices.Contains(cacheTypeFlags, name) {
			return i, true
		}
	}
	return 0, false
}

// Recipe is the parsed form of a recipe string.
type Recipe struct {
	Model    wire.ContentID
	Draft    wire.ContentID // zero when no draft model is used
	KV       KVCache        // zero when the engine's default cache is used
	Adapters []Adapter
}

// Validate checks the rules Format relies on.
func (r Recipe) Validate() error {
	if r.Model.IsZero() {
		return fmt.Errorf("recipe: model content id is missing")
	}
	if err := r.KV.Validate(); err != nil {
		return err
	}
	for i, a := range r.Adapters {
		if a.ID.IsZero() {
			return fmt.Errorf("recipe: adapter %d content id is missing", i)
		}
		if math.IsNaN(a.Scale) || math.IsInf(a.Scale, 0) {
			return fmt.Errorf("recipe: adapter %d scale %v is not finite", i, a.Scale)
		}
	}
	return nil
}

// String formats the recipe per the package grammar. It returns "" for a
// recipe that fails Validate, which Parse never accepts.
func (r Recipe) String() string {
	s, err := Format(r)
	if err != nil {
		return ""
	}
	return s
}

// Format formats r per the package grammar.
func Format(r Recipe) (string, error) {
	if err := r.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("gguf:")
	b.WriteString(r.Model.String())
	if !r.Draft.IsZero() {
		b.WriteString("+draft:")
		b.WriteString(r.Draft.String())
	}
	if !r.KV.IsZero() {
		b.WriteString("+kv:")
		b.WriteString(r.KV.K)
		b.WriteByte('/')
		b.WriteString(r.KV.V)
	}
	for _, a := range r.Adapters {
		b.WriteString("+lora:")
		b.WriteString(a.ID.String())
		if a.Scale != 1 {
			b.WriteByte('@')
			b.WriteString(strconv.FormatFloat(a.Scale, 'g', -1, 64))
		}
	}
	return b.String(), nil
}

// Parse is the inverse of Format. It accepts exactly the strings Format
// produces, so a parsed recipe formats back to the same bytes.
func Parse(s string) (Recipe, error) {
	var r Recipe
	parts := strings.Split(s, "+")
	base, ok := strings.CutPrefix(parts[0], "gguf:")
	if !ok {
		return r, fmt.Errorf("recipe %q: must start with \"gguf:\"", s)
	}
	id, err := parseCID(base)
	if err != nil {
		return r, fmt.Errorf("recipe %q: model: %w", s, err)
	}
	r.Model = id
	for i, p := range parts[1:] {
		switch {
		case strings.HasPrefix(p, "draft:"):
			if !r.Draft.IsZero() || !r.KV.IsZero() || len(r.Adapters) > 0 {
				return Recipe{}, fmt.Errorf("recipe %q: part %d: draft must appear once, before any kv or adapter part", s, i+1)
			}
			if r.Draft, err = parseCID(strings.TrimPrefix(p, "draft:")); err != nil {
				return Recipe{}, fmt.Errorf("recipe %q: draft: %w", s, err)
			}
		case strings.HasPrefix(p, "kv:"):
			if !r.KV.IsZero() || len(r.Adapters) > 0 {
				return Recipe{}, fmt.Errorf("recipe %q: part %d: kv must appear once, after any draft and before any adapter", s, i+1)
			}
			k, v, ok := strings.Cut(strings.TrimPrefix(p, "kv:"), "/")
			if !ok {
				return Recipe{}, fmt.Errorf("recipe %q: part %d %q: want kv:<key type>/<value type>", s, i+1, p)
			}
			kv := KVCache{K: k, V: v}
			if kv.IsZero() {
				return Recipe{}, fmt.Errorf("recipe %q: part %d %q: names no cache type", s, i+1, p)
			}
			if err := kv.Validate(); err != nil {
				return Recipe{}, fmt.Errorf("recipe %q: part %d: %w", s, i+1, err)
			}
			r.KV = kv
		case strings.HasPrefix(p, "lora:"):
			body := strings.TrimPrefix(p, "lora:")
			a := Adapter{Scale: 1}
			if hexPart, scale, has := strings.Cut(body, "@"); has {
				body = hexPart
				if a.Scale, err = strconv.ParseFloat(scale, 64); err != nil {
					return Recipe{}, fmt.Errorf("recipe %q: adapter %d scale: %w", s, len(r.Adapters), err)
				}
				if a.Scale == 1 || strconv.FormatFloat(a.Scale, 'g', -1, 64) != scale {
					return Recipe{}, fmt.Errorf("recipe %q: adapter %d scale %q is not in canonical form", s, len(r.Adapters), scale)
				}
			}
			if a.ID, err = parseCID(body); err != nil {
				return Recipe{}, fmt.Errorf("recipe %q: adapter %d: %w", s, len(r.Adapters), err)
			}
			r.Adapters = append(r.Adapters, a)
		default:
			return Recipe{}, fmt.Errorf("recipe %q: part %d %q: want draft:<cid>, kv:<type>/<type> or lora:<cid>", s, i+1, p)
		}
	}
	if err := r.Validate(); err != nil {
		return Recipe{}, err
	}
	return r, nil
}

// parseCID accepts only the lower-case form Format writes, so a recipe has
// exactly one spelling.
func parseCID(s string) (wire.ContentID, error) {
	if strings.ToLower(s) != s {
		return wire.ContentID{}, fmt.Errorf("content id %q: must be lower-case hex", s)
	}
	return wire.ParseContentID(s)
}
