package rag

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// The kinds of provenance.
const (
	// KindCorpus is text from a listed repo, at the commit it was ingested at.
	KindCorpus = "corpus"
	// KindDeposit is anything else: text deposited with the provider.
	KindDeposit = "deposit"
)

// The refusals of VerifyHit and Provenance.Check.
var (
	// ErrMalformedHit is a hit whose provenance does not have the contract's
	// shape (macula_rag:verify_hit/1 names it malformed_provenance).
	ErrMalformedHit = errors.New("rag: malformed_provenance")
	// ErrContentMismatch is a hit whose text is not the text its provenance
	// hashes: it was changed after the provider hashed it.
	ErrContentMismatch = errors.New("rag: content_mismatch")
)

// Provenance says where a hit's text came from.
type Provenance struct {
	// Kind is KindCorpus or KindDeposit.
	Kind string
	// Path is where the text sits: "<repo_id>/<path in repo>" for corpus
	// content.
	Path string
	// RepoID is the repo the text came from; corpus only.
	RepoID string
	// Commit is the 40-hex commit the text was ingested at; corpus only. A
	// file unchanged across a pin move keeps the commit it was ingested at.
	Commit string
	// StartLine and EndLine are a chunk's lines, 1-based and inclusive; zero
	// means absent.
	StartLine, EndLine int
	// ContentSHA256 is the lowercase hex SHA-256 of the text returned.
	ContentSHA256 string
	// DepositedBy is a deposit's depositor as a hex node id, when known.
	DepositedBy string
}

// Hit is one answer: at least chunk_id, score, content and provenance. A
// get_chunk_by_id reply is a hit without a score.
type Hit struct {
	// ChunkID names the chunk at the provider.
	ChunkID string
	// Score is the hit's similarity; nil when the reply has none.
	Score *float64
	// Content is the chunk's text.
	Content string
	// Provenance says where Content came from.
	Provenance Provenance
	// Extra holds any other key the provider added; none of it is checked.
	Extra map[string]any
}

// Check applies the contract's provenance rules. A corpus provenance names
// its repo and 40-hex commit; a deposit names neither. Both name a path and
// the 64-hex SHA-256 of the text. Lines, when present, start at 1 and end at
// or after their start, and an end needs a start. deposited_by, when present,
// is a 64-hex node id and only a deposit has one. The error wraps
// ErrMalformedHit.
func (p Provenance) Check() error {
	switch p.Kind {
	case KindCorpus:
		if p.RepoID == "" {
			return malformedHit("corpus provenance without repo_id")
		}
		if !isLowerHex(p.Commit, 40) {
			return malformedHit("corpus commit %q is not 40 lowercase hex digits", p.Commit)
		}
		if p.DepositedBy != "" {
			return malformedHit("corpus provenance with deposited_by")
		}
	case KindDeposit:
		if p.RepoID != "" || p.Commit != "" {
			return malformedHit("deposit provenance names a repo_id or commit")
		}
		if p.DepositedBy != "" && !isLowerHex(p.DepositedBy, 64) {
			return malformedHit("deposited_by %q is not a 64-hex node id", p.DepositedBy)
		}
	default:
		return malformedHit("kind %q is neither %q nor %q", p.Kind, KindCorpus, KindDeposit)
	}
	if p.Path == "" {
		return malformedHit("no path")
	}
	if !isLowerHex(p.ContentSHA256, 64) {
		return malformedHit("content_sha256 %q is not 64 lowercase hex digits", p.ContentSHA256)
	}
	switch {
	case p.StartLine < 0 || p.EndLine < 0:
		return malformedHit("negative line %d..%d", p.StartLine, p.EndLine)
	case p.StartLine == 0 && p.EndLine != 0:
		return malformedHit("end_line %d without start_line", p.EndLine)
	case p.EndLine != 0 && p.EndLine < p.StartLine:
		return malformedHit("end_line %d before start_line %d", p.EndLine, p.StartLine)
	}
	return nil
}

// VerifyHit checks a hit's text against its content_sha256, which matters
// for a hit relayed or stored after the call: nil when the provenance is
// well formed and Content hashes to it, ErrMalformedHit or ErrContentMismatch
// (wrapped) otherwise.
//
// Warning, as the contract says: ok is not corpus membership. VerifyHit does
// not check that RepoID is one of the described repos, that Path lies inside
// it, or that the commit is the pinned one; it says nothing about whether the
// provider told the truth about the repo, which is what the signed corpus is
// for.
func VerifyHit(h Hit) error {
	if err := h.Provenance.Check(); err != nil {
		return fmt.Errorf("rag: verify hit %q: %w", h.ChunkID, err)
	}
	sum := sha256.Sum256([]byte(h.Content))
	if got := hex.EncodeToString(sum[:]); got != h.Provenance.ContentSHA256 {
		return fmt.Errorf("rag: verify hit %q: %w: text hashes to %s, provenance says %s",
			h.ChunkID, ErrContentMismatch, got, h.Provenance.ContentSHA256)
	}
	return nil
}

func malformedHit(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedHit, fmt.Sprintf(format, args...))
}
