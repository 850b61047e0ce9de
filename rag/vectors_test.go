package rag

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
	"testing/cryptotest"
)

var update = flag.Bool("update", false, "rewrite testdata/signed_corpus.json (go test ./rag -run TestWriteVectors -update)")

const vectorsPath = "testdata/signed_corpus.json"

// signedVector is one entry of testdata/signed_corpus.json. The first four
// fields are macula's test/vectors/signed_corpus.json shape; key_seed_hex is
// ours, so the vector can be made again (NewKeyFromSeed's seed form).
type signedVector struct {
	Profile         string `json:"profile"`
	SignedBy        string `json:"signed_by"`
	CorpusHash      string `json:"corpus_hash"`
	SignatureBase64 string `json:"signature_base64"`
	KeySeedHex      string `json:"key_seed_hex"`
}

func loadVectors(t testing.TB) []signedVector {
	t.Helper()
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var vs []signedVector
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

// TestWriteVectors makes testdata/signed_corpus.json: the contract's corpus
// hash signed once per profile with the fixed test keys. The process-wide
// crypto randomness is fixed for the run so the pq_hybrid RSA-PSS salt, and
// so the file, comes out the same each time.
func TestWriteVectors(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite " + vectorsPath)
	}
	cryptotest.SetGlobalRandom(t, 8785)
	var vs []signedVector
	for _, p := range profiles {
		k := testKey(t, p)
		obj, err := Sign(p, k, contractCorpusHash)
		if err != nil {
			t.Fatal(err)
		}
		vs = append(vs, signedVector{Profile: p, SignedBy: k.NodeID(), CorpusHash: contractCorpusHash,
			SignatureBase64: base64.StdEncoding.EncodeToString(obj), KeySeedHex: hex.EncodeToString(k.Seed())})
	}
	out, err := json.MarshalIndent(vs, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vectorsPath, append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Each vector verifies as signed by its signed_by under its own profile, is
// refused for any other pinned provider and under the other profile, and
// was made by the key its seed names.
func TestSignedCorpusVectors(t *testing.T) {
	vs := loadVectors(t)
	if len(vs) != len(profiles) {
		t.Fatalf("%d vectors, want one per profile", len(vs))
	}
	for i, v := range vs {
		t.Run(v.Profile, func(t *testing.T) {
			if v.Profile != profiles[i] || v.CorpusHash != contractCorpusHash {
				t.Fatalf("vector %d: %s over %s", i, v.Profile, v.CorpusHash)
			}
			sig, err := base64.StdEncoding.DecodeString(v.SignatureBase64)
			if err != nil {
				t.Fatal(err)
			}
			k, err := NewKeyFromSeed(v.Profile, mustHex(t, v.KeySeedHex))
			if err != nil {
				t.Fatal(err)
			}
			if k.NodeID() != v.SignedBy {
				t.Fatalf("the seed's node id is %s, the vector says %s", k.NodeID(), v.SignedBy)
			}
			d := contractDescription()
			d.Signature, d.SignedBy = sig, v.SignedBy
			got, err := VerifyCorpus(d, v.SignedBy, v.Profile)
			if err != nil || got != SignedBy(v.SignedBy) {
				t.Fatalf("own provider: %v, %v", got, err)
			}
			var r *Refusal
			for _, other := range []string{strings.Repeat("42", 32), NodeID(otherProfile(v.Profile), k.PublicKey())} {
				if _, err := VerifyCorpus(d, other, v.Profile); !errors.As(err, &r) || r.Reason() != ReasonSignerNotProvider {
					t.Fatalf("provider %s: %v, want signer_not_provider", other, err)
				}
			}
			if _, err := VerifyCorpus(d, v.SignedBy, otherProfile(v.Profile)); !errors.As(err, &r) || r.Reason() != ReasonSignature {
				t.Fatalf("under %s: %v, want signature", otherProfile(v.Profile), err)
			}
			// ML-DSA-87 signs deterministically: the pq_pure vector is
			// exactly what Sign makes from its seed.
			if v.Profile == ProfilePQPure {
				again, err := Sign(v.Profile, k, contractCorpusHash)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again, sig) {
					t.Fatal("the pq_pure vector is not reproducible from its seed")
				}
			}
		})
	}
}
