// Package steward seals mesh/1 receipts (§6): it owns the receipt's wire
// form, the JCR-1 envelope (deterministic CBOR inside COSE_Sign1 with
// Ed25519), the steward key, the hash-chained append-only receipt log with
// group commit, and verification of single envelopes and whole logs.
//
// The steward knows nothing of sensors or engines: it is handed a finished
// outcome and an Energy record and refuses to seal anything that breaks the
// §3.3 coupling or the §6 field rules.
package steward
