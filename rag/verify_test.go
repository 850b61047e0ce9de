package rag

import (
	"errors"
	"strings"
	"testing"
)

func signedDescription(t *testing.T, profile string) Description {
	t.Helper()
	d := contractDescription()
	sig, err := Sign(profile, testKey(t, profile), d.CorpusHash)
	if err != nil {
		t.Fatal(err)
	}
	d.Signature = sig
	d.SignedBy = testKey(t, profile).NodeID()
	return d
}

func TestVerifyCorpus(t *testing.T) {
	for _, p := range profiles {
		t.Run(p, func(t *testing.T) {
			signer := testKey(t, p).NodeID()
			other := strings.Repeat("42", 32)
			changed := func(edit func(d *Description)) Description {
				d := signedDescription(t, p)
				d.Repos = append([]Repo(nil), d.Repos...)
				edit(&d)
				return d
			}
			otherHash, err := Sign(p, testKey(t, p), strings.Repeat("f", 64))
			if err != nil {
				t.Fatal(err)
			}
			pureObject, err := Sign(ProfilePQPure, testKey(t, ProfilePQPure), contractCorpusHash)
			if err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				name       string
				d          Description
				provider   string
				want       Result
				reason     string
				innerWant  string
				sentinelIs error
			}{
				{name: "signed by the provider", d: signedDescription(t, p), provider: signer, want: SignedBy(signer)},
				{name: "provider in uppercase", d: signedDescription(t, p), provider: strings.ToUpper(signer), want: SignedBy(signer)},
				{name: "signed_by absent changes nothing", d: changed(func(d *Description) { d.SignedBy = "" }), provider: signer, want: SignedBy(signer)},
				{name: "signed_by lying changes nothing", d: changed(func(d *Description) { d.SignedBy = other }), provider: signer, want: SignedBy(signer)},
				{name: "extra keys are not vouched for and change nothing", d: changed(func(d *Description) { d.Extra = map[string]any{"title": "x"} }), provider: signer, want: SignedBy(signer)},
				{name: "unsigned", d: contractDescription(), provider: signer, want: Unsigned},
				{name: "unsigned, any provider", d: contractDescription(), provider: other, want: Unsigned},
				{name: "empty corpus, unsigned", d: Description{Model: "m", Dim: 3, CorpusHash: CorpusHash("m", 3, nil)}, provider: other, want: Unsigned},
				// A copy of the signature served by another provider.
				{name: "copied signature", d: signedDescription(t, p), provider: other, reason: ReasonSignerNotProvider, sentinelIs: ErrSignerNotProvider},
				{name: "copied signature, signed_by names the caller's provider", d: changed(func(d *Description) { d.SignedBy = other }), provider: other, reason: ReasonSignerNotProvider},
				{name: "changed commit", d: changed(func(d *Description) { d.Repos[0].Commit = strings.Repeat("f", 40) }), provider: signer, reason: ReasonCorpusHashMismatch, sentinelIs: ErrCorpusHashMismatch},
				{name: "changed dim", d: changed(func(d *Description) { d.Dim = 768 }), provider: signer, reason: ReasonCorpusHashMismatch},
				{name: "claimed hash in uppercase", d: changed(func(d *Description) { d.CorpusHash = strings.ToUpper(d.CorpusHash) }), provider: signer, reason: ReasonCorpusHashMismatch},
				{name: "changed and rehashed", d: changed(func(d *Description) {
					d.Repos[0].Commit = strings.Repeat("f", 40)
					d.CorpusHash = d.Hash()
				}), provider: signer, reason: ReasonSignatureHashMismatch, sentinelIs: ErrSignatureHashMismatch},
				{name: "signature over another hash", d: changed(func(d *Description) { d.Signature = otherHash }), provider: signer, reason: ReasonSignatureHashMismatch},
				{name: "signature not CBOR", d: changed(func(d *Description) { d.Signature = []byte("not cbor") }), provider: signer, reason: ReasonSignature, innerWant: "malformed", sentinelIs: ErrObjectMalformed},
				{name: "signature present but empty", d: changed(func(d *Description) { d.Signature = []byte{} }), provider: signer, reason: ReasonSignature, innerWant: "malformed"},
				{name: "signature tampered", d: changed(func(d *Description) {
					d.Signature = append([]byte(nil), d.Signature...)
					d.Signature[len(d.Signature)-1] ^= 1
				}), provider: signer, reason: ReasonSignature, innerWant: "signature_invalid", sentinelIs: ErrSignatureInvalid},
				{name: "malformed: empty model", d: changed(func(d *Description) { d.Model = "" }), provider: signer, reason: ReasonMalformedDescription, sentinelIs: ErrMalformedDescription},
				{name: "malformed: zero dim", d: changed(func(d *Description) { d.Dim = 0 }), provider: signer, reason: ReasonMalformedDescription},
				{name: "malformed: bad commit", d: changed(func(d *Description) { d.Repos[1].Commit = "trunk" }), provider: signer, reason: ReasonMalformedDescription},
				{name: "malformed: empty url", d: changed(func(d *Description) { d.Repos[1].URL = "" }), provider: signer, reason: ReasonMalformedDescription},
				{name: "malformed: invalid UTF-8 model", d: changed(func(d *Description) { d.Model = "\xff" }), provider: signer, reason: ReasonMalformedDescription},
			}
			if p == ProfilePQHybrid {
				// A pq_pure object under a pq_hybrid caller: the key is not
				// in the hybrid carried form.
				cases = append(cases, struct {
					name       string
					d          Description
					provider   string
					want       Result
					reason     string
					innerWant  string
					sentinelIs error
				}{name: "pq_pure object under pq_hybrid", d: changed(func(d *Description) { d.Signature = pureObject }), provider: testKey(t, ProfilePQPure).NodeID(), reason: ReasonSignature, innerWant: "malformed"})
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					got, err := VerifyCorpus(c.d, c.provider, p)
					if c.reason == "" {
						if err != nil || got != c.want {
							t.Fatalf("got %v, %v; want %v", got, err, c.want)
						}
						return
					}
					var r *Refusal
					if !errors.As(err, &r) || r.Reason() != c.reason {
						t.Fatalf("got %v, %v; want refusal %s", got, err, c.reason)
					}
					if got != (Result{}) || got.Signed() {
						t.Fatalf("a refusal came with %v", got)
					}
					if c.innerWant != "" && r.SignatureReason() != c.innerWant {
						t.Fatalf("signature reason %q, want %q (%v)", r.SignatureReason(), c.innerWant, err)
					}
					if c.sentinelIs != nil && !errors.Is(err, c.sentinelIs) {
						t.Fatalf("%v is not %v", err, c.sentinelIs)
					}
				})
			}
		})
	}
}

// A signature made under one profile is refused under the other, with the
// signature reason, for the same provider id.
func TestVerifyCorpusOtherProfile(t *testing.T) {
	for _, p := range profiles {
		d := signedDescription(t, p)
		_, err := VerifyCorpus(d, testKey(t, p).NodeID(), otherProfile(p))
		var r *Refusal
		if !errors.As(err, &r) || r.Reason() != ReasonSignature {
			t.Errorf("%s signature under %s: %v", p, otherProfile(p), err)
		}
	}
}

func TestVerifyCorpusUnknownProfile(t *testing.T) {
	_, err := VerifyCorpus(contractDescription(), "", "pq_other")
	var r *Refusal
	if !errors.Is(err, ErrUnknownProfile) || errors.As(err, &r) {
		t.Fatalf("got %v", err)
	}
}

func TestResult(t *testing.T) {
	if Unsigned.Signed() || Unsigned.String() != "unsigned" || Unsigned.Signer() != "" {
		t.Fatal("Unsigned")
	}
	r := SignedBy("ab")
	if !r.Signed() || r.String() != "signed ab" || r.Signer() != "ab" || r == Unsigned {
		t.Fatal("SignedBy")
	}
}

// A parsed JSON description, signature and all, verifies end to end.
func TestVerifyParsedDescription(t *testing.T) {
	for _, p := range profiles {
		d := signedDescription(t, p)
		wire := map[string]any{
			"model": d.Model, "dim": int64(d.Dim), "corpus_hash": d.CorpusHash, "signed_by": d.SignedBy,
			"signature": d.Signature, // bytes in CBOR
			"repos": []any{
				map[string]any{"id": d.Repos[0].ID, "url": d.Repos[0].URL, "branch": d.Repos[0].Branch, "commit": d.Repos[0].Commit},
				map[string]any{"id": d.Repos[1].ID, "url": d.Repos[1].URL, "branch": d.Repos[1].Branch, "commit": d.Repos[1].Commit},
			},
		}
		data, err := coreEncMode.Marshal(wire)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := ParseDescription(data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := VerifyCorpus(parsed, d.SignedBy, p)
		if err != nil || got != SignedBy(d.SignedBy) {
			t.Fatalf("%s: %v, %v", p, got, err)
		}
	}
}
