// Package announce is how meshd names its RAG providers on NATS: the micro
// service, the subject of each corpus and the message headers that carry
// what HTTP carries in its path and status line. The provider side lives in
// agent/api (AnnounceRAG), the caller's in agent/api/client (Discover,
// NewRAGOverNATS); both speak these names.
package announce

import (
	"crypto/sha256"
	"encoding/hex"
)

const (
	// ServiceName and ServiceVersion name the micro service each node runs
	// ($SRV.INFO.meshd-rag finds them all); its metadata "steward" is the
	// node's steward key (64 hex).
	ServiceName    = "meshd-rag"
	ServiceVersion = "1.0.0"
	// SubjectPrefix begins every corpus subject.
	SubjectPrefix = "meshd.rag"
	// ProcedureHeader names the procedure of a request; StatusHeader the
	// HTTP status of a reply. Content-Type is as over HTTP.
	ProcedureHeader = "Mesh-Rag-Procedure"
	StatusHeader    = "Mesh-Rag-Status"
)

// EndpointName is the endpoint of corpus org/name: "c" and the first 16 hex
// digits of SHA-256("org/name"), since corpus names may hold dots, which a
// subject token cannot.
func EndpointName(org, name string) string {
	h := sha256.Sum256([]byte(org + "/" + name))
	return "c" + hex.EncodeToString(h[:8])
}

// Subject is where the node with steward key steward (64 hex) serves
// corpus org/name: meshd.rag.<steward>.<EndpointName>.
func Subject(steward, org, name string) string {
	return SubjectPrefix + "." + steward + "." + EndpointName(org, name)
}
