// Package rag is the RAG service contract in Go: corpus identity, signed corpora and verified hits.
//
// It follows the canonical text of the contract (macula's
// guides/rag_service_contract.md), with the byte layouts of macula_rag_corpus,
// its Erlang implementation, and of the macula modules it builds on
// (macula_signed_object, macula_node_keys, macula_record_cbor):
//
//   - Canonical and CanonicalValue are RFC 8785 (JCS) canonical JSON;
//   - CorpusHash is the contract's corpus hash over model, dim and repos;
//   - Sign and Open make and verify the operator's signature, a macula signed
//     object over corpus_hash under the label "macula-rag corpus v1", in the
//     pq_pure (ML-DSA-87) or pq_hybrid (ML-DSA-87 + RSA-PSS-4096 composite)
//     profile;
//   - NodeID derives a node id from a carried key;
//   - VerifyCorpus is the caller's check that a corpus is signed by the
//     provider it called, and VerifyHit checks a hit's text against its
//     provenance.
//
// The package has no dependency on meshd's agent, steward or engine. Byte
// layouts and every decision the contract leaves open are recorded in
// PROFILE-rag.md.
package rag
