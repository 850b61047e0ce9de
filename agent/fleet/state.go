package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"meshd/steward"
	"meshd/wire"
)

// stateVersion is the version of the verifier's state file.
const stateVersion = 1

// maxStateFile bounds what is read of a state file.
const maxStateFile = 1 << 30

// stateFile is what a verifier persists between runs: per steward the
// verified head, the ids that tell duplicates from forks, what waits beyond
// a gap and the problems seen, so that a later run continues the checks
// and keeps reporting what is still wrong.
type stateFile struct {
	Version  int            `json:"version"`
	Position uint64         `json:"position"`
	Messages uint64         `json:"messages"`
	Fleet    []Problem      `json:"fleet,omitempty"`
	Stewards []stewardState `json:"stewards"`
}

type stewardState struct {
	Steward    string `json:"steward"`
	Count      uint64 `json:"count"`
	Head       string `json:"head,omitempty"`
	Duplicates uint64 `json:"duplicates,omitempty"`
	Checkpoint uint64 `json:"checkpoint,omitempty"`
	// Recent holds the remembered ids, oldest first, ending at the head.
	Recent       []byte    `json:"recent,omitempty"`
	Problems     []Problem `json:"problems,omitempty"`
	ProblemCount int       `json:"problem_count,omitempty"`
	// Kinds counts the problems by kind (absent from states written
	// before it was kept: then the kept problems are counted).
	Kinds map[string]int `json:"kinds,omitempty"`
	// Ahead and Pending are envelopes beyond the head, verified again on
	// load: a state file is not trusted with a signature's verdict.
	Ahead   []early64 `json:"ahead,omitempty"`
	Pending [][]byte  `json:"pending,omitempty"`
}

type early64 struct {
	Env       []byte `json:"env"`
	StreamSeq uint64 `json:"stream_seq,omitempty"`
}

// Position is the stream sequence of the newest message fed, which a
// consumer resumes after.
func (v *Verifier) Position() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.position
}

// MarshalState returns the verifier's state for a later run.
func (v *Verifier) MarshalState() ([]byte, error) {
	v.mu.Lock()
	st := stateFile{Version: stateVersion, Position: v.position, Messages: v.messages, Fleet: slices.Clone(v.fleet)}
	v.mu.Unlock()
	for _, pt := range v.parts {
		pt.mu.Lock()
		st.Stewards = pt.marshal(st.Stewards)
		pt.mu.Unlock()
	}
	slices.SortFunc(st.Stewards, func(a, b stewardState) int {
		switch {
		case a.Steward < b.Steward:
			return -1
		case a.Steward > b.Steward:
			return 1
		}
		return 0
	})
	return json.Marshal(&st)
}

// marshal appends the partition's chains. Called with pt.mu held.
func (pt *part) marshal(out []stewardState) []stewardState {
	for _, c := range pt.chains {
		s := stewardState{
			Steward: c.id, Count: c.count, Duplicates: c.dups, Checkpoint: c.checkpoint,
			Problems: slices.Clone(c.problems), ProblemCount: c.nProblem, Kinds: maps.Clone(c.kinds),
		}
		if c.count > 0 {
			s.Head = c.head.String()
		}
		for q := c.count - uint64(c.known); q < c.count; q++ {
			id := c.ring[q%uint64(len(c.ring))]
			s.Recent = append(s.Recent, id[:]...)
		}
		seqs := keys(c.ahead)
		slices.Sort(seqs)
		for _, q := range seqs {
			s.Ahead = append(s.Ahead, early64{Env: c.ahead[q].env, StreamSeq: c.ahead[q].streamSeq})
		}
		for _, cp := range c.pending {
			s.Pending = append(s.Pending, cp.Envelope)
		}
		out = append(out, s)
	}
	return out
}

// UnmarshalState restores a state from MarshalState into an empty verifier.
// The buffered envelopes are verified again as they are restored.
func (v *Verifier) UnmarshalState(b []byte) error {
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("%w: version %d, want %d", errState, st.Version, stateVersion)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.messages != 0 {
		return fmt.Errorf("%w: the verifier already holds chains", errState)
	}
	for _, pt := range v.parts {
		pt.mu.Lock()
		n := len(pt.chains)
		pt.mu.Unlock()
		if n != 0 {
			return fmt.Errorf("%w: the verifier already holds chains", errState)
		}
	}
	v.position, v.messages, v.fleet = st.Position, st.Messages, st.Fleet
	for _, s := range st.Stewards {
		if err := v.partOf(s.Steward).restore(s); err != nil {
			return err
		}
	}
	v.position = st.Position
	return nil
}

// restore puts one steward's saved chain back.
func (pt *part) restore(s stewardState) error {
	v := pt.v
	pt.mu.Lock()
	defer pt.mu.Unlock()
	key, err := steward.ParsePublicKey(s.Steward)
	if err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	c := pt.chainFor(s.Steward, key)
	c.count, c.dups, c.checkpoint = s.Count, s.Duplicates, s.Checkpoint
	c.problems, c.nProblem, c.kinds = s.Problems, s.ProblemCount, s.Kinds
	if c.kinds == nil && len(c.problems) > 0 {
		c.kinds = map[string]int{}
		for _, p := range c.problems {
			c.kinds[p.Kind]++
		}
	}
	if s.Count > 0 {
		h, err := wire.ParseContentID(s.Head)
		if err != nil {
			return fmt.Errorf("%w: steward %s: head: %v", errState, s.Steward, err)
		}
		c.head = h
	}
	if len(s.Recent)%len(wire.ContentID{}) != 0 || uint64(len(s.Recent)/32) > s.Count {
		return fmt.Errorf("%w: steward %s: %d bytes of recent ids", errState, s.Steward, len(s.Recent))
	}
	n := len(s.Recent) / 32
	for i := range n {
		var id wire.ContentID
		copy(id[:], s.Recent[i*32:])
		c.remember(s.Count-uint64(n-i), id, v.cfg.Window)
	}
	if n > 0 && c.ring[(s.Count-1)%uint64(len(c.ring))] != c.head {
		return fmt.Errorf("%w: steward %s: recent ids do not end at the head", errState, s.Steward)
	}
	// Re-feeding the buffered envelopes verifies them again and puts
	// them back where they belong.
	for _, e := range s.Ahead {
		pt.apply(pt.prepare(Message{Subject: ReceiptSubject(s.Steward), Data: e.Env, StreamSeq: e.StreamSeq}, route{steward: s.Steward}))
	}
	for _, env := range s.Pending {
		pt.apply(pt.prepare(Message{Subject: CheckpointSubject(s.Steward), Data: env}, route{checkpoint: true, steward: s.Steward}))
	}
	return nil
}

// LoadState reads a state file into an empty verifier; a missing file is
// an empty state.
func (v *Verifier) LoadState(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err == nil && len(b) > maxStateFile {
		err = fmt.Errorf("more than %d bytes", maxStateFile)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errState, path, err)
	}
	if err := v.UnmarshalState(b); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// SaveState writes the verifier's state to path atomically.
func (v *Verifier) SaveState(path string) error {
	b, err := v.MarshalState()
	if err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	if err := writeFileAtomic(path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %v", errState, err)
	}
	return nil
}
