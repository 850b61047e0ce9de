package rag

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func corpusHit(text string) Hit {
	score := 0.9
	return Hit{
		ChunkID: "c1", Score: &score, Content: text,
		Provenance: Provenance{Kind: KindCorpus, RepoID: "alpha", Path: "alpha/README.md",
			Commit: strings.Repeat("a", 40), StartLine: 1, EndLine: 3, ContentSHA256: sha256Hex(text)},
	}
}

func depositHit(text string) Hit {
	return Hit{
		ChunkID: "d1", Content: text,
		Provenance: Provenance{Kind: KindDeposit, Path: "conversational", ContentSHA256: sha256Hex(text)},
	}
}

func TestVerifyHit(t *testing.T) {
	edit := func(h Hit, f func(p *Provenance)) Hit { f(&h.Provenance); return h }
	cases := []struct {
		name string
		hit  Hit
		want error
	}{
		{"corpus hit", corpusHit("pangolins roll up"), nil},
		{"deposit hit", depositHit("pangolins roll up"), nil},
		{"deposit with depositor", edit(depositHit("x"), func(p *Provenance) { p.DepositedBy = strings.Repeat("0", 64) }), nil},
		{"no lines", edit(corpusHit("x"), func(p *Provenance) { p.StartLine, p.EndLine = 0, 0 }), nil},
		{"start line only", edit(corpusHit("x"), func(p *Provenance) { p.EndLine = 0 }), nil},
		{"one line", edit(corpusHit("x"), func(p *Provenance) { p.StartLine, p.EndLine = 4, 4 }), nil},
		{"empty text", corpusHit(""), nil},
		{"text changed", func() Hit { h := corpusHit("pangolins roll up"); h.Content = "pangolins fly"; return h }(), ErrContentMismatch},
		{"hash of other text", edit(corpusHit("a"), func(p *Provenance) { p.ContentSHA256 = sha256Hex("b") }), ErrContentMismatch},
		{"kind other", edit(corpusHit("x"), func(p *Provenance) { p.Kind = "other" }), ErrMalformedHit},
		{"kind empty", edit(corpusHit("x"), func(p *Provenance) { p.Kind = "" }), ErrMalformedHit},
		{"corpus without commit", edit(corpusHit("x"), func(p *Provenance) { p.Commit = "" }), ErrMalformedHit},
		{"corpus commit a branch", edit(corpusHit("x"), func(p *Provenance) { p.Commit = "main" }), ErrMalformedHit},
		{"corpus commit uppercase", edit(corpusHit("x"), func(p *Provenance) { p.Commit = strings.Repeat("A", 40) }), ErrMalformedHit},
		{"corpus without repo_id", edit(corpusHit("x"), func(p *Provenance) { p.RepoID = "" }), ErrMalformedHit},
		{"corpus with depositor", edit(corpusHit("x"), func(p *Provenance) { p.DepositedBy = strings.Repeat("0", 64) }), ErrMalformedHit},
		{"deposit with repo_id", edit(depositHit("x"), func(p *Provenance) { p.RepoID = "alpha" }), ErrMalformedHit},
		{"deposit with commit", edit(depositHit("x"), func(p *Provenance) { p.Commit = strings.Repeat("a", 40) }), ErrMalformedHit},
		{"deposit with a bad depositor", edit(depositHit("x"), func(p *Provenance) { p.DepositedBy = "alice" }), ErrMalformedHit},
		{"no path", edit(corpusHit("x"), func(p *Provenance) { p.Path = "" }), ErrMalformedHit},
		{"short sha", edit(corpusHit("x"), func(p *Provenance) { p.ContentSHA256 = "short" }), ErrMalformedHit},
		{"uppercase sha", edit(corpusHit("x"), func(p *Provenance) { p.ContentSHA256 = strings.ToUpper(p.ContentSHA256) }), ErrMalformedHit},
		{"end before start", edit(corpusHit("x"), func(p *Provenance) { p.StartLine, p.EndLine = 5, 4 }), ErrMalformedHit},
		{"end without start", edit(corpusHit("x"), func(p *Provenance) { p.StartLine = 0 }), ErrMalformedHit},
		{"negative start", edit(corpusHit("x"), func(p *Provenance) { p.StartLine = -1 }), ErrMalformedHit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := VerifyHit(c.hit)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// ok is not corpus membership: a well-formed hit from a repo no description
// lists, at a commit no description pins, still verifies.
func TestVerifyHitIsNotMembership(t *testing.T) {
	h := corpusHit("x")
	h.Provenance.RepoID = "not-a-described-repo"
	h.Provenance.Path = "elsewhere/entirely"
	h.Provenance.Commit = strings.Repeat("c", 40)
	if err := VerifyHit(h); err != nil {
		t.Fatal(err)
	}
}
