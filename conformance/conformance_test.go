package conformance

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"meshd/steward"
	"meshd/wire"
)

func readVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("v1", "reference", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexVector(t *testing.T, name string) []byte {
	t.Helper()
	s := string(bytes.TrimSpace(readVector(t, name)))
	b, err := wire.ParseHex(s, len(s)/2)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

func TestVectorsRegenerateByteForByte(t *testing.T) {
	v, err := Generate(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := v.Files()
	for name, got := range files {
		want, err := os.ReadFile(filepath.Join("v1", filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the published vector; regenerate with `go run ./conformance/cmd/gen-vectors conformance/v1` only if the change is intended", name)
		}
	}
	// A file on disk that the generator no longer makes is a stale vector
	// a second implementation would still run.
	err = filepath.WalkDir(filepath.Join("v1", "receipts"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel("v1", p)
		if _, ok := files[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s is published but not generated", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Receipts) == 0 {
		t.Fatal("no receipt vectors generated")
	}
}

// A deliberately small CBOR reader, independent of the encoder under test,
// that checks the det-CBOR rules the profile promises.
type cborReader struct {
	b   []byte
	off int
}

type item struct {
	major byte
	arg   uint64
	raw   []byte // the complete encoded item
	bytes []byte // content of a byte or text string
	items []item // array elements, or map keys and values alternating
}

func (r *cborReader) next() (item, error) {
	start := r.off
	if r.off >= len(r.b) {
		return item{}, errors.New("unexpected end")
	}
	ib := r.b[r.off]
	r.off++
	it := item{major: ib >> 5}
	ai := ib & 0x1f
	switch {
	case ai < 24:
		it.arg = uint64(ai)
	case ai <= 27:
		n := 1 << (ai - 24)
		if r.off+n > len(r.b) {
			return item{}, errors.New("unexpected end in argument")
		}
		var buf [8]byte
		copy(buf[8-n:], r.b[r.off:r.off+n])
		it.arg = binary.BigEndian.Uint64(buf[:])
		r.off += n
		// Shortest form: the argument must not fit a smaller encoding.
		min := map[int]uint64{1: 24, 2: 1 << 8, 4: 1 << 16, 8: 1 << 32}[n]
		if it.arg < min {
			return item{}, fmt.Errorf("non-shortest argument at %d", start)
		}
	default:
		return item{}, fmt.Errorf("indefinite length or reserved value at %d", start)
	}
	switch it.major {
	case 0, 1:
	case 2, 3:
		if uint64(len(r.b)-r.off) < it.arg {
			return item{}, errors.New("string past end")
		}
		it.bytes = r.b[r.off : r.off+int(it.arg)]
		r.off += int(it.arg)
	case 4, 5:
		n := it.arg
		if it.major == 5 {
			n *= 2
		}
		for i := uint64(0); i < n; i++ {
			c, err := r.next()
			if err != nil {
				return item{}, err
			}
			it.items = append(it.items, c)
		}
	case 6:
		c, err := r.next()
		if err != nil {
			return item{}, err
		}
		it.items = []item{c}
	case 7:
		return item{}, fmt.Errorf("float, boolean, null or simple value at offset %d", start)
	}
	it.raw = r.b[start:r.off]
	return it, nil
}

func parseOne(t *testing.T, b []byte) item {
	t.Helper()
	r := &cborReader{b: b}
	it, err := r.next()
	if err != nil {
		t.Fatal(err)
	}
	if r.off != len(b) {
		t.Fatalf("%d trailing bytes", len(b)-r.off)
	}
	return it
}

func TestSignedCoreIsCanonicalAndPlain(t *testing.T) {
	core := parseOne(t, hexVector(t, "signed_core.hex"))
	if core.major != 5 {
		t.Fatalf("signed core is major type %d, want a map", core.major)
	}
	keys := map[string]item{}
	var prevKey []byte
	for i := 0; i < len(core.items); i += 2 {
		k, v := core.items[i], core.items[i+1]
		if k.major != 3 {
			t.Fatalf("map key of major type %d, want text", k.major)
		}
		if prevKey != nil && bytes.Compare(prevKey, k.raw) >= 0 {
			t.Fatalf("keys not in RFC 8949 §4.2.1 order: %q after %q", k.bytes, prevKey)
		}
		prevKey = k.raw
		if v.major != 0 && v.major != 3 {
			t.Fatalf("value of %q has major type %d: only unsigned integers and text are allowed", k.bytes, v.major)
		}
		keys[string(k.bytes)] = v
	}
	for _, k := range []string{"mesh_receipt", "request_id", "backend", "recipe", "route", "tokens_in", "tokens_out",
		"tokens_accepted", "cache_hit_tokens", "spec_proposed", "spec_accepted", "fidelity_floor", "fidelity_met",
		"estimated_uj", "uj_per_accepted_token", "energy_provenance", "sequence", "nonce", "steward",
		"x_meter", "x_meter_kind", "x_window_ns", "x_serve_ns", "x_sealed_unix_ms", "x_ceiling_uj", "x_route_candidates"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("signed core lacks %q", k)
		}
	}
	// Estimator names no meter and carries no samples (PROFILE.md §6).
	for _, k := range []string{"measured_uj", "prev", "grant_id", "x_error_uj", "x_samples", "x_max_gap_ns",
		"x_covered_ppm", "x_period_ns", "x_accuracy_ppm", "x_shared", "x_idle_uw"} {
		if _, ok := keys[k]; ok {
			t.Errorf("an ungranted Estimator genesis receipt must not carry %q", k)
		}
	}
	if m, kind := string(keys["x_meter"].bytes), string(keys["x_meter_kind"].bytes); m != "estimator" || kind != "estimator" {
		t.Errorf("Estimator receipt names meter %q of kind %q, want estimator for both", m, kind)
	}
	var meta Meta
	if err := json.Unmarshal(readVector(t, "meta.json"), &meta); err != nil {
		t.Fatal(err)
	}
	if got := string(keys["request_id"].bytes); got != meta.RequestID {
		t.Errorf("request_id %s, meta says %s", got, meta.RequestID)
	}
	// The route is auditable from the core: the ceiling is the request's,
	// and the candidates are the router's, in the order weighed.
	if got := keys["x_ceiling_uj"].arg; got != meta.Request.JouleCeilingUJ {
		t.Errorf("x_ceiling_uj %d, meta's request says %d", got, meta.Request.JouleCeilingUJ)
	}
	cs, err := steward.ParseCandidates(string(keys["x_route_candidates"].bytes))
	if err != nil || len(cs) != len(meta.Candidates) {
		t.Fatalf("x_route_candidates %q against %d meta candidates: %v", keys["x_route_candidates"].bytes, len(meta.Candidates), err)
	}
	for i, c := range cs {
		m := meta.Candidates[i]
		if c.Backend != m.Backend || uint8(c.Fidelity) != m.Fidelity || c.EstTotalUJ != m.EstTotalUJ || string(c.Verdict) != m.Verdict ||
			(c.Verdict == steward.VerdictAdmissible) != m.Admissible {
			t.Errorf("candidate %d on the receipt %+v, in meta %+v", i, c, m)
		}
	}
	est, acc := keys["estimated_uj"].arg, keys["tokens_accepted"].arg
	if keys["uj_per_accepted_token"].arg != est/acc {
		t.Errorf("uj_per_accepted_token %d, want %d/%d", keys["uj_per_accepted_token"].arg, est, acc)
	}
}

func TestEnvelopeVerifiesWithPlainEd25519(t *testing.T) {
	env := parseOne(t, hexVector(t, "envelope.hex"))
	if env.major != 6 || env.arg != 18 {
		t.Fatalf("envelope is not a COSE_Sign1 tag 18 (major %d arg %d)", env.major, env.arg)
	}
	arr := env.items[0]
	if arr.major != 4 || len(arr.items) != 4 {
		t.Fatal("COSE_Sign1 must be a 4-element array")
	}
	protected, unprotected, payload, sig := arr.items[0], arr.items[1], arr.items[2], arr.items[3]
	if unprotected.major != 5 || len(unprotected.items) != 0 {
		t.Fatal("unprotected header must be an empty map")
	}
	hdr := parseOne(t, protected.bytes)
	var kid []byte
	alg := false
	for i := 0; i < len(hdr.items); i += 2 {
		k, v := hdr.items[i], hdr.items[i+1]
		switch {
		case k.major == 0 && k.arg == 1:
			alg = v.major == 1 && v.arg == 7 // -8 is encoded as major 1, argument 7
		case k.major == 0 && k.arg == 4:
			kid = v.bytes
		}
	}
	if !alg || len(kid) != ed25519.PublicKeySize {
		t.Fatalf("protected header must carry alg EdDSA (-8) and a 32-byte kid")
	}
	core := hexVector(t, "signed_core.hex")
	if !bytes.Equal(payload.bytes, core) {
		t.Fatal("envelope payload is not signed_core.hex")
	}
	var meta Meta
	json.Unmarshal(readVector(t, "meta.json"), &meta)
	seed, err := wire.ParseHex(meta.StewardSeedHex, ed25519.SeedSize)
	if err != nil {
		t.Fatal(err)
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if !bytes.Equal(pub, kid) || hex.EncodeToString(kid) != meta.StewardID {
		t.Fatal("kid is not the public key of the seed in meta.json")
	}
	// Sig_structure = ["Signature1", protected, h'', payload], built by hand.
	bstr := func(b []byte) []byte {
		switch n := len(b); {
		case n < 24:
			return append([]byte{0x40 | byte(n)}, b...)
		case n < 256:
			return append([]byte{0x58, byte(n)}, b...)
		default:
			return append([]byte{0x59, byte(n >> 8), byte(n)}, b...)
		}
	}
	tbs := []byte{0x84, 0x6a}
	tbs = append(tbs, "Signature1"...)
	tbs = append(tbs, bstr(protected.bytes)...)
	tbs = append(tbs, 0x40)
	tbs = append(tbs, bstr(payload.bytes)...)
	if !ed25519.Verify(pub, tbs, sig.bytes) {
		t.Fatal("signature does not verify with plain crypto/ed25519")
	}
	// And the envelope is reproducible from the core with the seed.
	again := ed25519.Sign(ed25519.NewKeyFromSeed(seed), tbs)
	if !bytes.Equal(again, sig.bytes) {
		t.Fatal("signature is not the deterministic Ed25519 signature of the Sig_structure")
	}
}
