// Package steward seals mesh/1 receipts (§6): it owns the receipt's wire
// form, the JCR-1 envelope (deterministic CBOR inside COSE_Sign1 with
// Ed25519), the steward key, the receipt log — a locked directory of
// hash-chained segments with group commit and signed checkpoints — and
// verification of single envelopes (meshd's or any conforming steward's)
// and of whole logs.
//
// The steward knows nothing of sensors or engines: it is handed a finished
// outcome and an Energy record and refuses to seal anything that breaks the
// §3.3 coupling or the §6 field rules.
package steward
