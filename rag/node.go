package rag

import (
	"crypto/sha256"
	"encoding/hex"
)

// nodeIDLabel is the domain-separation label of node ids (macula decision D5).
const nodeIDLabel = "MACULA-NODE-ID-V1"

// NodeID is the hex node id of an identity key as carried, under a profile:
// the lowercase hex SHA-256 of the 17 ASCII bytes "MACULA-NODE-ID-V1", a zero
// byte, the length of the profile's name in one byte, the name in ASCII
// ("pq_pure" or "pq_hybrid"), and the key as carried (the 2,592-byte ML-DSA-87
// key, followed in pq_hybrid by the DER RSAPublicKey). This is macula's
// macula_node_keys:node_id/2, byte for byte.
//
// The profile is in the hash so one key bytes under two profiles names two
// nodes. A node id earns no trust on its own: rely on it only for a key a
// signature has just verified with. An unknown profile has no node id: "".
func NodeID(profile string, key []byte) string {
	if _, err := profileOf(profile); err != nil {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(nodeIDLabel))
	h.Write([]byte{0, byte(len(profile))})
	h.Write([]byte(profile))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil))
}
