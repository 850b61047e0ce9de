package conformance

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/steward"
	"meshd/wire"
)

// hexLines reads a file of one lower-case hex item per line.
func hexLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		x, err := wire.ParseHex(line, len(line)/2)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, x)
	}
	return out
}

// TestReceiptVectors runs every vector under v1/receipts from its files
// alone, exactly as conformance/v1/README.md tells a second implementation
// to.
func TestReceiptVectors(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join("v1", "receipts"))
	if err != nil {
		t.Fatal(err)
	}
	kinds, refusals := map[string]int{}, map[string]int{}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			dir := filepath.Join("v1", "receipts", d.Name())
			mb, err := os.ReadFile(filepath.Join(dir, "meta.json"))
			if err != nil {
				t.Fatal(err)
			}
			var meta ReceiptMeta
			if err := json.Unmarshal(mb, &meta); err != nil {
				t.Fatal(err)
			}
			if meta.Name != d.Name() {
				t.Fatalf("meta names %q", meta.Name)
			}
			trusted, err := wire.ParseHex(meta.TrustedKey, ed25519.PublicKeySize)
			if err != nil {
				t.Fatal(err)
			}
			seed, err := wire.ParseHex(meta.StewardSeedHex, ed25519.SeedSize)
			if err != nil || !bytes.Equal(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey), trusted) {
				t.Fatalf("trusted_key is not the public key of steward_seed_hex (%v)", err)
			}
			envs := hexLines(t, filepath.Join(dir, "envelope.hex"))
			if len(envs) != len(meta.Envelopes) {
				t.Fatalf("%d envelopes, meta describes %d", len(envs), len(meta.Envelopes))
			}
			for i, env := range envs {
				if got := wire.ContentOf(env).String(); got != meta.Envelopes[i].EnvelopeID {
					t.Errorf("envelope %d has id %s, meta says %s", i, got, meta.Envelopes[i].EnvelopeID)
				}
			}
			kinds[meta.Expect]++
			refusals[meta.Refusal]++
			at, err := VerifyVector(trusted, envs)
			switch meta.Expect {
			case "accept":
				if err != nil {
					t.Fatalf("positive vector refused at %d: %v", at, err)
				}
				cores := hexLines(t, filepath.Join(dir, "signed_core.hex"))
				for i, env := range envs {
					o, err := steward.OpenEnvelope(env, trusted)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(o.Core, cores[i]) {
						t.Errorf("envelope %d does not carry signed_core.hex line %d", i, i)
					}
					again, err := o.Receipt.EncodeCore()
					if err != nil || !bytes.Equal(again, o.Core) {
						t.Errorf("envelope %d: the decoded receipt does not re-encode to its core (%v)", i, err)
					}
				}
			case "refuse":
				if err == nil {
					t.Fatal("negative vector verified")
				}
				if got := steward.ReasonOf(err); string(got) != meta.Refusal || meta.Refusal == "" {
					t.Fatalf("refused as %q, want %q: %v", got, meta.Refusal, err)
				}
				if meta.RefusedAt == nil || at != *meta.RefusedAt {
					t.Fatalf("refused at envelope %d, meta says %v", at, meta.RefusedAt)
				}
			default:
				t.Fatalf("expect is %q", meta.Expect)
			}
		})
	}
	// The forged-evidence battery: every rule an HwShunt claim rests on.
	// The route battery: every rule x_route_candidates is judged by.
	if kinds["accept"] < 6 || kinds["refuse"] < 28 || refusals[string(steward.RefusedEvidence)] < 10 || refusals[string(steward.RefusedRoute)] < 8 {
		t.Fatalf("vector set shrank: %v, refusals %v", kinds, refusals)
	}
}

// TestNegativeVectorsSignaturesVerify makes sure each negative vector is
// refused for its own fault and not for a signature broken by accident:
// wherever the envelope's signature bytes verify over the Sig_structure
// rebuilt from the bytes present, the refusal must not be bad-signature.
func TestNegativeVectorsSignaturesVerify(t *testing.T) {
	vs, err := receiptVectors()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.meta.Expect != "refuse" {
			continue
		}
		trusted, _ := wire.ParseHex(v.meta.TrustedKey, ed25519.PublicKeySize)
		for i, env := range v.envs {
			if !sigVerifiesLoosely(t, trusted, env) {
				t.Errorf("%s: envelope %d carries no valid signature", v.meta.Name, i)
			}
		}
	}
}

// sigVerifiesLoosely reads an envelope with the independent reader of
// conformance_test.go, tolerating trailing bytes and non-shortest lengths,
// and checks the signature over the canonical Sig_structure.
func sigVerifiesLoosely(t *testing.T, pub ed25519.PublicKey, env []byte) bool {
	t.Helper()
	r := &looseReader{b: env}
	it, ok := r.item()
	if !ok || it.major != 6 || len(it.items) != 1 || len(it.items[0].items) != 4 {
		return false
	}
	a := it.items[0].items
	tbs := []byte("\x84\x6aSignature1")
	tbs = append(tbs, cborBytes(a[0].bytes)...)
	tbs = append(tbs, 0x40)
	tbs = append(tbs, cborBytes(a[2].bytes)...)
	return ed25519.Verify(pub, tbs, a[3].bytes)
}

// looseReader is a well-formedness-only CBOR reader (no shortest-form
// rule), for inspecting deliberately non-canonical vectors.
type looseReader struct {
	b   []byte
	off int
}

type looseItem struct {
	major byte
	bytes []byte
	items []looseItem
}

func (r *looseReader) item() (looseItem, bool) {
	if r.off >= len(r.b) {
		return looseItem{}, false
	}
	ib := r.b[r.off]
	r.off++
	it := looseItem{major: ib >> 5}
	var n uint64
	switch ai := ib & 31; {
	case ai < 24:
		n = uint64(ai)
	case ai <= 27:
		w := 1 << (ai - 24)
		if r.off+w > len(r.b) {
			return it, false
		}
		for _, c := range r.b[r.off : r.off+w] {
			n = n<<8 | uint64(c)
		}
		r.off += w
	default:
		return it, false
	}
	switch it.major {
	case 2, 3:
		if n > uint64(len(r.b)-r.off) {
			return it, false
		}
		it.bytes = r.b[r.off : r.off+int(n)]
		r.off += int(n)
	case 4, 5:
		if it.major == 5 {
			n *= 2
		}
		for i := uint64(0); i < n; i++ {
			c, ok := r.item()
			if !ok {
				return it, false
			}
			it.items = append(it.items, c)
		}
	case 6:
		c, ok := r.item()
		if !ok {
			return it, false
		}
		it.items = []looseItem{c}
	}
	return it, true
}
