package steward

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"sort"
	"strings"
	"testing"
)

// A minimal CBOR encoder written for this test only, so that the receipt
// below owes nothing to meshd's encoder: what another implementation would
// write from the text of mesh/1 and PROFILE.md §15.
func fHead(major byte, n uint64) []byte {
	switch {
	case n < 24:
		return []byte{major<<5 | byte(n)}
	case n < 256:
		return []byte{major<<5 | 24, byte(n)}
	case n < 65536:
		return []byte{major<<5 | 25, byte(n >> 8), byte(n)}
	case n < 1<<32:
		return []byte{major<<5 | 26, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return []byte{major<<5 | 27, byte(n >> 56), byte(n >> 48), byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func fText(s string) []byte { return append(fHead(3, uint64(len(s))), s...) }
func fUint(n uint64) []byte { return fHead(0, n) }

func fMap(m map[string][]byte) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return bytes.Compare(fText(keys[i]), fText(keys[j])) < 0
	})
	out := fHead(5, uint64(len(m)))
	for _, k := range keys {
		out = append(append(out, fText(k)...), m[k]...)
	}
	return out
}

// fSign1 seals payload with plain crypto/ed25519 over a hand-built
// Sig_structure ["Signature1", protected, h”, payload].
func fSign1(priv ed25519.PrivateKey, payload []byte) []byte {
	prot := append([]byte{0xa2, 0x01, 0x27, 0x04, 0x58, 0x20}, priv.Public().(ed25519.PublicKey)...)
	protB := append(fHead(2, uint64(len(prot))), prot...)
	payB := append(fHead(2, uint64(len(payload))), payload...)
	tbs := append(append(append([]byte{0x84}, fText("Signature1")...), protB...), 0x40)
	tbs = append(tbs, payB...)
	env := append(append([]byte{0xd2, 0x84}, protB...), 0xa0)
	env = append(append(env, payB...), fHead(2, 64)...)
	return append(env, ed25519.Sign(priv, tbs)...)
}

// foreignFields is a receipt carrying only the §6.1 fields.
func foreignFields(pub ed25519.PublicKey) map[string][]byte {
	return map[string][]byte{
		"mesh_receipt":          fText("mesh/1"),
		"request_id":            fText(hex.EncodeToString(bytes.Repeat([]byte{0x11}, 32))),
		"backend":               fText("their-backend"),
		"recipe":                fText("their/recipe"),
		"route":                 fText("their-backend: only choice"),
		"tokens_in":             fUint(4),
		"tokens_out":            fUint(8),
		"tokens_accepted":       fUint(8),
		"cache_hit_tokens":      fUint(0),
		"spec_proposed":         fUint(0),
		"spec_accepted":         fUint(0),
		"fidelity_floor":        fUint(0),
		"fidelity_met":          fUint(1),
		"estimated_uj":          fUint(800),
		"uj_per_accepted_token": fUint(100),
		"energy_provenance":     fText("Estimator"),
		"sequence":              fUint(0),
		"nonce":                 fText(hex.EncodeToString(bytes.Repeat([]byte{0x22}, 16))),
		"steward":               fText(hex.EncodeToString(pub)),
	}
}

func TestForeignReceiptVerifies(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, 32))
	pub := priv.Public().(ed25519.PublicKey)
	base := foreignFields(pub)
	with := func(extra map[string][]byte) []byte {
		m := map[string][]byte{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return fMap(m)
	}
	nested := append(fHead(5, 2), append(append(fText("a"), fHead(4, 2)...), append(fUint(1), fHead(1, 0)...)...)...)
	nested = append(append(nested, fText("bb")...), append(fHead(2, 2), 0xca, 0xfe)...)
	grantID := fText(hex.EncodeToString(bytes.Repeat([]byte{0x33}, 32)))
	accept := []struct {
		name  string
		extra map[string][]byte
		nx    int // how many foreign extensions the receipt keeps
	}{
		{"only §6.1 fields", nil, 0},
		{"unknown x_ text", map[string][]byte{"x_vendor": fText("theirs")}, 1},
		{"unknown x_ nested map, array, negative int, bytes", map[string][]byte{"x_vendor": nested, "x_z": fUint(1)}, 2},
		{"grant_id without meshd's ledger fields", map[string][]byte{"grant_id": grantID}, 0},
		{"no tokens accepted, no wedge", map[string][]byte{"tokens_accepted": fUint(0), "uj_per_accepted_token": nil}, 0},
	}
	for _, c := range accept {
		t.Run(c.name, func(t *testing.T) {
			core := with(c.extra)
			env := fSign1(priv, core)
			o, err := OpenEnvelope(env, pub)
			if err != nil {
				t.Fatalf("a conforming foreign receipt is refused: %v", err)
			}
			if len(o.Receipt.Foreign) != c.nx || o.Receipt.Meter != nil || o.Receipt.SealedUnixMs != nil {
				t.Fatalf("foreign extensions %v, meter %v", o.Receipt.Foreign, o.Receipt.Meter)
			}
			again, err := o.Receipt.EncodeCore()
			if err != nil || !bytes.Equal(again, core) {
				t.Fatalf("the foreign receipt does not re-encode to its core (%v)", err)
			}
			// meshd would not seal it (its own extensions are missing), but
			// it is a valid mesh/1 receipt.
			if o.Receipt.Check() == nil {
				t.Fatal("Check accepts a receipt without meshd's extensions")
			}
		})
	}
	refuse := []struct {
		name  string
		extra map[string][]byte
		want  Reason
	}{
		{"unknown key without x_", map[string][]byte{"vendor": fText("theirs")}, RefusedUnknownField},
		{"x_ value is a float", map[string][]byte{"x_vendor": {0xfb, 0, 0, 0, 0, 0, 0, 0, 0}}, RefusedCoreEncoding},
		{"x_ value is null", map[string][]byte{"x_vendor": {0xf6}}, RefusedCoreEncoding},
		{"x_ value is tagged", map[string][]byte{"x_vendor": {0xc0, 0x61, 'x'}}, RefusedCoreEncoding},
		{"x_ value is indefinite", map[string][]byte{"x_vendor": {0x9f, 0xff}}, RefusedCoreEncoding},
		{"x_ value not shortest", map[string][]byte{"x_vendor": {0x18, 0x01}}, RefusedCoreEncoding},
		{"meshd's x_meter alone", map[string][]byte{"x_meter": fText("m")}, RefusedMissingField},
		{"meshd's x_grant_hold alone", map[string][]byte{"x_grant_hold": fUint(1)}, RefusedMissingField},
		{"meshd's x_window_ns as text", map[string][]byte{"x_window_ns": fText("1")}, RefusedFieldType},
		{"missing §6.1 field", map[string][]byte{"route": nil}, RefusedMissingField},
		{"measured_uj on Estimator", map[string][]byte{"measured_uj": fUint(800)}, RefusedCoupling},
		{"upper-case request_id", map[string][]byte{"request_id": fText(strings.Repeat("AB", 32))}, RefusedFieldValue},
	}
	for _, c := range refuse {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenEnvelope(fSign1(priv, with(c.extra)), pub)
			if got := ReasonOf(err); got != c.want {
				t.Fatalf("reason %q, want %q (err %v)", got, c.want, err)
			}
		})
	}
}
