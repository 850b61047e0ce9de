package fleet

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
	"meshd/wire"
)

// Verifier defaults.
const (
	// DefaultWindow is how many of a steward's newest content ids the
	// verifier remembers, to tell a republished receipt (same id: a
	// duplicate) from a second one at the same sequence (a fork). It must
	// exceed the publisher's Batch, the most a crash makes it republish.
	DefaultWindow = 2 * DefaultBatch
	// DefaultMaxAhead is how many receipts past a gap are held waiting
	// for it to fill before the gap is declared lost.
	DefaultMaxAhead = 4096
	// maxKept bounds the problems kept per steward; the rest are counted.
	maxKept = 16
	// maxPendingCheckpoints bounds the checkpoints held ahead of a chain.
	maxPendingCheckpoints = 8
)

// The kinds of problem the verifier reports.
const (
	// ProblemForged: an envelope under a steward's subject is signed by
	// another key.
	ProblemForged = "forged"
	// ProblemInvalid: an envelope under a steward's subject does not
	// verify (a tampered byte, a bad signature, a malformed receipt).
	ProblemInvalid = "invalid"
	// ProblemFork: two different envelopes with one sequence.
	ProblemFork = "fork"
	// ProblemReplay: an envelope already verified, republished under a
	// message id that is not its content id, which the publisher never
	// does: someone replayed it past the server's de-duplication.
	ProblemReplay = "replay"
	// ProblemMessageID: a valid envelope seen for the first time under a
	// message id that is not its content id (the publisher always uses
	// the content id, so another publisher made the id up).
	ProblemMessageID = "message-id"
	// ProblemHeader: a Mesh-Seq or Mesh-Steward header contradicts the
	// signed content.
	ProblemHeader = "header"
	// ProblemLink: the receipt at the next sequence does not link to the
	// verified head.
	ProblemLink = "link"
	// ProblemGap: sequences missing below one that arrived (or below a
	// checkpoint's count).
	ProblemGap = "gap"
	// ProblemUntrusted: a steward not in the operator's trusted list.
	ProblemUntrusted = "untrusted"
	// ProblemCheckpoint: a checkpoint that does not verify or that
	// contradicts the verified chain.
	ProblemCheckpoint = "checkpoint"
	// ProblemStale: an envelope too far behind the head to compare with
	// what was verified there.
	ProblemStale = "stale"
	// ProblemSubject: a message on a subject that names no steward key.
	ProblemSubject = "subject"
)

// Problem is one thing wrong in the fleet's receipts.
type Problem struct {
	Kind    string `json:"kind"`
	Steward string `json:"steward,omitempty"`
	Detail  string `json:"detail"`
	// StreamSeq is the stream sequence of the message that showed it
	// (0 when none did: a gap, an untrusted steward).
	StreamSeq uint64 `json:"stream_seq,omitempty"`
}

func (p Problem) String() string {
	s := p.Kind + ": " + p.Detail
	if p.Steward != "" {
		s = "steward " + p.Steward + ": " + s
	}
	if p.StreamSeq != 0 {
		s += " (stream message " + strconv.FormatUint(p.StreamSeq, 10) + ")"
	}
	return s
}

// Message is one message of the fleet stream as the verifier sees it.
type Message struct {
	Subject string
	Header  nats.Header
	Data    []byte
	// StreamSeq is where the message lies in the stream, to name it in
	// problems; 0 when it does not come from one.
	StreamSeq uint64
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Trusted lists the steward ids (hex public keys) the operator
	// trusts. A steward not in it is still checked for consistency but is
	// reported as untrusted. Nil trusts every steward id a subject names
	// (each envelope must still be signed by the key its subject names).
	Trusted []string
	// Window is how many content ids per steward are remembered to tell
	// duplicates from forks (DefaultWindow when zero).
	Window int
	// MaxAhead is how many receipts past a gap are held (DefaultMaxAhead
	// when zero).
	MaxAhead int
	// Workers is how many partitions the stewards are dealt into, and
	// so how many goroutines FeedBatch runs: each owns whole stewards, so
	// a steward's messages are judged in the order they were fed
	// (GOMAXPROCS when zero).
	Workers int
}

// Verifier checks a fleet's receipt chains from the messages it is fed, in
// any order. It is safe for concurrent use.
//
// Chains are independent, so the stewards are dealt into partitions, each
// with its own lock and map: FeedBatch gives each partition's messages to
// one goroutine, which checks signatures and links for whole stewards, in
// feed order, without touching another partition's state.
type Verifier struct {
	cfg     VerifierConfig
	trusted map[string]bool // nil: no list
	parts   []*part

	owners sync.RWMutex
	owner  map[string]int // steward id to its partition
	owned  []int          // stewards per partition

	mu       sync.Mutex
	fleet    []Problem // problems that name no steward key
	messages uint64
	position uint64 // stream sequence of the last message applied
}

// part is one partition of the stewards.
type part struct {
	v      *Verifier
	mu     sync.Mutex
	chains map[string]*chain
	// opener decodes each envelope into the same storage: a prepared
	// receipt lives until the next prepare, and one kept for later (an
	// envelope past a gap) is cloned.
	opener steward.Opener
}

// NewVerifier returns an empty verifier.
func NewVerifier(cfg VerifierConfig) *Verifier {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxAhead <= 0 {
		cfg.MaxAhead = DefaultMaxAhead
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	v := &Verifier{cfg: cfg, parts: make([]*part, cfg.Workers), owner: map[string]int{}, owned: make([]int, cfg.Workers)}
	for i := range v.parts {
		v.parts[i] = &part{v: v, chains: map[string]*chain{}}
	}
	if cfg.Trusted != nil {
		v.trusted = make(map[string]bool, len(cfg.Trusted))
		for _, id := range cfg.Trusted {
			v.trusted[id] = true
		}
	}
	return v
}

// chain is what the verifier holds of one steward: the verified head and
// little else, so that a fleet of many boards fits in one process.
type chain struct {
	id      string
	key     ed25519.PublicKey
	trusted bool

	count uint64         // receipts verified: the next sequence expected
	head  wire.ContentID // content id at count-1
	// ring remembers the ids of the newest known sequences,
	// [count-known, count), at seq % len(ring). It grows to the window.
	ring  []wire.ContentID
	known int

	dups       uint64
	checkpoint uint64 // count of the newest checkpoint matched against the chain

	ahead   map[uint64]*early           // verified envelopes past a gap
	pending []*steward.SignedCheckpoint // checkpoints past the head, by count

	problems []Problem // the first maxKept
	nProblem int
	kinds    map[string]int // every problem counted by kind
}

// early is an envelope that arrived before the sequences below it.
type early struct {
	env       []byte
	opened    *steward.Opened
	streamSeq uint64
}

// prepared is a message after the stateless checks: subject, signature,
// decoding.
type prepared struct {
	msg        Message
	checkpoint bool
	steward    string
	key        ed25519.PublicKey
	id         wire.ContentID
	opened     *steward.Opened
	cp         *steward.SignedCheckpoint
	err        error // the envelope does not verify under the subject's key
	subjectErr error // the subject names no steward key
}

// route is the first look at a message: which tree its subject is in and
// which steward it names, without parsing the key.
type route struct {
	checkpoint bool
	steward    string
	err        error
}

func routeOf(subject string) route {
	cp, id, ok := splitSubject(subject)
	if !ok {
		return route{err: fmt.Errorf("subject %q is not %s<steward> or %s<steward>", subject, ReceiptPrefix, CheckpointPrefix)}
	}
	return route{checkpoint: cp, steward: id}
}

// partOf is the partition that owns a steward.
func (v *Verifier) partOf(id string) *part { return v.parts[v.partIndex(id)] }

// partIndex is the partition that owns a steward: the one that held the
// fewest stewards when the steward was first seen, kept for good, so that
// every message of one steward goes to the same partition and the
// partitions' loads stay even however few stewards there are. (A hash of
// the id left 29 and 35 of 64 stewards to two partitions: the larger one
// then decides each batch's time.)
func (v *Verifier) partIndex(id string) int {
	if len(v.parts) == 1 {
		return 0
	}
	v.owners.RLock()
	k, ok := v.owner[id]
	v.owners.RUnlock()
	if ok {
		return k
	}
	v.owners.Lock()
	defer v.owners.Unlock()
	if k, ok := v.owner[id]; ok {
		return k
	}
	k = 0
	for i, n := range v.owned {
		if n < v.owned[k] {
			k = i
		}
	}
	v.owner[id] = k
	v.owned[k]++
	return k
}

// prepare checks m's signature under the key its subject names. The key is
// taken from the steward's chain when one exists, so it is parsed once per
// steward, not once per message. Called with pt.mu held.
func (pt *part) prepare(m Message, r route) prepared {
	p := prepared{msg: m, checkpoint: r.checkpoint, steward: r.steward}
	if c := pt.chains[r.steward]; c != nil {
		p.key = c.key
	} else {
		key, err := steward.ParsePublicKey(r.steward)
		if err != nil {
			p.subjectErr = fmt.Errorf("subject %q: steward %q is not a public key: %v", m.Subject, r.steward, err)
			return p
		}
		p.key = key
	}
	if r.checkpoint {
		p.cp, p.err = steward.OpenCheckpoint(m.Data, p.key)
		p.id = wire.ContentOf(m.Data)
	} else if p.opened, p.err = pt.opener.Open(m.Data, p.key); p.err == nil {
		p.id = p.opened.ID // hashed once, by Open
	} else {
		p.id = wire.ContentOf(m.Data)
	}
	return p
}

// Feed verifies one message.
func (v *Verifier) Feed(m Message) {
	v.FeedBatch([]Message{m})
}

// fleetProblem is a problem that names no steward key, with the index of
// the message that showed it in its batch.
type fleetProblem struct {
	i int
	p Problem
}

// FeedBatch verifies messages, each steward's in the order given. The
// stewards' partitions are worked on in parallel, one goroutine each.
func (v *Verifier) FeedBatch(ms []Message) {
	if len(ms) == 0 {
		return
	}
	routes := make([]route, len(ms))
	idx := make([][]int, len(v.parts))
	var fleet []fleetProblem
	for i, m := range ms {
		routes[i] = routeOf(m.Subject)
		if r := routes[i]; r.err != nil {
			fleet = append(fleet, fleetProblem{i, Problem{Kind: ProblemSubject, Detail: r.err.Error(), StreamSeq: m.StreamSeq}})
			continue
		}
		k := v.partIndex(routes[i].steward)
		idx[k] = append(idx[k], i)
	}
	found := make([][]fleetProblem, len(v.parts))
	busy := 0
	for _, is := range idx {
		if len(is) > 0 {
			busy++
		}
	}
	if busy <= 1 {
		// One partition has work: no goroutine to start.
		for k, is := range idx {
			if len(is) > 0 {
				found[k] = v.parts[k].feed(ms, routes, is)
			}
		}
	} else {
		var wg sync.WaitGroup
		for k, is := range idx {
			if len(is) > 0 {
				wg.Go(func() { found[k] = v.parts[k].feed(ms, routes, is) })
			}
		}
		wg.Wait()
	}
	for _, f := range found {
		fleet = append(fleet, f...)
	}
	// Partitions report by partition; the fleet's problems are kept in
	// the order their messages were fed.
	slices.SortFunc(fleet, func(a, b fleetProblem) int { return a.i - b.i })
	v.mu.Lock()
	defer v.mu.Unlock()
	v.messages += uint64(len(ms))
	for _, m := range ms {
		v.position = max(v.position, m.StreamSeq)
	}
	for _, f := range fleet {
		v.fleet = append(v.fleet, f.p)
	}
	if len(v.fleet) > maxKept {
		v.fleet = slices.Clone(v.fleet[len(v.fleet)-maxKept:])
	}
}

// feed prepares and applies the messages ms[is...] under the partition's
// lock, returning the problems that name no steward key.
func (pt *part) feed(ms []Message, rs []route, is []int) []fleetProblem {
	var fleet []fleetProblem
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, i := range is {
		if p := pt.prepare(ms[i], rs[i]); p.subjectErr != nil {
			fleet = append(fleet, fleetProblem{i, Problem{Kind: ProblemSubject, Detail: p.subjectErr.Error(), StreamSeq: ms[i].StreamSeq}})
		} else {
			pt.apply(p)
		}
	}
	return fleet
}

func (pt *part) chainFor(id string, key ed25519.PublicKey) *chain {
	c := pt.chains[id]
	if c == nil {
		c = &chain{id: id, key: key, trusted: pt.v.trusted == nil || pt.v.trusted[id]}
		pt.chains[id] = c
	}
	return c
}

func (c *chain) problem(kind string, streamSeq uint64, format string, a ...any) {
	c.nProblem++
	if c.kinds == nil {
		c.kinds = map[string]int{}
	}
	c.kinds[kind]++
	if len(c.problems) < maxKept {
		c.problems = append(c.problems, Problem{Kind: kind, Steward: c.id, Detail: fmt.Sprintf(format, a...), StreamSeq: streamSeq})
	}
}

// idIs reports whether s is id in lower-case hex, without allocating.
func idIs(s string, id wire.ContentID) bool {
	if len(s) != 2*len(id) {
		return false
	}
	var buf [2 * len(wire.ContentID{})]byte
	hex.Encode(buf[:], id[:])
	return string(buf[:]) == s
}

// kidOf is the key a canonical envelope names as its signer (the COSE
// kid), or nil when the envelope is too broken to name one.
func kidOf(env []byte) []byte {
	const head = "\xd2\x84\x58\x26\xa2\x01\x27\x04\x58\x20"
	if len(env) < len(head)+ed25519.PublicKeySize || string(env[:len(head)]) != head {
		return nil
	}
	return env[len(head) : len(head)+ed25519.PublicKeySize]
}

// apply judges one prepared message against the steward's chain. Called
// with pt.mu held.
//
// Each message yields its real problem: an envelope that does not verify
// is reported as forged or invalid and nothing else (its message id and
// headers say nothing once the signature fails); a valid one is judged
// against the chain, and only then is its message id weighed: a replay if
// the envelope was already verified, a made-up id if it is new.
func (pt *part) apply(p prepared) {
	v := pt.v
	ss := p.msg.StreamSeq
	c := pt.chainFor(p.steward, p.key)
	what := "receipt"
	if p.checkpoint {
		what = "checkpoint"
	}
	if p.err != nil {
		kind := ProblemInvalid
		if steward.ReasonOf(p.err) == steward.RefusedUntrusted {
			kind = ProblemForged
			c.problem(kind, ss, "%s %s under this steward's subject is signed by %s, not by the steward's own key [%s]", what, p.id, pt.describeKey(kidOf(p.msg.Data)), steward.RefusedUntrusted)
			return
		}
		c.problem(kind, ss, "%s %s: %v", what, p.id, p.err)
		return
	}
	// The publisher always uses the content id as the message id.
	mid := p.msg.Header.Get(jetstream.MsgIDHeader)
	badID := mid != "" && !idIs(mid, p.id)
	if h := p.msg.Header.Get(HeaderSteward); h != "" && h != p.steward {
		c.problem(ProblemHeader, ss, "%s header %q on the steward's subject", HeaderSteward, h)
	}
	if p.checkpoint {
		known := p.cp.Count <= c.checkpoint
		v.applyCheckpoint(c, p)
		if badID {
			c.messageID(known, ss, what, p.id, mid)
		}
		return
	}
	seq := p.opened.Receipt.Sequence
	if h := p.msg.Header.Get(HeaderSeq); h != "" && !uintIs(h, seq) {
		c.problem(ProblemHeader, ss, "%s header %q on the receipt at sequence %d", HeaderSeq, h, seq)
	}
	switch {
	case seq < c.count:
		old, ok := c.recall(seq)
		switch {
		case !ok:
			c.problem(ProblemStale, ss, "sequence %d (%s) arrived %d behind the head, past the %d ids remembered: a duplicate and a fork cannot be told apart", seq, p.id, c.count-seq, len(c.ring))
		case old == p.id:
			c.dups++ // a republish after a crash or outage
			if badID {
				c.messageID(true, ss, what, p.id, mid)
			}
		default:
			c.problem(ProblemFork, ss, "sequence %d: verified %s, also %s", seq, old, p.id)
		}
	case seq == c.count:
		if badID {
			c.messageID(false, ss, what, p.id, mid)
		}
		v.extend(c, p.opened, ss, true)
		v.drain(c)
	default:
		if e, ok := c.ahead[seq]; ok {
			if e.opened.ID == p.id {
				c.dups++
				if badID {
					c.messageID(true, ss, what, p.id, mid)
				}
			} else {
				c.problem(ProblemFork, ss, "sequence %d: %s, also %s", seq, e.opened.ID, p.id)
			}
			return
		}
		if badID {
			c.messageID(false, ss, what, p.id, mid)
		}
		if c.ahead == nil {
			c.ahead = map[uint64]*early{}
		}
		// The next prepare reuses the opener's storage.
		o, err := p.opened.Clone()
		if err != nil {
			c.problem(ProblemInvalid, ss, "%s %s: %v", what, p.id, err)
			return
		}
		c.ahead[seq] = &early{env: p.msg.Data, opened: o, streamSeq: ss}
		if len(c.ahead) > v.cfg.MaxAhead {
			v.skipGap(c)
		}
	}
}

// messageID reports a message id that is not the envelope's content id:
// a replay when the envelope was already verified, a made-up id when not.
func (c *chain) messageID(known bool, ss uint64, what string, id wire.ContentID, mid string) {
	if known {
		c.problem(ProblemReplay, ss, "%s %s republished under message id %q", what, id, mid)
		return
	}
	c.problem(ProblemMessageID, ss, "%s %s published under message id %q, not its content id", what, id, mid)
}

// describeKey says who a forging key is: another steward the verifier
// trusts (a board publishing under a neighbour's subject) or a key outside
// the trusted list.
func (pt *part) describeKey(kid []byte) string {
	if kid == nil {
		return "no readable key"
	}
	id := hex.EncodeToString(kid)
	switch {
	case pt.v.trusted == nil:
		return "key " + id
	case pt.v.trusted[id]:
		return "key " + id + ", another trusted steward"
	default:
		return "key " + id + ", which is not in the trusted list"
	}
}

// uintIs reports whether s is n in decimal, without allocating.
func uintIs(s string, n uint64) bool {
	var buf [20]byte
	return string(strconv.AppendUint(buf[:0], n, 10)) == s
}

// extend makes o, the receipt at c.count, the new head. linked says
// whether it must link to the old head; a link that fails is reported and
// the chain continues from o, so that what follows is still checked.
func (v *Verifier) extend(c *chain, o *steward.Opened, streamSeq uint64, linked bool) {
	// o was opened under c.key at sequence c.count, so the link holds
	// when prev names the head; steward.CheckLink says why when not.
	if linked && c.count > 0 && (o.Receipt.Prev == nil || !idIs(*o.Receipt.Prev, c.head)) {
		prev := &steward.Opened{Receipt: &steward.Receipt{Sequence: c.count - 1}, Key: c.key, ID: c.head}
		if err := steward.CheckLink(prev, o); err != nil {
			c.problem(ProblemLink, streamSeq, "%v", err)
		}
	}
	c.remember(o.Receipt.Sequence, o.ID, v.cfg.Window)
	c.head, c.count = o.ID, o.Receipt.Sequence+1
	for len(c.pending) > 0 && c.pending[0].Count <= c.count {
		cp := c.pending[0]
		c.pending = c.pending[1:]
		if cp.Count == c.count {
			v.matchCheckpoint(c, cp, c.head, 0)
		}
	}
}

// drain verifies the buffered receipts that now follow the head.
func (v *Verifier) drain(c *chain) {
	for {
		e, ok := c.ahead[c.count]
		if !ok {
			break
		}
		delete(c.ahead, c.count)
		v.extend(c, e.opened, e.streamSeq, true)
	}
	if len(c.ahead) == 0 {
		c.ahead = nil // let the map's memory go
	}
}

// skipGap gives up on the lowest gap once too much waits behind it: the
// gap is reported for good and the chain resumes, unlinked, at the first
// receipt after it.
func (v *Verifier) skipGap(c *chain) {
	first := slices.Min(keys(c.ahead))
	c.problem(ProblemGap, 0, "sequences %d..%d never arrived while %d receipts waited behind them; resuming unlinked at %d", c.count, first-1, len(c.ahead), first)
	e := c.ahead[first]
	delete(c.ahead, first)
	c.known = 0 // the ids remembered no longer end at the head
	c.pending = slices.DeleteFunc(c.pending, func(cp *steward.SignedCheckpoint) bool { return cp.Count <= first })
	v.extend(c, e.opened, e.streamSeq, false)
	v.drain(c)
}

func (v *Verifier) applyCheckpoint(c *chain, p prepared) {
	cp, ss := p.cp, p.msg.StreamSeq
	if h := p.msg.Header.Get(HeaderSeq); h != "" && h != strconv.FormatUint(cp.Count, 10) {
		c.problem(ProblemHeader, ss, "%s header %q on a checkpoint of %d receipts", HeaderSeq, h, cp.Count)
	}
	if cp.Count <= c.count {
		head, ok := c.recall(cp.Count - 1)
		if !ok {
			return // older than anything remembered: nothing to check it against
		}
		v.matchCheckpoint(c, cp, head, ss)
		return
	}
	for _, q := range c.pending {
		if q.Count == cp.Count {
			if q.HeadID != cp.HeadID {
				c.problem(ProblemCheckpoint, ss, "two checkpoints of %d receipts: head %s and head %s", cp.Count, q.HeadID, cp.HeadID)
			}
			return
		}
	}
	c.pending = append(c.pending, cp)
	sort.Slice(c.pending, func(i, j int) bool { return c.pending[i].Count < c.pending[j].Count })
	if len(c.pending) > maxPendingCheckpoints {
		// Keep the newest: it says the most about what is missing.
		c.pending = c.pending[1:]
	}
}

// matchCheckpoint checks cp against the verified id at its head.
func (v *Verifier) matchCheckpoint(c *chain, cp *steward.SignedCheckpoint, head wire.ContentID, streamSeq uint64) {
	if head != cp.HeadID {
		c.problem(ProblemCheckpoint, streamSeq, "checkpoint of %d receipts names head %s, the verified chain has %s", cp.Count, cp.HeadID, head)
		return
	}
	c.checkpoint = max(c.checkpoint, cp.Count)
}

// remember records id as the verified id at seq, which is c.count.
func (c *chain) remember(seq uint64, id wire.ContentID, window int) {
	if len(c.ring) == 0 {
		c.ring = make([]wire.ContentID, min(16, window))
	}
	if c.known == len(c.ring) && len(c.ring) < window {
		grown := make([]wire.ContentID, min(2*len(c.ring), window))
		for s := seq - uint64(c.known); s < seq; s++ {
			grown[s%uint64(len(grown))] = c.ring[s%uint64(len(c.ring))]
		}
		c.ring = grown
	}
	c.ring[seq%uint64(len(c.ring))] = id
	c.known = min(c.known+1, len(c.ring))
}

// recall returns the verified id at seq if it is still remembered.
func (c *chain) recall(seq uint64) (wire.ContentID, bool) {
	if seq >= c.count || c.count-seq > uint64(c.known) {
		return wire.ContentID{}, false
	}
	return c.ring[seq%uint64(len(c.ring))], true
}

func keys[V any](m map[uint64]V) []uint64 {
	out := make([]uint64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Gap is a run of missing sequences, From..To inclusive.
type Gap struct {
	From, To uint64
}

// StewardReport is where one steward's chain stands.
type StewardReport struct {
	Steward string
	// Trusted says the steward is in the operator's list (or no list
	// was given).
	Trusted bool
	// Count is the number of receipts verified and linked: sequences
	// 0..Count-1. Head is the content id at Count-1.
	Count uint64
	Head  wire.ContentID
	// Duplicates is how many republished copies were recognised and
	// skipped.
	Duplicates uint64
	// Ahead is how many verified receipts wait beyond a gap.
	Ahead int
	// Checkpoint is the count of the newest signed checkpoint found to
	// match the verified chain.
	Checkpoint uint64
	// Gaps are the sequences missing below a receipt or a checkpoint that
	// arrived; they are reported until they arrive.
	Gaps []Gap
	// Problems are what is wrong, oldest first: an untrusted steward,
	// then what messages showed (the first few), then the gaps.
	Problems []Problem
	// ProblemCount counts every problem, including those not kept.
	ProblemCount int
	// Kinds counts every problem by kind, including those not kept.
	Kinds map[string]int
	// shown and shownN locate, in Problems, those that messages showed.
	shown, shownN int
}

// OK reports whether the steward's chain has no problem.
func (s StewardReport) OK() bool { return s.ProblemCount == 0 }

// First returns the steward's first problem that a message showed (a
// forgery, a fork, a replay), or, when no message showed one, its first
// problem (untrusted, a gap). The steward's standing is worked out each
// time and listed first in Problems; what a message showed says more.
func (s StewardReport) First() (Problem, bool) {
	if s.shown < len(s.Problems) && s.shownN > 0 {
		return s.Problems[s.shown], true
	}
	if len(s.Problems) == 0 {
		return Problem{}, false
	}
	return s.Problems[0], true
}

// Report is the verifier's view of the whole fleet.
type Report struct {
	// Stewards, ordered by id.
	Stewards []StewardReport
	// Fleet are problems that name no steward key.
	Fleet []Problem
	// Messages is how many messages were fed.
	Messages uint64
}

// OK reports whether nothing anywhere is wrong.
func (r Report) OK() bool { return r.ProblemCount() == 0 }

// ProblemCount counts the problems of every steward and of the fleet.
func (r Report) ProblemCount() int {
	n := len(r.Fleet)
	for _, s := range r.Stewards {
		n += s.ProblemCount
	}
	return n
}

// Kinds counts every problem of the fleet by kind.
func (r Report) Kinds() map[string]int {
	out := map[string]int{}
	for _, p := range r.Fleet {
		out[p.Kind]++
	}
	for _, s := range r.Stewards {
		for k, n := range s.Kinds {
			out[k] += n
		}
	}
	return out
}

// KindsString lists kinds and their counts, most frequent first (then by
// name): "2 forged, 1 gap".
func KindsString(kinds map[string]int) string {
	ks := make([]string, 0, len(kinds))
	for k, n := range kinds {
		if n > 0 {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool {
		if kinds[ks[i]] != kinds[ks[j]] {
			return kinds[ks[i]] > kinds[ks[j]]
		}
		return ks[i] < ks[j]
	})
	var b []byte
	for i, k := range ks {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, int64(kinds[k]), 10)
		b = append(b, ' ')
		b = append(b, k...)
	}
	return string(b)
}

// Steward returns the report of one steward.
func (r Report) Steward(id string) (StewardReport, bool) {
	i := sort.Search(len(r.Stewards), func(i int) bool { return r.Stewards[i].Steward >= id })
	if i < len(r.Stewards) && r.Stewards[i].Steward == id {
		return r.Stewards[i], true
	}
	return StewardReport{}, false
}

// Report says where every chain stands. Gaps and untrusted stewards are
// worked out afresh each time, so they are reported until resolved.
func (v *Verifier) Report() Report {
	v.mu.Lock()
	r := Report{Fleet: slices.Clone(v.fleet), Messages: v.messages}
	v.mu.Unlock()
	for _, pt := range v.parts {
		pt.mu.Lock()
		for _, c := range pt.chains {
			r.Stewards = append(r.Stewards, c.report())
		}
		pt.mu.Unlock()
	}
	sort.Slice(r.Stewards, func(i, j int) bool { return r.Stewards[i].Steward < r.Stewards[j].Steward })
	return r
}

func (c *chain) report() StewardReport {
	s := StewardReport{
		Steward: c.id, Trusted: c.trusted, Count: c.count, Head: c.head,
		Duplicates: c.dups, Ahead: len(c.ahead), Checkpoint: c.checkpoint,
		ProblemCount: c.nProblem,
	}
	s.Kinds = make(map[string]int, len(c.kinds)+2)
	for k, n := range c.kinds {
		s.Kinds[k] = n
	}
	if !c.trusted {
		s.Problems = append(s.Problems, Problem{Kind: ProblemUntrusted, Steward: c.id, Detail: "steward is not in the trusted list"})
		s.ProblemCount++
		s.Kinds[ProblemUntrusted]++
	}
	s.shown, s.shownN = len(s.Problems), len(c.problems)
	s.Problems = append(s.Problems, c.problems...)
	next := c.count
	seqs := keys(c.ahead)
	slices.Sort(seqs)
	for _, q := range seqs {
		if q > next {
			s.Gaps = append(s.Gaps, Gap{next, q - 1})
		}
		next = q + 1
	}
	if n := len(c.pending); n > 0 && c.pending[n-1].Count > next {
		// A checkpoint vouches for receipts that have not arrived.
		s.Gaps = append(s.Gaps, Gap{next, c.pending[n-1].Count - 1})
	}
	for _, g := range s.Gaps {
		d := fmt.Sprintf("sequences %d..%d missing", g.From, g.To)
		if g.From == g.To {
			d = fmt.Sprintf("sequence %d missing", g.From)
		}
		s.Problems = append(s.Problems, Problem{Kind: ProblemGap, Steward: c.id, Detail: d})
		s.ProblemCount++
		s.Kinds[ProblemGap]++
	}
	return s
}

// errState is wrapped by the state loading errors.
var errState = errors.New("fleet verifier state")
