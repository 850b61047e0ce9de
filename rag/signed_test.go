package rag

import (
	"bytes"
	"crypto/sha512"
	"errors"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// macula's node_id vectors for D5: the key is the bytes i mod 256.
func TestNodeIDMaculaVectors(t *testing.T) {
	key := func(n int) []byte {
		k := make([]byte, n)
		for i := range k {
			k[i] = byte(i)
		}
		return k
	}
	cases := []struct {
		profile string
		n       int
		want    string
	}{
		{ProfilePQPure, 2592, "8c6a28c62bda0112065bccb0d8b02b18f46fef03d16e8b7ae91086025dd209ff"},
		{ProfilePQHybrid, 3118, "e9df1133a8238239c58fc7f886d9667e961449ee272c30e968a0eecbb6b0131c"},
		{ProfilePQHybrid, 2592, "4e79818f04bffbd7f2df71b82e3e543458d9f74cda64f88a80b352ed8e9af10b"},
	}
	for _, c := range cases {
		if got := NodeID(c.profile, key(c.n)); got != c.want {
			t.Errorf("NodeID(%s, %d bytes) = %s, want %s", c.profile, c.n, got, c.want)
		}
	}
	if NodeID("pq_other", key(8)) != "" {
		t.Error("an unknown profile has a node id")
	}
}

func TestLabel(t *testing.T) {
	if got := string(mustHex(t, "6d6163756c612d72616720636f72707573207631")); got != Label {
		t.Fatalf("label %q, vector %q", Label, got)
	}
}

// The IETF LAMPS draft's own id-MLDSA87-RSA4096-PSS-SHA512 vector verifies
// with this package's composite: a third party's bytes, and the same vector
// macula pins. Its private key, in the LAMPS layout, loads as a pq_hybrid
// key whose carried form is the draft's public key.
func TestCompositeLAMPSVector(t *testing.T) {
	v := loadLAMPS(t)
	hybrid, _ := profileOf(ProfilePQHybrid)
	if !carriedKeyWellFormed(v.PK, hybrid) {
		t.Fatal("the LAMPS public key is not in the carried form")
	}
	if !verify(v.M, v.S, v.PK, hybrid) {
		t.Fatal("the LAMPS signature does not verify")
	}
	bad := bytes.Clone(v.S)
	bad[len(bad)-1] ^= 1
	if verify(v.M, bad, v.PK, hybrid) {
		t.Fatal("a tampered RSA half verifies")
	}
	bad = bytes.Clone(v.S)
	bad[10] ^= 1
	if verify(v.M, bad, v.PK, hybrid) {
		t.Fatal("a tampered ML-DSA half verifies")
	}
	k, err := NewKeyFromSeed(ProfilePQHybrid, v.SK)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(k.PublicKey(), v.PK) {
		t.Fatal("the LAMPS private key does not derive the LAMPS public key")
	}
	sig, err := k.sign(v.M)
	if err != nil {
		t.Fatal(err)
	}
	if !verify(v.M, sig, v.PK, hybrid) {
		t.Fatal("our composite signature does not verify")
	}
	// The pq_pure reading of the same bytes fails: the halves are bound.
	pure, _ := profileOf(ProfilePQPure)
	if verify(v.M, v.S[:mldsaSignatureSize], v.PK[:mldsaPublicKeySize], pure) {
		t.Fatal("the composite's ML-DSA half verifies as a plain ML-DSA-87 signature")
	}
}

func TestSignOpenRoundTrip(t *testing.T) {
	for _, p := range profiles {
		t.Run(p, func(t *testing.T) {
			k := testKey(t, p)
			obj, err := Sign(p, k, contractCorpusHash)
			if err != nil {
				t.Fatal(err)
			}
			hash, key, err := Open(p, obj)
			if err != nil {
				t.Fatal(err)
			}
			if hash != contractCorpusHash || !bytes.Equal(key, k.PublicKey()) {
				t.Fatalf("Open = %s, key %d bytes", hash, len(key))
			}
			if NodeID(p, key) != k.NodeID() {
				t.Fatal("node ids differ")
			}
			// The wire form, byte for byte: a map of key, tbs, signature in
			// that (core deterministic) order, and the tbs macula would sign.
			wantTBS := append([]byte{0xa2, 0x63}, "alg"...)
			wantTBS = append(wantTBS, byte(0x60+len(Alg(p))))
			wantTBS = append(wantTBS, Alg(p)...)
			wantTBS = append(wantTBS, 0x6b)
			wantTBS = append(wantTBS, "corpus_hash"...)
			wantTBS = append(append(wantTBS, 0x78, 0x40), contractCorpusHash...)
			_, tbs, _, err := decodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tbs, wantTBS) {
				t.Fatalf("tbs %x\nwant %x", tbs, wantTBS)
			}
			if !bytes.HasPrefix(obj, []byte("\xa3\x63key\x59")) {
				t.Fatalf("object starts %x", obj[:8])
			}
			if i := bytes.Index(obj, []byte("\x63tbs")); i < 0 || i > bytes.Index(obj, []byte("\x69signature")) {
				t.Fatal("tbs is not between key and signature")
			}
		})
	}
}

func TestSignPureIsDeterministic(t *testing.T) {
	k := testKey(t, ProfilePQPure)
	a, err := Sign(ProfilePQPure, k, contractCorpusHash)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Sign(ProfilePQPure, k, contractCorpusHash)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two pq_pure signatures of one hash differ")
	}
}

func TestSignRefusesBadInput(t *testing.T) {
	k := testKey(t, ProfilePQPure)
	for _, c := range []struct {
		name, profile, hash string
		key                 *PrivateKey
	}{
		{"unknown profile", "pq_other", contractCorpusHash, k},
		{"key of the other profile", ProfilePQHybrid, contractCorpusHash, k},
		{"nil key", ProfilePQPure, contractCorpusHash, nil},
		{"uppercase hash", ProfilePQPure, strings.ToUpper(contractCorpusHash), k},
		{"short hash", ProfilePQPure, "abc", k},
	} {
		if _, err := Sign(c.profile, c.key, c.hash); err == nil {
			t.Errorf("%s: signed", c.name)
		}
	}
}

func TestNewKeyFromSeedRefusals(t *testing.T) {
	v := loadLAMPS(t)
	for _, c := range []struct {
		name, profile string
		seed          []byte
	}{
		{"unknown profile", "pq", pureTestSeed()},
		{"short pure seed", ProfilePQPure, pureTestSeed()[:31]},
		{"long pure seed", ProfilePQPure, append(pureTestSeed(), 0)},
		{"hybrid seed without RSA", ProfilePQHybrid, pureTestSeed()},
		{"hybrid seed with garbage RSA", ProfilePQHybrid, append(pureTestSeed(), 1, 2, 3)},
		{"hybrid seed with trailing byte", ProfilePQHybrid, append(bytes.Clone(v.SK), 0)},
	} {
		if _, err := NewKeyFromSeed(c.profile, c.seed); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// reencode builds an object from parts, so tests can change one.
func reencode(t *testing.T, key, tbs, sig []byte) []byte {
	t.Helper()
	obj, err := encodeObject(key, tbs, sig)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestOpenRefusals(t *testing.T) {
	for _, p := range profiles {
		t.Run(p, func(t *testing.T) {
			k := testKey(t, p)
			obj, err := Sign(p, k, contractCorpusHash)
			if err != nil {
				t.Fatal(err)
			}
			key, tbs, sig, err := decodeObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			flip := func(b []byte, i int) []byte {
				c := bytes.Clone(b)
				c[i] ^= 0x01
				return c
			}
			signTBS := func(fields map[string]any) []byte {
				raw, err := coreEncMode.Marshal(fields)
				if err != nil {
					t.Fatal(err)
				}
				o, err := signObject(k, raw)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			signRaw := func(raw []byte) []byte {
				o, err := signObject(k, raw)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			marshal := func(v any) []byte {
				b, err := cbor.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			cases := []struct {
				name   string
				object []byte
				want   error
			}{
				{"one byte of tbs changed", reencode(t, key, flip(tbs, len(tbs)-1), sig), ErrSignatureInvalid},
				{"one byte of the signature changed", reencode(t, key, tbs, flip(sig, 100)), ErrSignatureInvalid},
				{"last byte of the signature changed", reencode(t, key, tbs, flip(sig, len(sig)-1)), ErrSignatureInvalid},
				{"one byte of the ML-DSA key changed", reencode(t, flip(key, 5), tbs, sig), ErrSignatureInvalid},
				{"signature one byte short", reencode(t, key, tbs, sig[:len(sig)-1]), ErrSignatureInvalid},
				{"signature empty", reencode(t, key, tbs, []byte{}), ErrSignatureInvalid},
				{"key one byte short", reencode(t, key[:len(key)-1], tbs, sig), ErrObjectMalformed},
				{"key one byte long", reencode(t, append(bytes.Clone(key), 0), tbs, sig), ErrObjectMalformed},
				{"another profile's alg", signTBS(map[string]any{"alg": Alg(otherProfile(p)), "corpus_hash": contractCorpusHash}), ErrAlgMismatch},
				{"an unknown alg", signTBS(map[string]any{"alg": "Ed25519", "corpus_hash": contractCorpusHash}), ErrAlgMismatch},
				{"alg not text", signTBS(map[string]any{"alg": []byte("ML-DSA-87"), "corpus_hash": contractCorpusHash}), ErrObjectMalformed},
				{"no alg", signTBS(map[string]any{"corpus_hash": contractCorpusHash}), ErrObjectMalformed},
				{"tbs not a map", signRaw(marshal([]any{"alg", Alg(p)})), ErrObjectMalformed},
				{"tbs not CBOR", signRaw([]byte{0xff}), ErrObjectMalformed},
				{"tbs with a duplicate key", signRaw(append(append([]byte{0xa2}, tbs[1:1+4+1+len(Alg(p))]...), tbs[1:1+4+1+len(Alg(p))]...)), ErrObjectMalformed},
				{"tbs with trailing byte", signRaw(append(bytes.Clone(tbs), 0)), ErrObjectMalformed},
				{"malformed CBOR", []byte{0xa3, 0x63}, ErrObjectMalformed},
				{"not CBOR at all", []byte("not cbor"), ErrObjectMalformed},
				{"empty", nil, ErrObjectMalformed},
				{"trailing byte", append(bytes.Clone(obj), 0), ErrObjectMalformed},
				{"missing key (held form)", marshal(map[string][]byte{"tbs": tbs, "signature": sig}), ErrObjectMalformed},
				{"missing signature", marshal(map[string][]byte{"key": key, "tbs": tbs}), ErrObjectMalformed},
				{"extra key", marshal(map[string][]byte{"key": key, "tbs": tbs, "signature": sig, "x": {}}), ErrObjectMalformed},
				{"a field as text", marshal(map[string]any{"key": key, "tbs": string(tbs), "signature": sig}), ErrObjectMalformed},
				{"a misnamed field", marshal(map[string][]byte{"key": key, "tbs": tbs, "sig": sig}), ErrObjectMalformed},
				{"an array", marshal([]any{key, tbs, sig}), ErrObjectMalformed},
				{"tagged", marshal(cbor.Tag{Number: 24, Content: obj}), ErrObjectMalformed},
			}
			if p == ProfilePQHybrid {
				cases = append(cases,
					struct {
						name   string
						object []byte
						want   error
					}{"one byte of the RSA modulus changed", reencode(t, flip(key, len(key)-10), tbs, sig), ErrSignatureInvalid},
					struct {
						name   string
						object []byte
						want   error
					}{"the RSA key's DER header changed", reencode(t, flip(key, mldsaPublicKeySize), tbs, sig), ErrObjectMalformed},
					struct {
						name   string
						object []byte
						want   error
					}{"the ML-DSA key alone", reencode(t, key[:mldsaPublicKeySize], tbs, sig), ErrObjectMalformed},
					struct {
						name   string
						object []byte
						want   error
					}{"the RSA half with a leading zero dropped", reencode(t, key, tbs, sig[:len(sig)-1]), ErrSignatureInvalid},
				)
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					hash, gotKey, err := Open(p, c.object)
					if !errors.Is(err, c.want) {
						t.Fatalf("Open = %q, %d-byte key, %v; want %v", hash, len(gotKey), err, c.want)
					}
					if ObjectRefusalReason(err) == "" {
						t.Fatalf("%v has no refusal reason", err)
					}
				})
			}
		})
	}
}

// The profile is the caller's: an object made under one profile is refused
// under the other, never read as the other.
func TestOpenUnderTheOtherProfile(t *testing.T) {
	for _, p := range profiles {
		obj, err := Sign(p, testKey(t, p), contractCorpusHash)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(otherProfile(p), obj); ObjectRefusalReason(err) == "" {
			t.Errorf("%s object under %s: %v", p, otherProfile(p), err)
		}
	}
	if _, _, err := Open("pq_other", nil); !errors.Is(err, ErrUnknownProfile) {
		t.Errorf("unknown profile: %v", err)
	}
}

// A pq_pure key whose alg field names pq_hybrid but which is then carried as
// a hybrid object cannot pass: the key is not in the hybrid carried form.
func TestAlgNeverSelectsTheAlgorithm(t *testing.T) {
	k := testKey(t, ProfilePQPure)
	raw, err := coreEncMode.Marshal(map[string]string{"alg": Alg(ProfilePQHybrid), "corpus_hash": contractCorpusHash})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signObject(k, raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(ProfilePQHybrid, obj); !errors.Is(err, ErrObjectMalformed) {
		t.Fatalf("under pq_hybrid: %v", err)
	}
	if _, _, err := Open(ProfilePQPure, obj); !errors.Is(err, ErrAlgMismatch) {
		t.Fatalf("under pq_pure: %v", err)
	}
}

// Extra tbs fields are allowed (macula reads only alg and corpus_hash); a
// tbs without a text corpus_hash opens with an empty hash.
func TestOpenTBSFields(t *testing.T) {
	k := testKey(t, ProfilePQPure)
	for _, c := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"extra field", map[string]any{"alg": "ML-DSA-87", "corpus_hash": contractCorpusHash, "note": "x"}, contractCorpusHash},
		{"no corpus_hash", map[string]any{"alg": "ML-DSA-87"}, ""},
		{"corpus_hash as bytes", map[string]any{"alg": "ML-DSA-87", "corpus_hash": []byte(contractCorpusHash)}, ""},
	} {
		raw, err := coreEncMode.Marshal(c.fields)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := signObject(k, raw)
		if err != nil {
			t.Fatal(err)
		}
		hash, _, err := Open(ProfilePQPure, obj)
		if err != nil || hash != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, hash, err, c.want)
		}
	}
}

// The signature covers the label: the same tbs signed under another label is
// refused.
func TestSignatureCoversTheLabel(t *testing.T) {
	k := testKey(t, ProfilePQPure)
	raw, err := coreEncMode.Marshal(map[string]string{"alg": "ML-DSA-87", "corpus_hash": contractCorpusHash})
	if err != nil {
		t.Fatal(err)
	}
	sig, err := k.sign(signedBytes("macula-rag corpus v2", k.carried, raw))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(ProfilePQPure, reencode(t, k.carried, raw, sig)); !errors.Is(err, ErrSignatureInvalid) {
		t.Fatalf("another label: %v", err)
	}
	// And signedBytes is label ‖ 0x00 ‖ SHA-384(key) ‖ tbs.
	h := sha512.Sum384(k.carried)
	want := append(append(append([]byte(Label), 0), h[:]...), raw...)
	if !bytes.Equal(signedBytes(Label, k.carried, raw), want) {
		t.Fatal("signed bytes layout")
	}
}
