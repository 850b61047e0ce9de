package rag

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// emptyCorpusHash is the hash of a corpus with no repos under the contract
// vector's model and dim: sha256 of
// {"dim":384,"model":"macula/multilingual-e5-small:f16","repos":[]}.
const emptyCorpusHash = "04ed59c2f056abb706d9fe88b935e413c5328070a81fbc3540a799d7ffdf3b92"

func TestCorpusHashContractVector(t *testing.T) {
	d := contractDescription()
	if got := CorpusHash(d.Model, d.Dim, d.Repos); got != contractCorpusHash {
		t.Fatalf("CorpusHash = %s, want %s", got, contractCorpusHash)
	}
	canonical, err := corpusIdentityJSON(d.Model, d.Dim, d.Repos)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"dim":384,"model":"macula/multilingual-e5-small:f16","repos":[` +
		`{"branch":"main","commit":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","id":"alpha","url":"https://example.org/alpha.git"},` +
		`{"branch":"trunk","commit":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","id":"beta","url":"/srv/mirrors/beta.git"}]}`
	if string(canonical) != want {
		t.Fatalf("canonical identity\n got %s\nwant %s", canonical, want)
	}
	// The list order is part of the identity.
	swapped := []Repo{d.Repos[1], d.Repos[0]}
	if CorpusHash(d.Model, d.Dim, swapped) == contractCorpusHash {
		t.Fatal("reordered repos hash the same")
	}
}

func TestCorpusHashEmpty(t *testing.T) {
	for _, repos := range [][]Repo{nil, {}} {
		if got := CorpusHash("macula/multilingual-e5-small:f16", 384, repos); got != emptyCorpusHash {
			t.Fatalf("empty corpus hash = %s, want %s", got, emptyCorpusHash)
		}
	}
	if CorpusHash("m", 1, nil) == "" {
		t.Fatal("an empty corpus has no hash")
	}
}

func TestParseDescriptionJSON(t *testing.T) {
	// The contract's description plus its hash, a signature, signed_by and a
	// key nothing vouches for.
	in := strings.Replace(contractDescriptionJSON, `"dim": 384,`,
		`"dim": 384, "corpus_hash": "`+contractCorpusHash+`", "signature": "`+base64.StdEncoding.EncodeToString([]byte{1, 2, 3})+
			`", "signed_by": "ab", "note": {"x": [1]},`, 1)
	d, err := ParseDescription([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := contractDescription()
	if d.Model != want.Model || d.Dim != want.Dim || d.CorpusHash != want.CorpusHash || len(d.Repos) != 2 ||
		d.Repos[0] != want.Repos[0] || d.Repos[1] != want.Repos[1] {
		t.Fatalf("parsed %+v", d)
	}
	if string(d.Signature) != "\x01\x02\x03" || d.SignedBy != "ab" {
		t.Fatalf("signature %x signed_by %q", d.Signature, d.SignedBy)
	}
	if _, ok := d.Extra["note"]; !ok || len(d.Extra) != 1 {
		t.Fatalf("extra %v", d.Extra)
	}
	if d.Hash() != contractCorpusHash {
		t.Fatal("parsed description does not hash to the vector")
	}
}

// The decoding rule has no booleans: a CBOR description holding true is
// malformed, whatever key holds it.
func TestParseDescriptionCBORBoolean(t *testing.T) {
	data, err := cbor.Marshal(map[string]any{"model": "m", "dim": 1, "repos": []any{}, "corpus_hash": "h", "x": true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDescription(data); !isReason(err, ReasonMalformedDescription) {
		t.Fatalf("got %v, want malformed_description", err)
	}
}

func isReason(err error, reason string) bool {
	if reason == "" {
		return err == nil
	}
	var r *Refusal
	return errors.As(err, &r) && r.Reason() == reason
}

func TestParseDescriptionCBORAccepted(t *testing.T) {
	repos := []any{
		map[string]any{"id": "alpha", "url": "https://example.org/alpha.git", "branch": "main",
			"commit": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "extra": "dropped"},
		map[string]any{"id": "beta", "url": "/srv/mirrors/beta.git", "branch": "trunk",
			"commit": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
	}
	wire := map[any]any{"model": "macula/multilingual-e5-small:f16", "dim": 384, "repos": repos,
		"corpus_hash": contractCorpusHash, "signature": []byte{9}, "signed_by": "cd", uint64(7): "int key", "x": nil}
	data, err := cbor.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDescription(data)
	if err != nil {
		t.Fatal(err)
	}
	if d.Hash() != contractCorpusHash || d.CorpusHash != contractCorpusHash || string(d.Signature) != "\x09" || d.SignedBy != "cd" {
		t.Fatalf("parsed %+v", d)
	}
	if _, ok := d.Extra["x"]; !ok || len(d.Extra) != 1 {
		t.Fatalf("extra %v: want only x (integer keys dropped)", d.Extra)
	}
}

func TestParseDescriptionRefusals(t *testing.T) {
	base := func(edit func(m map[string]any)) []byte {
		m := map[string]any{
			"model": "m", "dim": 8, "corpus_hash": "h",
			"repos": []any{map[string]any{"id": "a", "url": "u", "branch": "b", "commit": strings.Repeat("a", 40)}},
		}
		edit(m)
		b, err := CanonicalValue(jsonable(m))
		if err != nil {
			panic(err)
		}
		return b
	}
	repo := func(m map[string]any) map[string]any { return m["repos"].([]any)[0].(map[string]any) }
	cborOf := func(v any) []byte {
		b, err := cbor.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	cases := []struct {
		name string
		in   []byte
	}{
		{"not JSON", []byte(`{"model":`)},
		{"duplicate key", []byte(`{"model":"m","model":"n","dim":1,"repos":[],"corpus_hash":"h"}`)},
		{"empty model", base(func(m map[string]any) { m["model"] = "" })},
		{"model not a string", base(func(m map[string]any) { m["model"] = 3 })},
		{"model missing", base(func(m map[string]any) { delete(m, "model") })},
		{"dim zero", base(func(m map[string]any) { m["dim"] = 0 })},
		{"dim negative", base(func(m map[string]any) { m["dim"] = -4 })},
		{"dim a string", base(func(m map[string]any) { m["dim"] = "384" })},
		{"dim past 2^53", []byte(`{"model":"m","dim":9007199254740993,"repos":[],"corpus_hash":"h"}`)},
		{"dim a fraction", []byte(`{"model":"m","dim":384.5,"repos":[],"corpus_hash":"h"}`)},
		{"dim with exponent", []byte(`{"model":"m","dim":3.84e2,"repos":[],"corpus_hash":"h"}`)},
		{"repos missing", base(func(m map[string]any) { delete(m, "repos") })},
		{"repos not a list", base(func(m map[string]any) { m["repos"] = map[string]any{} })},
		{"repo not a map", base(func(m map[string]any) { m["repos"] = []any{"a"} })},
		{"repo id empty", base(func(m map[string]any) { repo(m)["id"] = "" })},
		{"repo url missing", base(func(m map[string]any) { delete(repo(m), "url") })},
		{"repo branch empty", base(func(m map[string]any) { repo(m)["branch"] = "" })},
		{"repo commit short", base(func(m map[string]any) { repo(m)["commit"] = "abc" })},
		{"repo commit upper", base(func(m map[string]any) { repo(m)["commit"] = strings.Repeat("A", 40) })},
		{"repo commit a branch name", base(func(m map[string]any) { repo(m)["commit"] = "main" })},
		{"corpus_hash missing", base(func(m map[string]any) { delete(m, "corpus_hash") })},
		{"corpus_hash a number", base(func(m map[string]any) { m["corpus_hash"] = 1 })},
		{"signature not base64", base(func(m map[string]any) { m["signature"] = "!!" })},
		{"signature null", base(func(m map[string]any) { m["signature"] = nil })},
		{"not an object", []byte(`[1]`)},
		{"CBOR not a map", cborOf([]any{1})},
		{"CBOR signature as text", cborOf(map[string]any{"model": "m", "dim": 1, "repos": []any{}, "corpus_hash": "h", "signature": "AA=="})},
		{"CBOR dim negative", cborOf(map[string]any{"model": "m", "dim": -1, "repos": []any{}, "corpus_hash": "h"})},
		{"CBOR dim a float", cborOf(map[string]any{"model": "m", "dim": 1.0, "repos": []any{}, "corpus_hash": "h"})},
		{"CBOR model as bytes", cborOf(map[string]any{"model": []byte("m"), "dim": 1, "repos": []any{}, "corpus_hash": "h"})},
		{"CBOR trailing byte", append(cborOf(map[string]any{"model": "m", "dim": 1, "repos": []any{}, "corpus_hash": "h"}), 0)},
		{"CBOR tag", cborOf(cbor.Tag{Number: 1, Content: map[string]any{"model": "m"}})},
		{"empty input", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := ParseDescription(c.in)
			if !isReason(err, ReasonMalformedDescription) || !errors.Is(err, ErrMalformedDescription) {
				t.Fatalf("ParseDescription(%q) = %+v, %v; want malformed_description", c.in, d, err)
			}
		})
	}
}

// jsonable turns test literals (int) into what CanonicalValue takes.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	}
	return v
}
