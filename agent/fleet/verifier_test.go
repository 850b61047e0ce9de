package fleet

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
	"meshd/wire"
)

// problemsOf returns the kinds of a steward's problems.
func problemsOf(t *testing.T, r Report, id string) []string {
	t.Helper()
	s, ok := r.Steward(id)
	if !ok {
		t.Fatalf("steward %s is not in the report", id)
	}
	var kinds []string
	for _, p := range s.Problems {
		if p.Steward != id {
			t.Errorf("problem %v names steward %q, want %s", p, p.Steward, id)
		}
		kinds = append(kinds, p.Kind)
	}
	return kinds
}

func TestVerifierChains(t *testing.T) {
	a, b := newKey(t), newKey(t)
	ca, cb := signChain(t, a, 8), signChain(t, b, 8)
	fork := signChain(t, a, 8) // same key, other receipts: a second history
	tampered := bytes.Clone(ca[3])
	tampered[len(tampered)-70] ^= 1 // inside the payload, under the signature

	feed := func(v *Verifier, id string, envs [][]byte, order ...int) {
		for _, i := range order {
			v.Feed(msg(id, uint64(i), envs[i]))
		}
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	cases := []struct {
		name   string
		feed   func(v *Verifier)
		count  uint64
		kinds  []string
		dups   uint64
		detail string
	}{
		{"in order", func(v *Verifier) { feed(v, a.ID(), ca, all...) }, 8, nil, 0, ""},
		{"reversed", func(v *Verifier) { feed(v, a.ID(), ca, 7, 6, 5, 4, 3, 2, 1, 0) }, 8, nil, 0, ""},
		{"shuffled with duplicates", func(v *Verifier) { feed(v, a.ID(), ca, 3, 0, 3, 1, 7, 2, 0, 5, 4, 6, 6, 1) }, 8, nil, 4, ""},
		{"republished batch after a crash", func(v *Verifier) { feed(v, a.ID(), ca, 0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7) }, 8, nil, 3, ""},
		{"dropped sequence", func(v *Verifier) { feed(v, a.ID(), ca, 0, 1, 2, 3, 4, 5, 7) }, 6, []string{ProblemGap}, 0, "sequence 6 missing"},
		{"two gaps", func(v *Verifier) { feed(v, a.ID(), ca, 0, 3, 6, 7) }, 1, []string{ProblemGap, ProblemGap}, 0, "sequences 1..2 missing"},
		{"fork at a verified sequence", func(v *Verifier) {
			feed(v, a.ID(), ca, all...)
			v.Feed(msg(a.ID(), 2, fork[2]))
		}, 8, []string{ProblemFork}, 0, wire.ContentOf(fork[2]).String()},
		{"fork ahead of the head", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 5)
			v.Feed(msg(a.ID(), 5, fork[5]))
			feed(v, a.ID(), ca, 1, 2, 3, 4, 6, 7)
		}, 8, []string{ProblemFork}, 0, wire.ContentOf(ca[5]).String()},
		{"forged by another key", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1)
			v.Feed(msg(a.ID(), 2, cb[2]))
			feed(v, a.ID(), ca, 2, 3, 4, 5, 6, 7)
		}, 8, []string{ProblemForged}, 0, "not by the steward's own key"},
		{"tampered byte", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1, 2)
			v.Feed(msg(a.ID(), 3, tampered))
			feed(v, a.ID(), ca, 3, 4, 5, 6, 7)
		}, 8, []string{ProblemInvalid}, 0, "receipt"},
		{"replay under a new message id", func(v *Verifier) {
			feed(v, a.ID(), ca, all...)
			m := msg(a.ID(), 1, ca[1])
			m.Header.Set(jetstream.MsgIDHeader, "replayed-1")
			v.Feed(m)
		}, 8, []string{ProblemReplay}, 1, "replayed-1"},
		// A message id that is not the content id says nothing about an
		// envelope that does not verify: the real problem is reported,
		// not a replay.
		{"garbage under a made-up message id", func(v *Verifier) {
			feed(v, a.ID(), ca, all...)
			m := msg(a.ID(), 8, []byte("not an envelope at all"))
			m.Header.Set(jetstream.MsgIDHeader, "garbage-1")
			v.Feed(m)
		}, 8, []string{ProblemInvalid}, 0, "envelope-structure"},
		{"forgery under a made-up message id", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1)
			m := msg(a.ID(), 2, cb[2])
			m.Header.Set(jetstream.MsgIDHeader, "forged-2")
			v.Feed(m)
			feed(v, a.ID(), ca, 2, 3, 4, 5, 6, 7)
		}, 8, []string{ProblemForged}, 0, "signed by key " + b.ID()},
		{"new receipt under a made-up message id", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1, 2, 3, 4, 5, 6)
			m := msg(a.ID(), 7, ca[7])
			m.Header.Set(jetstream.MsgIDHeader, "made-up-7")
			v.Feed(m)
		}, 8, []string{ProblemMessageID}, 0, `"made-up-7", not its content id`},
		{"early receipt under a made-up message id", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1, 2, 3, 4, 5)
			m := msg(a.ID(), 7, ca[7])
			m.Header.Set(jetstream.MsgIDHeader, "made-up-7")
			v.Feed(m)
			feed(v, a.ID(), ca, 6)
		}, 8, []string{ProblemMessageID}, 0, "made-up-7"},
		{"link to another history", func(v *Verifier) {
			feed(v, a.ID(), ca, 0, 1, 2)
			v.Feed(msg(a.ID(), 3, fork[3]))
		}, 4, []string{ProblemLink}, 0, "prev does not name"},
		{"sequence header lies", func(v *Verifier) {
			feed(v, a.ID(), ca, 0)
			m := msg(a.ID(), 1, ca[1])
			m.Header.Set(HeaderSeq, "9")
			v.Feed(m)
		}, 2, []string{ProblemHeader}, 0, `"9"`},
		{"bare messages without headers", func(v *Verifier) {
			for i, env := range ca {
				v.Feed(Message{Subject: ReceiptSubject(a.ID()), Data: env, StreamSeq: uint64(i + 1)})
			}
		}, 8, nil, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier(VerifierConfig{})
			tc.feed(v)
			r := v.Report()
			s, ok := r.Steward(a.ID())
			if !ok {
				t.Fatalf("steward %s missing from the report", a.ID())
			}
			if s.Count != tc.count {
				t.Errorf("count %d, want %d", s.Count, tc.count)
			}
			if s.Count == 8 && s.Head != wire.ContentOf(ca[7]) {
				t.Errorf("head %s, want %s", s.Head, wire.ContentOf(ca[7]))
			}
			if s.Duplicates != tc.dups {
				t.Errorf("duplicates %d, want %d", s.Duplicates, tc.dups)
			}
			if got := problemsOf(t, r, a.ID()); !slices.Equal(got, tc.kinds) {
				t.Errorf("problems %v, want %v: %v", got, tc.kinds, s.Problems)
			}
			if s.OK() != (len(tc.kinds) == 0) || r.OK() != s.OK() {
				t.Errorf("OK %v with problems %v", s.OK(), s.Problems)
			}
			if tc.detail != "" {
				p, _ := s.First()
				if !strings.Contains(p.String(), tc.detail) || !strings.Contains(p.String(), a.ID()) {
					t.Errorf("first problem %q does not name %q and the steward", p, tc.detail)
				}
			}
		})
	}
}

// A forgery names who signed it: another steward of the fleet (a board
// publishing under its neighbour's subject) or a key outside the list; a
// subject naming a made-up id is an untrusted steward whose every envelope
// is forged, and that is what its first problem says.
func TestVerifierNamesTheForger(t *testing.T) {
	a, b, outsider, madeUp := newKey(t), newKey(t), newKey(t), newKey(t)
	ca, cb, co := signChain(t, a, 2), signChain(t, b, 2), signChain(t, outsider, 2)
	v := NewVerifier(VerifierConfig{Trusted: []string{a.ID(), b.ID()}})
	v.FeedBatch([]Message{
		msg(a.ID(), 0, ca[0]), msg(b.ID(), 0, cb[0]),
		msg(a.ID(), 1, cb[1]), // wrong key: b's receipt under a's subject
		msg(b.ID(), 1, co[1]), // outsider's receipt under b's subject
		msg(madeUp.ID(), 0, co[0]),
	})
	r := v.Report()
	for _, tc := range []struct {
		id, kinds, first string
	}{
		{a.ID(), "1 forged", "signed by key " + b.ID() + ", another trusted steward"},
		{b.ID(), "1 forged", "signed by key " + outsider.ID() + ", which is not in the trusted list"},
		{madeUp.ID(), "1 forged, 1 untrusted", "signed by key " + outsider.ID() + ", which is not in the trusted list"},
	} {
		s, ok := r.Steward(tc.id)
		if !ok {
			t.Fatalf("steward %s missing", tc.id)
		}
		p, _ := s.First()
		if got := KindsString(s.Kinds); got != tc.kinds || p.Kind != ProblemForged || !strings.Contains(p.Detail, tc.first) {
			t.Errorf("steward %s: kinds %q first %v; want %q and forged naming %q", tc.id, got, p, tc.kinds, tc.first)
		}
	}
	if got := KindsString(r.Kinds()); got != "3 forged, 1 untrusted" {
		t.Errorf("fleet kinds %q", got)
	}
}

func TestVerifierForkNamesBothIDs(t *testing.T) {
	a := newKey(t)
	ca, other := signChain(t, a, 3), signChain(t, a, 3)
	v := NewVerifier(VerifierConfig{})
	for i, env := range ca {
		v.Feed(msg(a.ID(), uint64(i), env))
	}
	v.Feed(msg(a.ID(), 1, other[1]))
	p, _ := v.Report().Stewards[0].First()
	for _, id := range []wire.ContentID{wire.ContentOf(ca[1]), wire.ContentOf(other[1])} {
		if !strings.Contains(p.Detail, id.String()) {
			t.Errorf("fork %q does not name %s", p, id)
		}
	}
}

func TestVerifierTrustAndSubjects(t *testing.T) {
	a, b := newKey(t), newKey(t)
	v := NewVerifier(VerifierConfig{Trusted: []string{a.ID()}})
	v.FeedBatch([]Message{
		msg(a.ID(), 0, signChain(t, a, 1)[0]),
		msg(b.ID(), 0, signChain(t, b, 1)[0]),
		{Subject: "mesh.receipts.not-a-key", Data: []byte{1}},
		{Subject: "elsewhere", Data: []byte{1}},
	})
	r := v.Report()
	if got := problemsOf(t, r, a.ID()); len(got) != 0 {
		t.Errorf("trusted steward has problems %v", got)
	}
	if got := problemsOf(t, r, b.ID()); !slices.Equal(got, []string{ProblemUntrusted}) {
		t.Errorf("untrusted steward: problems %v", got)
	}
	if sb, _ := r.Steward(b.ID()); sb.Trusted || sb.Count != 1 {
		t.Errorf("untrusted steward: trusted %v count %d; want its chain checked but not trusted", sb.Trusted, sb.Count)
	}
	if len(r.Fleet) != 2 || r.Fleet[0].Kind != ProblemSubject || !strings.Contains(r.Fleet[0].Detail, "not-a-key") {
		t.Errorf("fleet problems %v, want two subject problems", r.Fleet)
	}
	if r.ProblemCount() != 3 {
		t.Errorf("problem count %d, want 3", r.ProblemCount())
	}
}

func TestVerifierCheckpoints(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, steward.LogOptions{NoSync: true, CheckpointEvery: -1})
	envs := n.seal(t, 6)
	cp, err := n.log.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A second log under the same key: its checkpoint of 6 names
	// another head.
	twin := &node{key: n.key, dir: filepath.Join(t.TempDir(), "twin")}
	twin.open(t, steward.LogOptions{NoSync: true, CheckpointEvery: -1})
	twin.seal(t, 6)
	other, err := twin.log.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := n.id()
	cpMsg := func(c *steward.SignedCheckpoint) Message {
		m := CheckpointMsg(id, c.Count, c.Envelope)
		return Message{Subject: m.Subject, Header: m.Header, Data: c.Envelope}
	}
	receipts := func(v *Verifier, from, to int) {
		for i := from; i < to; i++ {
			v.Feed(msg(id, uint64(i), envs[i]))
		}
	}
	cases := []struct {
		name       string
		feed       func(v *Verifier)
		checkpoint uint64
		kinds      []string
	}{
		{"after its receipts", func(v *Verifier) { receipts(v, 0, 6); v.Feed(cpMsg(cp)) }, 6, nil},
		{"before its receipts", func(v *Verifier) { v.Feed(cpMsg(cp)); receipts(v, 0, 6) }, 6, nil},
		{"receipts it covers missing", func(v *Verifier) { receipts(v, 0, 4); v.Feed(cpMsg(cp)) }, 0, []string{ProblemGap}},
		{"another head", func(v *Verifier) { receipts(v, 0, 6); v.Feed(cpMsg(other)) }, 0, []string{ProblemCheckpoint}},
		{"another head, pending", func(v *Verifier) { v.Feed(cpMsg(other)); receipts(v, 0, 6) }, 0, []string{ProblemCheckpoint}},
		{"two heads for one count", func(v *Verifier) { v.Feed(cpMsg(cp)); v.Feed(cpMsg(other)) }, 0, []string{ProblemCheckpoint, ProblemGap}},
		{"forged", func(v *Verifier) {
			receipts(v, 0, 6)
			v.Feed(Message{Subject: CheckpointSubject(id), Data: signChain(t, newKey(t), 1)[0]})
		}, 0, []string{ProblemInvalid}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewVerifier(VerifierConfig{})
			tc.feed(v)
			r := v.Report()
			s, _ := r.Steward(id)
			if s.Checkpoint != tc.checkpoint {
				t.Errorf("checkpoint %d, want %d", s.Checkpoint, tc.checkpoint)
			}
			if got := problemsOf(t, r, id); !slices.Equal(got, tc.kinds) {
				t.Errorf("problems %v, want %v: %v", got, tc.kinds, s.Problems)
			}
		})
	}
}

func TestVerifierStaleAndMaxAhead(t *testing.T) {
	a := newKey(t)
	ca := signChain(t, a, 40)
	v := NewVerifier(VerifierConfig{Window: 8, MaxAhead: 4})
	for i := range 30 {
		v.Feed(msg(a.ID(), uint64(i), ca[i]))
	}
	v.Feed(msg(a.ID(), 25, ca[25])) // inside the window: a duplicate
	v.Feed(msg(a.ID(), 3, ca[3]))   // far behind: cannot be compared
	// 30 never arrives; 31..35 wait behind it until MaxAhead gives up.
	for i := 31; i < 36; i++ {
		v.Feed(msg(a.ID(), uint64(i), ca[i]))
	}
	s := v.Report().Stewards[0]
	if s.Duplicates != 1 || s.Count != 36 {
		t.Errorf("duplicates %d count %d, want 1 and 36", s.Duplicates, s.Count)
	}
	if got := problemsOf(t, v.Report(), a.ID()); !slices.Equal(got, []string{ProblemStale, ProblemGap}) {
		t.Fatalf("problems %v", s.Problems)
	}
	if !strings.Contains(s.Problems[1].Detail, "sequences 30..30 never arrived") {
		t.Errorf("gap problem %q", s.Problems[1])
	}
}

// A gap is reported by every run until it fills, and the receipts waiting
// behind it survive in the state file.
func TestVerifierStatePersistsGaps(t *testing.T) {
	a := newKey(t)
	ca := signChain(t, a, 8)
	path := filepath.Join(t.TempDir(), "state.json")
	v := NewVerifier(VerifierConfig{})
	for _, i := range []int{0, 1, 2, 3, 4, 5, 7} {
		m := msg(a.ID(), uint64(i), ca[i])
		m.StreamSeq = uint64(i + 1)
		v.Feed(m)
	}
	if err := v.SaveState(path); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		v2 := NewVerifier(VerifierConfig{})
		if err := v2.LoadState(path); err != nil {
			t.Fatal(err)
		}
		s := v2.Report().Stewards[0]
		if s.Count != 6 || len(s.Gaps) != 1 || s.Gaps[0] != (Gap{6, 6}) || s.Ahead != 1 || v2.Position() != 8 {
			t.Fatalf("run %d: count %d gaps %v ahead %d position %d; want 6, [6..6], 1, 8", run, s.Count, s.Gaps, s.Ahead, v2.Position())
		}
		if err := v2.SaveState(path); err != nil {
			t.Fatal(err)
		}
	}
	v3 := NewVerifier(VerifierConfig{})
	if err := v3.LoadState(path); err != nil {
		t.Fatal(err)
	}
	v3.Feed(msg(a.ID(), 2, ca[2])) // a duplicate, known from the state's ids
	v3.Feed(msg(a.ID(), 6, ca[6]))
	r := v3.Report()
	if s := r.Stewards[0]; !r.OK() || s.Count != 8 || s.Head != wire.ContentOf(ca[7]) || s.Duplicates != 1 {
		t.Errorf("after the gap filled: count %d duplicates %d problems %v", s.Count, s.Duplicates, s.Problems)
	}
}

func TestVerifierStateRefusesDamage(t *testing.T) {
	for _, tc := range []struct{ name, state string }{
		{"not json", "{"},
		{"version", `{"version":9}`},
		{"bad steward", `{"version":1,"stewards":[{"steward":"zz","count":0}]}`},
		{"bad head", `{"version":1,"stewards":[{"steward":"` + strings.Repeat("ab", 32) + `","count":1,"head":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := NewVerifier(VerifierConfig{}).UnmarshalState([]byte(tc.state)); err == nil || !strings.Contains(err.Error(), "fleet verifier state") {
				t.Errorf("damaged state accepted or error unnamed: %v", err)
			}
		})
	}
}

// TestPartitionsStayEven: the stewards are dealt evenly into the
// partitions whatever their ids, and a steward keeps its partition, so
// that a few dozen boards still load every core alike (a hash of the id
// left 29 and 35 of 64 to two partitions) and a steward's messages are
// judged in one place, in feed order.
func TestPartitionsStayEven(t *testing.T) {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = newKey(t).ID()
	}
	for _, workers := range []int{2, 3, 4, 7} {
		v := NewVerifier(VerifierConfig{Workers: workers})
		owner := map[string]int{}
		counts := make([]int, workers)
		for _, id := range ids {
			k := v.partIndex(id)
			owner[id] = k
			counts[k]++
		}
		if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
			t.Errorf("%d workers: stewards per partition %v, want within one of each other", workers, counts)
		}
		// Asked again, in another order and from several goroutines,
		// each steward names the partition it was given first.
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range ids {
					id := ids[(i*7+g)%len(ids)]
					if k := v.partIndex(id); k != owner[id] {
						t.Errorf("%d workers: steward %s moved from partition %d to %d", workers, id[:8], owner[id], k)
					}
				}
			})
		}
		wg.Wait()
	}
}
