package rag

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// FuzzCanonical: Canonical never panics, what it accepts comes out as valid
// JSON, and canonical output is a fixed point.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b": {"c": "q\"b\\s\n\u0001é/"}, "a": [1, "x"]}`,
		contractDescriptionJSON,
		`[333333333.33333329, 1E30, 4.50, 2e-3, 1e-27, -0, 5e-324, 1e21]`,
		`{"\u20ac":1,"\r":2,"\ud83d\ude00":3,"\ufb33":4}`,
		`"\ud800"`, `{"a":1,"a":2}`, `1e400`, "\"\xff\"", `[[[]]]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonical(data)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q, not JSON", data, out)
		}
		again, err := Canonical(out)
		if err != nil {
			t.Fatalf("Canonical(%q) = %q, which is refused: %v", data, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q → %q → %q", data, out, again)
		}
	})
}

// FuzzParseDescription: never panics; what it accepts validates, hashes, and
// VerifyCorpus reaches a verdict or a refusal with a contract reason.
func FuzzParseDescription(f *testing.F) {
	f.Add([]byte(contractDescriptionJSON))
	d := contractDescription()
	if wire, err := coreEncMode.Marshal(map[string]any{
		"model": d.Model, "dim": d.Dim, "corpus_hash": d.CorpusHash, "signature": []byte{1},
		"repos": []any{map[string]any{"id": "a", "url": "u", "branch": "b", "commit": d.Repos[0].Commit}},
	}); err == nil {
		f.Add(wire)
	}
	f.Add([]byte(`{"model":"m","dim":1,"repos":[],"corpus_hash":"` + CorpusHash("m", 1, nil) + `"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDescription(data)
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) || r.Reason() != ReasonMalformedDescription {
				t.Fatalf("ParseDescription refused with %v", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted but invalid: %v", err)
		}
		if d.Hash() == "" {
			t.Fatal("accepted but has no hash")
		}
		_, err = VerifyCorpus(d, "00", ProfilePQPure)
		var r *Refusal
		if err != nil && !errors.As(err, &r) {
			t.Fatalf("VerifyCorpus: %v is not a refusal", err)
		}
	})
}

// FuzzOpenSigned: Open never panics, refuses with one of macula's three
// reasons, and whatever it accepts re-verifies to the same hash and key.
func FuzzOpenSigned(f *testing.F) {
	raw, err := readVectorSeeds()
	if err == nil {
		for _, obj := range raw {
			f.Add(obj, true)
			f.Add(obj, false)
		}
	}
	f.Add([]byte{0xa3, 0x63, 'k', 'e', 'y', 0x40, 0x63, 't', 'b', 's', 0x40, 0x69, 's', 'i', 'g', 'n', 'a', 't', 'u', 'r', 'e', 0x40}, true)
	f.Fuzz(func(t *testing.T, object []byte, pure bool) {
		profile := ProfilePQHybrid
		if pure {
			profile = ProfilePQPure
		}
		hash, key, err := Open(profile, object)
		if err != nil {
			if ObjectRefusalReason(err) == "" {
				t.Fatalf("Open refused with %v", err)
			}
			return
		}
		hash2, key2, err := Open(profile, object)
		if err != nil || hash2 != hash || !bytes.Equal(key, key2) {
			t.Fatalf("Open is not stable: %v", err)
		}
	})
}

func readVectorSeeds() ([][]byte, error) {
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		return nil, err
	}
	var vs []signedVector
	if err := json.Unmarshal(raw, &vs); err != nil {
		return nil, err
	}
	var out [][]byte
	for _, v := range vs {
		b, err := base64.StdEncoding.DecodeString(v.SignatureBase64)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}
