package binding_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	"meshd/agent/api"
	"meshd/rag/binding"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/wire"
)

func key(t *testing.T, b byte) *steward.Key {
	t.Helper()
	k, err := steward.NewKeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func reply() binding.Reply {
	return binding.Reply{Corpus: "example/docs", Procedure: "answer_query", Request: []byte(`{"query_text":"shunt"}`),
		Body: []byte(`{"corpus_hash":"ab","hits":[]}`), Type: "application/json", Status: 200}
}

// A statement verifies under the key that sealed it for exactly the
// request and reply it was sealed for; every other key, request or reply
// is refused with its own reason.
func TestVerify(t *testing.T) {
	a, b := key(t, 1), key(t, 2)
	env, err := binding.Seal(a, reply())
	if err != nil {
		t.Fatal(err)
	}
	st, err := binding.Verify(env, a.Public(), reply())
	if err != nil || st.Provider != a.ID() || st.Status != 200 {
		t.Fatalf("the provider's own statement: %v %+v", err, st)
	}
	bEnv, _ := binding.Seal(b, reply())
	flip := bytes.Clone(env)
	flip[len(flip)-1] ^= 1
	for _, c := range []struct {
		name string
		env  []byte
		edit func(*binding.Reply)
		want binding.Refusal
	}{
		{"none", nil, nil, binding.RefusedUnsigned},
		{"relayed: another node's statement", bEnv, nil, binding.RefusedSigner},
		{"bad signature", flip, nil, binding.RefusedMalformed},
		{"replayed for another request", env, func(r *binding.Reply) { r.Request = []byte(`{"query_text":"joule"}`) }, binding.RefusedRequest},
		{"another procedure", env, func(r *binding.Reply) { r.Procedure = "get_chunk_by_id" }, binding.RefusedRequest},
		{"another corpus", env, func(r *binding.Reply) { r.Corpus = "example/other" }, binding.RefusedRequest},
		{"body changed", env, func(r *binding.Reply) { r.Body = []byte(`{"corpus_hash":"ab","hits":[1]}`) }, binding.RefusedBody},
		{"status changed", env, func(r *binding.Reply) { r.Status = 404 }, binding.RefusedBody},
		{"type changed", env, func(r *binding.Reply) { r.Type = "application/cbor" }, binding.RefusedBody},
	} {
		r := reply()
		if c.edit != nil {
			c.edit(&r)
		}
		_, err := binding.Verify(c.env, a.Public(), r)
		if binding.ReasonOf(err) != c.want || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// The statement can pass for nothing else the steward key signs, and
// nothing else it signs passes for a statement.
func TestNotConfusable(t *testing.T) {
	k := key(t, 3)
	env, err := binding.Seal(k, reply())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := steward.OpenEnvelope(env, k.Public()); err == nil {
		t.Error("a RAG reply statement opens as a receipt")
	}
	if _, err := steward.OpenCheckpoint(env, k.Public()); err == nil {
		t.Error("a RAG reply statement opens as a checkpoint")
	}
	if _, err := api.OpenAttestation(env, k.Public()); err == nil {
		t.Error("a RAG reply statement opens as an attestation")
	}
	if _, err := grant.Open(env, func(ed25519.PublicKey) error { return nil }); err == nil {
		t.Error("a RAG reply statement opens as a grant")
	}
	// An attestation (whose payload a caller might try to present) is not
	// a statement, nor is any other map the key signed.
	att, _ := wire.EncMode().Marshal(api.Attestation{Purpose: "meshd-fleet-report/v1", SHA256: make([]byte, 32), Steward: k.ID()})
	attEnv, _ := steward.Sign1(k, att)
	other, _ := wire.EncMode().Marshal(map[string]any{"mesh_rag_reply": binding.Purpose, "provider": k.ID(), "corpus": "example/docs",
		"procedure": "answer_query", "request_sha256": make([]byte, 32), "reply_sha256": make([]byte, 32), "reply_type": "application/json",
		"status": 200, "x_extra": 1})
	otherEnv, _ := steward.Sign1(k, other)
	for name, e := range map[string][]byte{"attestation": attEnv, "statement with an extra field": otherEnv} {
		if _, _, err := binding.Open(e); binding.ReasonOf(err) != binding.RefusedMalformed {
			t.Errorf("%s: %v, want %s", name, err, binding.RefusedMalformed)
		}
	}
}
