package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/nats-io/nats.go"

	"meshd/agent/api/apitest"
	"meshd/agent/api/client"
	"meshd/engine/runner/gguf"
	"meshd/internal/testbin"
	"meshd/rag"
	"meshd/rag/binding"
	"meshd/steward"
)

// contractDescription is the contract's corpus-hash vector, as the
// contract prints it (no corpus_hash).
const contractDescription = `{
  "model": "macula/multilingual-e5-small:f16",
  "dim": 384,
  "repos": [
    {
      "id": "alpha",
      "url": "https://example.org/alpha.git",
      "branch": "main",
      "commit": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    },
    {
      "id": "beta",
      "url": "/srv/mirrors/beta.git",
      "branch": "trunk",
      "commit": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    }
  ]
}
`

// contractHash is the contract's corpus hash of contractDescription.
const contractHash = "0d5f037bfa41e1bce262d87098576102063fa084f63441a348d2a7648b4b2644"

// writeCorpusFile writes data to a new file in dir.
func writeCorpusFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// descMap is contractDescription decoded, to edit.
func descMap(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(contractDescription))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func corpusJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signedVector is one entry of rag's signed_corpus.json: the contract's
// corpus hash signed under a profile with a synthetic key.
type signedVector struct {
	Profile         string `json:"profile"`
	SignedBy        string `json:"signed_by"`
	CorpusHash      string `json:"corpus_hash"`
	SignatureBase64 string `json:"signature_base64"`
	KeySeedHex      string `json:"key_seed_hex"`
}

func signedVectors(t *testing.T) map[string]signedVector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "rag", "testdata", "signed_corpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs []signedVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	out := map[string]signedVector{}
	for _, v := range vs {
		if v.CorpusHash != contractHash {
			t.Fatalf("vector %s signs %s, not the contract's hash", v.Profile, v.CorpusHash)
		}
		out[v.Profile] = v
	}
	if len(out) != 2 {
		t.Fatalf("vectors for %d profiles, want pq_pure and pq_hybrid", len(out))
	}
	return out
}

func TestCorpusHash(t *testing.T) {
	dir := t.TempDir()
	edit := func(f func(m map[string]any)) []byte {
		m := descMap(t)
		f(m)
		return corpusJSON(t, m)
	}
	repo := func(m map[string]any, i int) map[string]any { return m["repos"].([]any)[i].(map[string]any) }
	wireCBOR, err := cbor.Marshal(map[string]any{"model": "macula/multilingual-e5-small:f16", "dim": 384, "corpus_hash": contractHash,
		"repos": []any{
			map[string]any{"id": "alpha", "url": "https://example.org/alpha.git", "branch": "main", "commit": strings.Repeat("a", 40)},
			map[string]any{"id": "beta", "url": "/srv/mirrors/beta.git", "branch": "trunk", "commit": strings.Repeat("b", 40)},
		}})
	if err != nil {
		t.Fatal(err)
	}
	swapped := rag.CorpusHash("macula/multilingual-e5-small:f16", 384, []rag.Repo{
		{ID: "beta", URL: "/srv/mirrors/beta.git", Branch: "trunk", Commit: strings.Repeat("b", 40)},
		{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: strings.Repeat("a", 40)},
	})
	for _, tc := range []struct {
		name     string
		data     []byte
		want     string // the hash printed; "" for a refusal
		note     string // on stderr
		problem  string // in the refusal
		notFound bool
	}{
		{name: "the contract's vector", data: []byte(contractDescription), want: contractHash},
		{name: "with its hash", data: edit(func(m map[string]any) { m["corpus_hash"] = contractHash }), want: contractHash},
		{name: "claiming another hash", data: edit(func(m map[string]any) { m["corpus_hash"] = strings.Repeat("0", 64) }),
			want: contractHash, note: "corpus_hash_mismatch"},
		{name: "signed_by and other keys change nothing", data: edit(func(m map[string]any) { m["signed_by"], m["note"] = "me", "x" }), want: contractHash},
		{name: "extra repo keys change nothing", data: edit(func(m map[string]any) { repo(m, 0)["stars"] = json.Number("5") }), want: contractHash},
		{name: "the CBOR wire form", data: wireCBOR, want: contractHash},
		{name: "the empty corpus", data: []byte(`{"model":"macula/multilingual-e5-small:f16","dim":384,"repos":[]}`),
			want: "04ed59c2f056abb706d9fe88b935e413c5328070a81fbc3540a799d7ffdf3b92"},
		{name: "repos in another order", data: edit(func(m map[string]any) {
			rs := m["repos"].([]any)
			rs[0], rs[1] = rs[1], rs[0]
		}), want: swapped},
		{name: "uppercase commit", data: edit(func(m map[string]any) { repo(m, 0)["commit"] = strings.Repeat("A", 40) }), problem: "commit"},
		{name: "short commit", data: edit(func(m map[string]any) { repo(m, 1)["commit"] = "bbbb" }), problem: "repo 1: commit"},
		{name: "empty url", data: edit(func(m map[string]any) { repo(m, 0)["url"] = "" }), problem: "url is empty"},
		{name: "no model", data: edit(func(m map[string]any) { delete(m, "model") }), problem: "model"},
		{name: "dim zero", data: edit(func(m map[string]any) { m["dim"] = json.Number("0") }), problem: "dim"},
		{name: "dim with a fraction", data: edit(func(m map[string]any) { m["dim"] = json.Number("384.0") }), problem: "dim"},
		{name: "dim a string", data: edit(func(m map[string]any) { m["dim"] = "384" }), problem: "dim"},
		{name: "repos not a list", data: edit(func(m map[string]any) { m["repos"] = map[string]any{} }), problem: "repos"},
		{name: "corpus_hash not a string", data: edit(func(m map[string]any) { m["corpus_hash"] = json.Number("1") }), problem: "corpus_hash"},
		{name: "a duplicate key", data: []byte(`{"model":"m","dim":384,"dim":385,"repos":[]}`), problem: "duplicate"},
		{name: "not JSON", data: []byte(`{"model":`), problem: "JSON"},
		{name: "not a description at all", data: []byte("hello"), problem: "CBOR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCorpusFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".json", tc.data)
			out, errOut, err := meshctl(context.Background(), "corpus", "hash", path)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("a malformed description hashed: %s", out)
				}
				if !errors.Is(err, rag.ErrMalformedDescription) || !strings.Contains(err.Error(), "malformed_description") ||
					!strings.Contains(err.Error(), tc.problem) || !strings.Contains(err.Error(), path) {
					t.Fatalf("refusal %q: want malformed_description naming %q and the file", err, tc.problem)
				}
				if out != "" {
					t.Fatalf("a refusal printed %q", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if out != tc.want+"\n" {
				t.Fatalf("printed %q, want %s", out, tc.want)
			}
			if tc.note != "" && !strings.Contains(errOut, tc.note) || tc.note == "" && errOut != "" {
				t.Fatalf("stderr %q, want a note naming %q", errOut, tc.note)
			}
		})
	}
	if _, _, err := meshctl(context.Background(), "corpus", "hash"); !errors.Is(err, errUsage) {
		t.Fatalf("hash without a file: %v", err)
	}
	if _, _, err := meshctl(context.Background(), "corpus", "hash", filepath.Join(dir, "absent.json")); err == nil || errors.Is(err, errUsage) ||
		!strings.Contains(err.Error(), "absent.json") {
		t.Fatalf("hash of a missing file: %v", err)
	}
}

func TestCorpusKeygen(t *testing.T) {
	profiles := []string{rag.ProfilePQPure, rag.ProfilePQHybrid}
	if testing.Short() {
		profiles = profiles[:1] // an RSA-4096 half takes seconds
	}
	for _, profile := range profiles {
		t.Run(profile, func(t *testing.T) {
			dir := t.TempDir()
			key := filepath.Join(dir, "op.key")
			out, errOut, err := meshctl(context.Background(), "corpus", "keygen", "-profile", profile, "-o", key)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			st, err := os.Stat(key)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("key file: %v %v", err, st)
			}
			data, _ := os.ReadFile(key)
			seed, err := hex.DecodeString(strings.TrimSuffix(string(data), "\n"))
			if err != nil {
				t.Fatalf("the key file is not a hex seed: %q", data)
			}
			k, err := rag.NewKeyFromSeed(profile, seed)
			if err != nil {
				t.Fatal(err)
			}
			if out != k.NodeID()+"\n" {
				t.Fatalf("printed %q, the key's node id is %s", out, k.NodeID())
			}
			if !strings.Contains(errOut, "signing_key") || !strings.Contains(errOut, "signed_by") {
				t.Fatalf("stderr does not say where the key goes and what its id is: %q", errOut)
			}
			// Never overwritten, and nothing left behind.
			if _, _, err := meshctl(context.Background(), "corpus", "keygen", "-profile", profile, "-o", key); err == nil ||
				!strings.Contains(err.Error(), "refusing to overwrite") {
				t.Fatalf("keygen over an existing file: %v", err)
			}
			if again, _ := os.ReadFile(key); !bytes.Equal(again, data) {
				t.Fatal("the existing key file changed")
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("the directory holds %v, want the key alone", ents)
			}
		})
	}
	for _, args := range [][]string{
		{},                             // no -o
		{"-o", "k", "-profile", "rsa"}, // no such profile
		{"-o", "k", "extra"},           // a stray argument
	} {
		if _, _, err := meshctl(context.Background(), append([]string{"corpus", "keygen"}, args...)...); !errors.Is(err, errUsage) {
			t.Errorf("keygen %q: %v, want a usage error", args, err)
		}
	}
}

func TestCorpusSign(t *testing.T) {
	vectors := signedVectors(t)
	dir := t.TempDir()
	// The file claims a wrong hash, carries another operator's signature
	// label and a key nothing covers: sign recomputes, replaces and drops.
	m := descMap(t)
	m["corpus_hash"], m["signed_by"], m["note"] = strings.Repeat("f", 64), "someone", "not covered"
	m["signature"] = vectors[rag.ProfilePQHybrid].SignatureBase64
	desc := writeCorpusFile(t, dir, "desc.json", corpusJSON(t, m))
	for _, profile := range []string{rag.ProfilePQPure, rag.ProfilePQHybrid} {
		t.Run(profile, func(t *testing.T) {
			v := vectors[profile]
			key := writeCorpusFile(t, dir, profile+".key", []byte(v.KeySeedHex+"\n"))
			out, errOut, err := meshctl(context.Background(), "corpus", "sign", "-key", key, "-profile", profile, desc)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out)
			}
			if got["corpus_hash"] != contractHash || got["signed_by"] != v.SignedBy || got["note"] != nil {
				t.Fatalf("signed description %v: want the recomputed hash, signed_by %s and no uncovered key", got, v.SignedBy)
			}
			// ML-DSA-87 signs deterministically: pq_pure is the vector, byte
			// for byte. The RSA-PSS half of pq_hybrid takes fresh salt.
			if profile == rag.ProfilePQPure && got["signature"] != v.SignatureBase64 {
				t.Fatalf("the pq_pure signature is not the vector's")
			}
			d, err := rag.ParseDescription([]byte(out))
			if err != nil {
				t.Fatal(err)
			}
			if res, err := rag.VerifyCorpus(d, v.SignedBy, profile); err != nil || res != rag.SignedBy(v.SignedBy) {
				t.Fatalf("the output verifies as %v, %v", res, err)
			}
			for _, note := range []string{"ffff", "note", "replaced the signature", "verify -provider " + v.SignedBy} {
				if !strings.Contains(errOut, note) {
					t.Errorf("stderr lacks %q:\n%s", note, errOut)
				}
			}
		})
	}
	pure := writeCorpusFile(t, dir, "pure.key", []byte(vectors[rag.ProfilePQPure].KeySeedHex))
	hybrid := writeCorpusFile(t, dir, "hybrid.key", []byte(vectors[rag.ProfilePQHybrid].KeySeedHex))
	notHex := writeCorpusFile(t, dir, "bad.key", []byte("not a seed"))
	bad := writeCorpusFile(t, dir, "bad.json", []byte(`{"model":"m","dim":1,"repos":[{"id":"a","url":"u","branch":"b","commit":"c"}]}`))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-key", pure, "-profile", rag.ProfilePQHybrid, desc}, "-profile pq_pure"},
		{[]string{"-key", hybrid, desc}, "-profile pq_hybrid"},
		{[]string{"-key", notHex, desc}, "hex seed"},
		{[]string{"-key", pure, bad}, "malformed_description"},
	} {
		out, _, err := meshctl(context.Background(), append([]string{"corpus", "sign"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("sign %q: %v (printed %d bytes), want an error naming %q", tc.args, err, len(out), tc.want)
		}
	}
	if _, _, err := meshctl(context.Background(), "corpus", "sign", desc); !errors.Is(err, errUsage) {
		t.Errorf("sign without -key: %v", err)
	}
}

// signedDescription is the contract's corpus signed as in vector v, as
// describe_corpus would answer it in JSON.
func signedDescription(t *testing.T, v signedVector) map[string]any {
	m := descMap(t)
	m["corpus_hash"], m["signature"], m["signed_by"] = v.CorpusHash, v.SignatureBase64, v.SignedBy
	return m
}

func TestCorpusVerifyFile(t *testing.T) {
	vectors := signedVectors(t)
	dir := t.TempDir()
	repo0 := func(m map[string]any) map[string]any { return m["repos"].([]any)[0].(map[string]any) }
	editSig := func(f func([]byte) []byte) func(map[string]any) {
		return func(m map[string]any) {
			b, _ := base64.StdEncoding.DecodeString(m["signature"].(string))
			m["signature"] = base64.StdEncoding.EncodeToString(f(b))
		}
	}
	for _, profile := range []string{rag.ProfilePQPure, rag.ProfilePQHybrid} {
		v := vectors[profile]
		other := rag.ProfilePQHybrid
		if profile == rag.ProfilePQHybrid {
			other = rag.ProfilePQPure
		}
		for _, tc := range []struct {
			name     string
			edit     func(map[string]any)
			provider string
			profile  string
			flags    []string
			first    string // stdout's first line
			want     error  // nil for success
			says     []string
		}{
			{name: "signed", first: "signed by " + v.SignedBy,
				says: []string{"checks 2-5", "check 1, the caller's", "read from the file", "display label", "macula-rag corpus v1"}},
			{name: "provider in uppercase", provider: strings.ToUpper(v.SignedBy), first: "signed by " + v.SignedBy},
			{name: "signed_by names another node", edit: func(m map[string]any) { m["signed_by"] = vectors[other].SignedBy },
				first: "signed by " + v.SignedBy, says: []string{"not P", "not read"}},
			{name: "no signed_by", edit: func(m map[string]any) { delete(m, "signed_by") }, first: "signed by " + v.SignedBy},
			{name: "an uncovered key", edit: func(m map[string]any) { m["license"] = "MIT" }, first: "signed by " + v.SignedBy,
				says: []string{"not vouched for: license"}},
			{name: "wrong provider", provider: vectors[other].SignedBy, first: "refused: signer_not_provider", want: rag.ErrSignerNotProvider},
			{name: "wrong profile", profile: other, first: "refused: signature (malformed)", want: rag.ErrObjectMalformed},
			{name: "tampered repo", edit: func(m map[string]any) { repo0(m)["url"] = "https://evil.example/alpha.git" },
				first: "refused: corpus_hash_mismatch", want: rag.ErrCorpusHashMismatch},
			{name: "tampered repo, hash recomputed", edit: func(m map[string]any) {
				repo0(m)["commit"] = strings.Repeat("c", 40)
				m["corpus_hash"] = rag.CorpusHash("macula/multilingual-e5-small:f16", 384, []rag.Repo{
					{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: strings.Repeat("c", 40)},
					{ID: "beta", URL: "/srv/mirrors/beta.git", Branch: "trunk", Commit: strings.Repeat("b", 40)}})
			}, first: "refused: signature_hash_mismatch", want: rag.ErrSignatureHashMismatch},
			{name: "tampered model", edit: func(m map[string]any) { m["model"] = "macula/other:f16" },
				first: "refused: corpus_hash_mismatch", want: rag.ErrCorpusHashMismatch},
			{name: "tampered signature", edit: editSig(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
				first: "refused: signature (signature_invalid)", want: rag.ErrSignatureInvalid},
			{name: "truncated signature", edit: editSig(func(b []byte) []byte { return b[:len(b)-1] }),
				first: "refused: signature (malformed)", want: rag.ErrObjectMalformed},
			{name: "empty signature", edit: func(m map[string]any) { m["signature"] = "" },
				first: "refused: signature (malformed)", want: rag.ErrObjectMalformed},
			{name: "signature not base64", edit: func(m map[string]any) { m["signature"] = "%%%" },
				first: "refused: malformed_description", want: rag.ErrMalformedDescription},
			{name: "malformed commit", edit: func(m map[string]any) { repo0(m)["commit"] = "main" },
				first: "refused: malformed_description", want: rag.ErrMalformedDescription},
			{name: "unsigned", edit: func(m map[string]any) { delete(m, "signature"); delete(m, "signed_by") },
				first: "unsigned", says: []string{"check 2", "no operator vouches"}},
			{name: "unsigned with a signed_by", edit: func(m map[string]any) { delete(m, "signature") },
				first: "unsigned", says: []string{"without a signature", "ignored"}},
			{name: "unsigned, a signature required", edit: func(m map[string]any) { delete(m, "signature") },
				flags: []string{"-require-signed"}, first: "unsigned", want: errRequireSignedForTest},
		} {
			t.Run(profile+"/"+tc.name, func(t *testing.T) {
				m := signedDescription(t, v)
				if tc.edit != nil {
					tc.edit(m)
				}
				path := writeCorpusFile(t, dir, profile+"_"+strings.ReplaceAll(tc.name, " ", "_")+".json", corpusJSON(t, m))
				provider := v.SignedBy
				if tc.provider != "" {
					provider = tc.provider
				}
				prof := profile
				if tc.profile != "" {
					prof = tc.profile
				}
				// The file first, flags after: both orders parse.
				args := append([]string{"corpus", "verify", path, "-provider", provider, "-profile", prof}, tc.flags...)
				out, errOut, err := meshctl(context.Background(), args...)
				if first, _, _ := strings.Cut(out, "\n"); first != tc.first {
					t.Fatalf("first line %q, want %q\n%s%s", first, tc.first, out, errOut)
				}
				switch {
				case tc.want == nil && err != nil:
					t.Fatalf("%v\n%s", err, out)
				case tc.want == errRequireSignedForTest:
					if err == nil || !strings.Contains(err.Error(), "-require-signed") || errors.Is(err, errUsage) {
						t.Fatalf("an unsigned corpus passed -require-signed: %v", err)
					}
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Fatalf("error %v, want %v", err, tc.want)
				case tc.want != nil && !strings.Contains(err.Error(), path):
					t.Fatalf("the refusal %q does not name the file", err)
				}
				for _, s := range tc.says {
					if !strings.Contains(out, s) {
						t.Errorf("the output lacks %q:\n%s", s, out)
					}
				}
			})
		}
	}
	good := writeCorpusFile(t, dir, "good.json", corpusJSON(t, signedDescription(t, vectors[rag.ProfilePQPure])))
	p := vectors[rag.ProfilePQPure].SignedBy
	// A file that cannot be read is no refusal of a description.
	out, _, err := meshctl(context.Background(), "corpus", "verify", "-provider", p, filepath.Join(dir, "absent.json"))
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "absent.json") || out != "" {
		t.Errorf("verify of a missing file: %v, printed %q", err, out)
	}
	for _, args := range [][]string{
		{good},                     // no -provider
		{"-provider", "abc", good}, // not a node id
		{"-provider", strings.Repeat("g", 64), good},
		{"-provider", p, "-profile", "pq_rsa", good},
		{"-provider", p},                               // nothing to verify
		{"-provider", p, good, good},                   // two files
		{"-provider", p, "-corpus", "a/b", good},       // a file and a corpus
		{"-provider", p, "-addr", "127.0.0.1:1", good}, // -addr without -corpus
		{"-provider", p, "-corpus", "nameless"},
	} {
		if _, _, err := meshctl(context.Background(), append([]string{"corpus", "verify"}, args...)...); !errors.Is(err, errUsage) {
			t.Errorf("verify %q: %v, want a usage error", args, err)
		}
	}
}

// errRequireSignedForTest marks the case whose refusal is -require-signed's.
var errRequireSignedForTest = errors.New("require-signed")

func TestCorpusVerifyHit(t *testing.T) {
	dir := t.TempDir()
	content := "a joule is\none watt for\none second\n"
	sum := sha256.Sum256([]byte(content))
	score := 0.75
	hit := rag.Hit{ChunkID: "c1", Score: &score, Content: content, Provenance: rag.Provenance{Kind: rag.KindCorpus,
		Path: "alpha/joule.md", RepoID: "alpha", Commit: strings.Repeat("a", 40), StartLine: 1, EndLine: 3,
		ContentSHA256: hex.EncodeToString(sum[:])}}
	deposit := rag.Hit{ChunkID: "d1", Content: content, Provenance: rag.Provenance{Kind: rag.KindDeposit, Path: "notes/joule",
		ContentSHA256: hex.EncodeToString(sum[:])}}
	wire := func(h rag.Hit, f func(m, prov map[string]any)) map[string]any {
		m := client.WireHit(h)
		if f != nil {
			f(m, m["provenance"].(map[string]any))
		}
		return m
	}
	for _, tc := range []struct {
		name string
		data []byte
		ok   int   // hits reported ok
		want error // nil: all ok
		says string
	}{
		{name: "ok", data: corpusJSON(t, wire(hit, nil)), ok: 1},
		{name: "a deposit", data: corpusJSON(t, wire(deposit, nil)), ok: 1},
		{name: "a saved answer", data: corpusJSON(t, map[string]any{"corpus_hash": contractHash,
			"hits": []any{wire(hit, nil), wire(deposit, nil)}}), ok: 2},
		{name: "tampered content", data: corpusJSON(t, wire(hit, func(m, _ map[string]any) { m["content"] = "a joule is\ntwo watts\n" })),
			want: rag.ErrContentMismatch, says: "content_mismatch"},
		{name: "tampered hash", data: corpusJSON(t, wire(hit, func(_, p map[string]any) { p["content_sha256"] = strings.Repeat("0", 64) })),
			want: rag.ErrContentMismatch, says: "content_mismatch"},
		{name: "short commit", data: corpusJSON(t, wire(hit, func(_, p map[string]any) { p["commit"] = "aaaa" })),
			want: rag.ErrMalformedHit, says: "malformed_provenance"},
		{name: "a deposit naming a repo", data: corpusJSON(t, wire(deposit, func(_, p map[string]any) { p["repo_id"] = "alpha" })),
			want: rag.ErrMalformedHit, says: "malformed_provenance"},
		{name: "a line that is not an integer", data: corpusJSON(t, wire(hit, func(_, p map[string]any) { p["start_line"] = 1.5 })),
			want: rag.ErrMalformedHit, says: "malformed_provenance"},
		{name: "one of two tampered", data: corpusJSON(t, []any{wire(hit, nil), wire(hit, func(m, _ map[string]any) { m["content"] = "x" })}),
			ok: 1, want: rag.ErrContentMismatch, says: "1 of 2"},
		// The hashed text first, another after: encoding/json alone would
		// check the second. Duplicates are refused, never resolved.
		{name: "content twice", data: []byte(strings.Replace(string(corpusJSON(t, wire(hit, nil))), `"content":`,
			`"content":"forged","content":`, 1)), says: "duplicate"},
		{name: "not JSON", data: []byte("chunk c1"), says: "not a hit in JSON"},
		{name: "no hits", data: []byte(`{"hits":[]}`), says: "no hits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCorpusFile(t, dir, strings.ReplaceAll(tc.name, " ", "_")+".json", tc.data)
			out, _, err := meshctl(context.Background(), "corpus", "verify-hit", path)
			if got := strings.Count(out, ": ok: "); got != tc.ok {
				t.Fatalf("%d hits ok, want %d:\n%s", got, tc.ok, out)
			}
			if tc.ok > 0 && !strings.Contains(out, "ok is not corpus membership") {
				t.Fatalf("an ok without the contract's warning:\n%s", out)
			}
			if tc.want == nil && tc.says == "" {
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				return
			}
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) || !strings.Contains(err.Error()+out, tc.says) {
				t.Fatalf("error %v (output %q), want %v naming %q", err, out, tc.want, tc.says)
			}
		})
	}
}

// ---- against a running meshd ----

// meshGGUF is the GGUF runner (the embedding engine), built once.
func meshGGUF(t *testing.T) string { return testbin.Build(t, "meshd/cmd/mesh-gguf") }

// corpusGitRepo makes a local git repository with one commit of files and
// returns its directory and the commit.
func corpusGitRepo(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			t.Fatal(err)
		}
	}
	h, err := wt.Commit("c", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.org", When: time.Unix(1_767_225_600, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	return dir, h.String()
}

// corpusFixture is a stack serving two corpora of local repos, embedded
// by the real runner: example/docs (two repos, signed with a pq_pure key
// made by meshctl corpus keygen) and example/plain (unsigned).
type corpusFixture struct {
	*testStack
	provider string // the operator key's node id
	alpha    string // alpha's pinned commit
	beta     string
}

func startCorpusStack(t *testing.T) *corpusFixture {
	t.Helper()
	runner := meshGGUF(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "embed.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Synth(f, gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}, 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	key := filepath.Join(dir, "operator.key")
	out, errOut, err := meshctl(context.Background(), "corpus", "keygen", "-o", key)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	fx := &corpusFixture{provider: strings.TrimSpace(out)}
	var a, b string
	a, fx.alpha = corpusGitRepo(t, map[string]string{"shunt.md": "the shunt turns current\ninto a voltage\nthe chip reads it\n",
		"joule.md": "a joule is\none watt for\none second\n"})
	b, fx.beta = corpusGitRepo(t, map[string]string{"receipt.md": "each receipt\nis signed\nand chained\n"})
	corpus := func(name, extra string) string {
		return fmt.Sprintf(`
[[corpus]]
org = "example"
name = %q
model = "test/llama-synth-embed:f32"
embedding_model = %q
runner = %q
query_prefix = "query: "
passage_prefix = "passage: "
chunk_lines = 4
chunk_overlap = 1
uj_per_token = 3
%s`, name, model, runner, extra)
	}
	cfg := corpus("docs", fmt.Sprintf(`signing_key = %q
signing_profile = "pq_pure"

[[corpus.repo]]
id = "alpha"
url = "https://example.org/alpha.git"
path = %q
branch = "main"
commit = %q

[[corpus.repo]]
id = "beta"
url = "/srv/mirrors/beta.git"
path = %q
branch = "trunk"
commit = %q
`, key, a, fx.alpha, b, fx.beta)) + corpus("plain", fmt.Sprintf(`
[[corpus.repo]]
id = "beta"
url = "/srv/mirrors/beta.git"
path = %q
branch = "trunk"
commit = %q
`, b, fx.beta))
	fx.testStack = startStack(t, cfg)
	return fx
}

// corpusProxy fronts the daemon and rewrites one procedure's CBOR reply
// with edit.
func corpusProxy(t *testing.T, upstream, proc string, edit func(m map[string]any)) string {
	t.Helper()
	u, err := url.Parse("http://" + upstream)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any{})}.DecMode()
	if err != nil {
		t.Fatal(err)
	}
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.URL.Path, "/"+proc) || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var m map[string]any
		if err := dm.Unmarshal(body, &m); err != nil {
			return err
		}
		edit(m)
		if body, err = em.Marshal(m); err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestCorpusRemote(t *testing.T) {
	fx := startCorpusStack(t)
	ctx := context.Background()
	docsHash := rag.CorpusHash("test/llama-synth-embed:f32", 64, []rag.Repo{
		{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: fx.alpha},
		{ID: "beta", URL: "/srv/mirrors/beta.git", Branch: "trunk", Commit: fx.beta}})

	t.Run("describe", func(t *testing.T) {
		out, errOut, err := meshctl(ctx, "corpus", "describe", "-addr", fx.addr, "-corpus", "example/docs")
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		for _, want := range []string{
			"model  test/llama-synth-embed:f32", "dim  64", "repos  2",
			"alpha  https://example.org/alpha.git  branch main  commit " + fx.alpha,
			"beta  /srv/mirrors/beta.git  branch trunk  commit " + fx.beta,
			"corpus_hash  " + docsHash, "matches: recomputed",
			fmt.Sprintf("signed_by  %q (a display label", fx.provider), "not checked here",
		} {
			if !containsSpaced(out, want) {
				t.Errorf("describe lacks %q:\n%s", want, out)
			}
		}
		out, _, err = meshctl(ctx, "corpus", "describe", "-addr", fx.addr, "-corpus", "example/plain")
		if err != nil || !containsSpaced(out, "signature  none: unsigned") {
			t.Fatalf("describe plain: %v\n%s", err, out)
		}
	})

	t.Run("verify", func(t *testing.T) {
		other := signedVectors(t)[rag.ProfilePQPure].SignedBy
		for _, tc := range []struct {
			args  []string
			first string
			want  error
		}{
			{[]string{"-provider", fx.provider, "-corpus", "example/docs"}, "signed by " + fx.provider, nil},
			{[]string{"-provider", other, "-corpus", "example/docs"}, "refused: signer_not_provider", rag.ErrSignerNotProvider},
			{[]string{"-provider", fx.provider, "-profile", "pq_hybrid", "-corpus", "example/docs"}, "refused: signature (malformed)", rag.ErrSignatureRefused},
			{[]string{"-provider", fx.provider, "-corpus", "example/plain"}, "unsigned", nil},
		} {
			out, errOut, err := meshctl(ctx, append([]string{"corpus", "verify", "-addr", fx.addr}, tc.args...)...)
			if first, _, _ := strings.Cut(out, "\n"); first != tc.first {
				t.Errorf("verify %q: first line %q, want %q\n%s%s", tc.args, first, tc.first, out, errOut)
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("verify %q: %v, want %v", tc.args, err, tc.want)
			}
			if tc.want == nil && strings.HasPrefix(out, "signed") && !strings.Contains(out, "an address you gave") {
				t.Errorf("verify %q does not say check 1 is the caller's:\n%s", tc.args, out)
			}
		}
		if _, _, err := meshctl(ctx, "corpus", "verify", "-addr", fx.addr, "-provider", fx.provider, "-require-signed", "-corpus", "example/plain"); err == nil {
			t.Error("an unsigned corpus passed -require-signed")
		}
	})

	t.Run("query", func(t *testing.T) {
		before := fx.n.Stores.Log.Durable()
		out, errOut, err := meshctl(ctx, "corpus", "query", "-addr", fx.addr, "-corpus", "example/docs", "-k", "3", "current", "into", "a", "voltage")
		if err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		if fx.n.Stores.Log.Durable() != before+1 {
			t.Fatalf("the log went from %d to %d receipts, want one more", before, fx.n.Stores.Log.Durable())
		}
		r := fx.logged(t, before)
		for _, want := range []string{
			"corpus example/docs  corpus_hash " + docsHash, "names describe_corpus's hash",
			"alpha/shunt.md:1-3 @" + fx.alpha, "| the shunt turns current", "content matches its content_sha256",
			"3 of 3 hits verify", "not corpus membership",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("query lacks %q:\n%s", want, out)
			}
		}
		if n := strings.Count(out, "\n   chunk "); n != 3 {
			t.Errorf("%d hits printed, want 3:\n%s", n, out)
		}
		for _, want := range []string{
			"verified under the steward key", "sequence  " + strconv.FormatUint(before, 10), "id  " + r.ID.String(),
			"backend  rag:example/docs", "recipe  " + r.Receipt.Recipe + " (names the corpus hash)",
			fmt.Sprintf("tokens  in %d, out 3 (hits), accepted 3", r.Receipt.TokensIn),
			fmt.Sprintf("µJ  estimated %d", r.Receipt.EstimatedUJ), "provenance  " + r.Receipt.EnergyProvenance,
		} {
			if !containsSpaced(errOut, want) {
				t.Errorf("the receipt summary lacks %q:\n%s", want, errOut)
			}
		}
		if !strings.HasPrefix(r.Receipt.Recipe, "rag/v1:corpus="+docsHash+":") {
			t.Errorf("the sealed recipe %q does not name the corpus", r.Receipt.Recipe)
		}
	})

	t.Run("query -json, then verify-hit", func(t *testing.T) {
		out, errOut, err := meshctl(ctx, "corpus", "query", "-addr", fx.addr, "-corpus", "example/docs", "-k", "2", "-json", "what is a joule")
		if err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		var ans struct {
			Corpus     string           `json:"corpus"`
			CorpusHash string           `json:"corpus_hash"`
			Hits       []map[string]any `json:"hits"`
			Receipt    struct {
				ID       string `json:"id"`
				Sequence uint64 `json:"sequence"`
				Envelope string `json:"envelope"`
			} `json:"receipt"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil {
			t.Fatalf("-json printed no JSON: %v\n%s", err, out)
		}
		if ans.Corpus != "example/docs" || ans.CorpusHash != docsHash || len(ans.Hits) != 2 {
			t.Fatalf("-json: %+v", ans)
		}
		env, _ := base64.StdEncoding.DecodeString(ans.Receipt.Envelope)
		o, err := steward.OpenEnvelope(env, fx.n.Trusted())
		if err != nil || o.ID.String() != ans.Receipt.ID || o.Receipt.Sequence != ans.Receipt.Sequence {
			t.Fatalf("the printed receipt: %v", err)
		}
		dir := t.TempDir()
		hitFile := writeCorpusFile(t, dir, "hit.json", corpusJSON(t, ans.Hits[0]))
		if out, _, err := meshctl(ctx, "corpus", "verify-hit", hitFile); err != nil || !strings.Contains(out, ": ok: ") {
			t.Fatalf("verify-hit of a hit query printed: %v\n%s", err, out)
		}
		answerFile := writeCorpusFile(t, dir, "answer.json", []byte(out))
		if out, _, err := meshctl(ctx, "corpus", "verify-hit", answerFile); err != nil || strings.Count(out, ": ok: ") != 2 {
			t.Fatalf("verify-hit of the saved answer: %v\n%s", err, out)
		}
		ans.Hits[0]["content"] = ans.Hits[0]["content"].(string) + "and more\n"
		tampered := writeCorpusFile(t, dir, "tampered.json", corpusJSON(t, ans.Hits[0]))
		if _, _, err := meshctl(ctx, "corpus", "verify-hit", tampered); !errors.Is(err, rag.ErrContentMismatch) {
			t.Fatalf("verify-hit of tampered content: %v", err)
		}
	})

	t.Run("client", func(t *testing.T) {
		c, err := client.New(fx.addr)
		if err != nil {
			t.Fatal(err)
		}
		text := "each receipt is signed"
		a, err := c.Answer(ctx, "example", "docs", client.Query{Text: &text, TopK: 1})
		if err != nil || len(a.Hits) != 1 || a.CorpusHash != docsHash {
			t.Fatalf("answer: %v %+v", err, a)
		}
		h, err := c.Chunk(ctx, "example", "docs", a.Hits[0].ChunkID)
		if err != nil || h.Score != nil || h.Content != a.Hits[0].Content || rag.VerifyHit(h) != nil {
			t.Fatalf("chunk: %v %+v", err, h)
		}
		doc, err := c.Document(ctx, "example", "docs", "alpha/shunt.md")
		if err != nil || string(doc.Raw) != "the shunt turns current\ninto a voltage\nthe chip reads it\n" || doc.Verify() != nil ||
			doc.Provenance.Commit != fx.alpha {
			t.Fatalf("document: %v %+v", err, doc)
		}
		page, err := c.Sources(ctx, "example", "docs", 0, 2)
		if err != nil || len(page.Rows) != 2 || page.Rows[0].SourcePath != "alpha/joule.md" || page.Rows[1].SourcePath != "alpha/shunt.md" {
			t.Fatalf("sources: %v %+v", err, page)
		}
		page, err = c.Sources(ctx, "example", "docs", 2, 0)
		if err != nil || page.Offset != 2 || len(page.Rows) != 1 || page.Rows[0].SourcePath != "beta/receipt.md" || page.Rows[0].Provenance.Commit != fx.beta {
			t.Fatalf("sources from 2: %v %+v", err, page)
		}
		list, err := c.Corpora(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("corpora: %v %+v", err, list)
		}
		for _, tc := range []struct {
			call func() error
			code string
		}{
			{func() error { _, _, err := c.Describe(ctx, "example", "nope"); return err }, "unknown_corpus"},
			{func() error { _, err := c.Chunk(ctx, "example", "docs", "nope"); return err }, "not_found"},
			{func() error { _, err := c.Document(ctx, "example", "docs", "alpha/nope"); return err }, "not_found"},
			{func() error { _, err := c.Sources(ctx, "example", "docs", 0, 201); return err }, "bad_arguments"},
			{func() error {
				_, err := c.Answer(ctx, "example", "docs", client.Query{Vector: []float64{1, 2, 3}})
				return err
			}, "dimension_mismatch"},
		} {
			var ce *client.Error
			if err := tc.call(); !errors.As(err, &ce) || ce.Code != tc.code {
				t.Errorf("%v, want a %s refusal", err, tc.code)
			}
		}
		if _, _, err := meshctl(ctx, "corpus", "query", "-addr", fx.addr, "-corpus", "example/nope", "x"); err == nil ||
			!strings.Contains(err.Error(), "unknown_corpus") {
			t.Errorf("query of an unknown corpus: %v", err)
		}
	})

	// Check 1: a reply is signed by the provider's steward key over the
	// request sent; node B relaying node A's replies (the /v1/rag calls go
	// to A, the rest to B) is refused for a caller that called B.
	t.Run("bound to the provider", func(t *testing.T) {
		keyA := hex.EncodeToString(fx.n.Trusted())
		b := startStack(t, apitest.RefBackends)
		keyB := hex.EncodeToString(b.n.Trusted())
		ua, _ := url.Parse("http://" + fx.addr)
		ub, _ := url.Parse("http://" + b.addr)
		toA, toB := httputil.NewSingleHostReverseProxy(ua), httputil.NewSingleHostReverseProxy(ub)
		relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/v1/rag/") {
				toA.ServeHTTP(w, r)
				return
			}
			toB.ServeHTTP(w, r)
		}))
		t.Cleanup(relay.Close)
		relayAddr := relay.Listener.Addr().String()

		out, errOut, err := meshctl(ctx, "corpus", "query", "-addr", fx.addr, "-steward", keyA, "-corpus", "example/docs", "-k", "1", "joule")
		if err != nil || !strings.Contains(errOut, "checked (check 1): signed by steward "+keyA+", the key you pinned") {
			t.Fatalf("a reply from A, pinned A: %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = meshctl(ctx, "corpus", "verify", "-addr", fx.addr, "-steward", keyA, "-provider", fx.provider, "-corpus", "example/docs")
		if err != nil || !strings.Contains(out, "checked (check 1): the reply is signed by steward "+keyA) || strings.Contains(out, "not checked (check 1") {
			t.Fatalf("verify from A, pinned A: %v\n%s%s", err, out, errOut)
		}
		for _, args := range [][]string{
			{"query", "-addr", relayAddr, "-steward", keyB, "-corpus", "example/docs", "-k", "1", "joule"},
			{"query", "-addr", relayAddr, "-corpus", "example/docs", "-k", "1", "joule"}, // the key the relay names is B's
			{"describe", "-addr", relayAddr, "-steward", keyB, "-corpus", "example/docs"},
			{"verify", "-addr", relayAddr, "-steward", keyB, "-provider", fx.provider, "-corpus", "example/docs"},
		} {
			out, errOut, err := meshctl(ctx, append([]string{"corpus"}, args...)...)
			if !errors.Is(err, binding.RefusedSigner) && !strings.Contains(fmt.Sprint(err), string(binding.RefusedSigner)) {
				t.Errorf("%q: A's reply relayed by B: %v, want %s\n%s%s", args, err, binding.RefusedSigner, out, errOut)
			}
		}
		// The client refuses an unbound reply to the lookups outright.
		c, err := client.New(relayAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.Trust(b.n.Trusted())
		if _, err := c.Document(ctx, "example", "docs", "alpha/shunt.md"); !errors.Is(err, binding.RefusedSigner) {
			t.Errorf("document relayed by B: %v, want %s", err, binding.RefusedSigner)
		}
		c.Trust(fx.n.Trusted())
		if _, err := c.Document(ctx, "example", "docs", "alpha/shunt.md"); err != nil {
			t.Errorf("document relayed unchanged, pinned A: %v (a relay that changes nothing is transparent)", err)
		}
	})

	// Discovery on NATS: the node announces its corpora, corpus discover
	// lists them, corpus query -nats finds the provider and queries it,
	// its replies bound to the steward key pinned with -steward.
	t.Run("over NATS", func(t *testing.T) {
		url, _ := fleetServer(t)
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ann, err := fx.api.AnnounceRAG(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ann.Stop() })
		keyA := hex.EncodeToString(fx.n.Trusted())
		out, errOut, err := meshctl(ctx, "corpus", "discover", "-url", url, "-corpus", "example/docs", "-want", "1", "-wait", "10s")
		if err != nil || !containsSpaced(out, keyA+"  example/docs  "+docsHash+"  test/llama-synth-embed:f32  64") || !strings.Contains(errOut, "1 provider(s)") {
			t.Fatalf("discover: %v\n%s%s", err, out, errOut)
		}
		out, errOut, err = meshctl(ctx, "corpus", "query", "-nats", "-url", url, "-wait", "10s", "-steward", keyA, "-corpus-hash", docsHash,
			"-corpus", "example/docs", "-k", "2", "a", "joule")
		if err != nil || !strings.Contains(errOut, "querying provider "+keyA+" on NATS") ||
			!strings.Contains(errOut, "checked (check 1): signed by steward "+keyA) || !strings.Contains(out, "2 of 2 hits verify") {
			t.Fatalf("query -nats: %v\n%s%s", err, out, errOut)
		}
		other := strings.Repeat("ab", 32)
		if _, _, err := meshctl(ctx, "corpus", "query", "-nats", "-url", url, "-wait", "200ms", "-steward", other, "-corpus", "example/docs", "joule"); err == nil ||
			!strings.Contains(err.Error(), "no provider of example/docs answered on NATS within 200ms with steward "+other) {
			t.Fatalf("query -nats pinned to a key nobody announces: %v", err)
		}
	})

	t.Run("tampered replies", func(t *testing.T) {
		repoURL := func(m map[string]any) {
			m["repos"].([]any)[0].(map[string]any)["url"] = "https://evil.example/alpha.git"
		}
		for _, tc := range []struct {
			name, proc string
			edit       func(m map[string]any)
			args       []string // after -addr PROXY
			first      string   // stdout's first line, when set
			says       string   // in the error, stdout or stderr
			want       error
		}{
			// Injected text is reported, and its terminal escapes are
			// printed escaped, never sent to the terminal.
			{name: "hit content", proc: client.ProcAnswerQuery, edit: func(m map[string]any) {
				h := m["hits"].([]any)[0].(map[string]any)
				h["content"] = "\x1b]0;pwned\x07\x1b[2J\u202einjected\n" + h["content"].(string)
			}, args: []string{"query", "-corpus", "example/docs", "-k", "2", "joule"}, says: `DOES NOT VERIFY: content_mismatch`},
			{name: "hit repo", proc: client.ProcAnswerQuery, edit: func(m map[string]any) {
				h := m["hits"].([]any)[0].(map[string]any)
				h["provenance"].(map[string]any)["repo_id"] = "gamma"
			}, args: []string{"query", "-corpus", "example/docs", "-k", "2", "joule"}, says: `repo_id "gamma" is not one of the described repos`},
			{name: "answer corpus hash", proc: client.ProcAnswerQuery, edit: func(m map[string]any) { m["corpus_hash"] = strings.Repeat("0", 64) },
				args: []string{"query", "-corpus", "example/docs", "joule"}, says: "the answer names corpus_hash"},
			{name: "receipt", proc: client.ProcAnswerQuery, edit: func(m map[string]any) {
				env := m["x_receipt"].([]byte)
				env[len(env)-1] ^= 1
			}, args: []string{"query", "-corpus", "example/docs", "joule"}, says: "does not verify"},
			{name: "describe repo", proc: client.ProcDescribeCorpus, edit: repoURL,
				args: []string{"describe", "-corpus", "example/docs"}, says: "DOES NOT MATCH", want: rag.ErrCorpusHashMismatch},
			// A reply changed on the way is not the provider's: check 1
			// refuses it before checks 2-5 are reached.
			{name: "verify repo", proc: client.ProcDescribeCorpus, edit: repoURL,
				args: []string{"verify", "-provider", fx.provider, "-corpus", "example/docs"}, first: "refused: reply_body_mismatch", want: binding.RefusedBody},
			{name: "verify repo and hash", proc: client.ProcDescribeCorpus, edit: func(m map[string]any) {
				repoURL(m)
				m["corpus_hash"] = rag.CorpusHash("test/llama-synth-embed:f32", 64, []rag.Repo{
					{ID: "alpha", URL: "https://evil.example/alpha.git", Branch: "main", Commit: fx.alpha},
					{ID: "beta", URL: "/srv/mirrors/beta.git", Branch: "trunk", Commit: fx.beta}})
			}, args: []string{"verify", "-provider", fx.provider, "-corpus", "example/docs"}, first: "refused: reply_body_mismatch", want: binding.RefusedBody},
			{name: "query against a moved description", proc: client.ProcDescribeCorpus, edit: func(m map[string]any) {
				m["repos"] = m["repos"].([]any)[:1]
				m["corpus_hash"] = rag.CorpusHash("test/llama-synth-embed:f32", 64, []rag.Repo{
					{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: fx.alpha}})
			}, args: []string{"query", "-corpus", "example/docs", "-k", "3", "each receipt"}, says: "does not name corpus_hash"},
			{name: "describe dim", proc: client.ProcDescribeCorpus, edit: func(m map[string]any) { m["dim"] = -1 },
				args: []string{"describe", "-corpus", "example/docs"}, says: "malformed_description", want: rag.ErrMalformedDescription},
		} {
			t.Run(tc.name, func(t *testing.T) {
				proxy := corpusProxy(t, fx.addr, tc.proc, tc.edit)
				out, errOut, err := meshctl(ctx, append([]string{"corpus", tc.args[0], "-addr", proxy}, tc.args[1:]...)...)
				if err == nil {
					t.Fatalf("a tampered reply passed:\n%s%s", out, errOut)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
				if tc.first != "" {
					if first, _, _ := strings.Cut(out, "\n"); first != tc.first {
						t.Fatalf("first line %q, want %q", first, tc.first)
					}
				}
				if !strings.Contains(err.Error()+out+errOut, tc.says) {
					t.Fatalf("nothing says %q: %v\n%s%s", tc.says, err, out, errOut)
				}
				if strings.ContainsAny(out+errOut, "\x1b\x07\u202e") {
					t.Fatalf("a control character reached the output:\n%q", out+errOut)
				}
			})
		}
	})
}

func TestDisplayText(t *testing.T) {
	for in, want := range map[string]string{
		"plain text\twith a tab": "plain text\twith a tab",
		"é and ✓":                "é and ✓",
		"\x1b[2Jcleared":         `\x1b[2Jcleared`,
		"bell\x07":               `bell\a`,
		"new\nline":              `new\nline`,
		"\u202edesrever":         `\u202edesrever`,
		"c1 \u009b control":      `c1 \u009b control`,
		"del \x7f":               `del \x7f`,
	} {
		if got := displayText(in); got != want {
			t.Errorf("displayText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCorpusUsage(t *testing.T) {
	for _, args := range [][]string{
		{"corpus"},
		{"corpus", "summon"},
		{"corpus", "describe", "-addr", "127.0.0.1:1"},          // no -corpus
		{"corpus", "describe", "-corpus", "docs"},               // not org/name
		{"corpus", "query", "-corpus", "a/b"},                   // no text
		{"corpus", "query", "-corpus", "a/b", "-k", "101", "x"}, // top_k past 100
		{"corpus", "query", "-corpus", "a/b", "-floor", "5", "x"},
		{"corpus", "verify-hit"},
	} {
		_, errOut, err := meshctl(context.Background(), args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
		if len(args) <= 2 && !strings.Contains(errOut, "verify-hit HIT.json") {
			t.Errorf("%q: the usage does not list the commands:\n%s", args, errOut)
		}
	}
	// A daemon that is not there is not a usage error, and says so.
	_, _, err := meshctl(context.Background(), "corpus", "describe", "-addr", "127.0.0.1:1", "-corpus", "a/b")
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "describe_corpus") {
		t.Errorf("describe with no daemon: %v", err)
	}
}
