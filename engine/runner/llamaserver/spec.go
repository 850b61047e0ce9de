package llamaserver

import (
	"fmt"

	"meshd/engine/runner/llama"
)

// Speculate pairs the slots with draft models for speculative decoding:
// drafts[i] serves the i-th state given to Ready. It must be called once,
// before Ready, with one drafter per slot. A greedy completion
// (temperature ≤ 0) on a slot with a draft decodes speculatively: its
// tokens are plain greedy decoding's, and its timings carry draft_n and
// draft_n_accepted as llama-server reports them. A sampled one decodes
// plainly, sharing decode steps with the other slots, and drafts nothing.
func (s *Server) Speculate(drafts ...*llama.Drafter) {
	for i, d := range drafts {
		if d == nil {
			panic(fmt.Sprintf("llamaserver: Speculate: drafter %d is nil", i))
		}
	}
	s.drafts = drafts
}

// draftOf is slot id's drafter, nil without one.
func (s *Server) draftOf(id int) *llama.Drafter {
	if id < len(s.drafts) {
		return s.drafts[id]
	}
	return nil
}
