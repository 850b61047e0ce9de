package steward

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"meshd/wire"
)

// Draft is everything the steward needs from one finished serve.
type Draft struct {
	Request    wire.ContentID
	Grant      *wire.ContentID // nil when ungranted
	GrantHold  *uint64         // the ledger hold this serve settles, if granted
	GrantDebit *uint64         // µJ debited from the grant, at most the charged figure
	Backend    string
	Recipe     string
	Route      string
	Outcome    wire.ServeOutcome
	Floor      wire.Fidelity
	Served     wire.Fidelity // the backend's fidelity, to judge fidelity_met
	Energy     wire.Energy
	Metering   wire.Metering
	// Upstream names the receipt another steward sealed for this serve,
	// when it was forwarded to another node; nil otherwise.
	Upstream *Upstream
	// Candidates are the backends the router weighed, in the order
	// weighed, and CeilingUJ the request's joule_ceiling_uj they were
	// judged against; sealed as x_route_candidates and x_ceiling_uj when
	// Candidates is non-nil.
	Candidates []Candidate
	CeilingUJ  uint64
	// Record is x_record: "" for a serve, else the record's kind
	// (PROFILE §22; RecordDraft builds them). Run is x_run: the run-open
	// record's sequence of the run the serve or record belongs to.
	Record string
	Run    *uint64
	// PinPrev is x_pin_prev: on a corpus-pin record, the sequence of the
	// corpus's previous corpus-pin record (CorpusPinDraft builds them).
	PinPrev *uint64
	// IdleRecord is x_idle_record: the sequence of the idle record whose
	// power Metering.IdleUW is. It is sealed only beside x_idle_uw.
	IdleRecord *uint64
	// FirstTokenNs is x_first_token_ns: ns from the serve's start to the
	// engine's first output piece; nil when the engine did not emit its
	// output piece by piece.
	FirstTokenNs *uint64
}

// Upstream is the receipt a forwarded serve was sealed under upstream.
type Upstream struct {
	Receipt wire.ContentID
	Steward ed25519.PublicKey
}

// Sealed is a receipt that is signed and durable in the log.
type Sealed struct {
	Receipt  *Receipt
	Envelope []byte
	ID       wire.ContentID
	// Took is where sealing it took its time.
	Took SealTimes
}

// SealTimes is where a seal's time went, on the wall clock: Build, the
// receipt assembled and its core encoded; Sign, its signature; Write, the
// frame's write; Fsync, making it durable (its fsync, or the wait for the
// group commit that covered it).
type SealTimes struct {
	Build, Sign, Write, Fsync time.Duration
}

// Steward seals receipts into its log.
type Steward struct {
	key   *Key
	log   *Log
	rand  io.Reader
	clock func() time.Time
	admit func() error
}

// Options tune a Steward. Zero values mean crypto/rand and time.Now.
type Options struct {
	Rand  io.Reader
	Clock func() time.Time
	// Admit, if set, is asked before every seal; its error refuses the
	// seal with nothing appended (a disk budget: Budget.Admit).
	Admit func() error
}

// New returns a steward signing with key into log.
func New(key *Key, log *Log, opt Options) *Steward {
	s := &Steward{key: key, log: log, rand: opt.Rand, clock: opt.Clock, admit: opt.Admit}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s
}

// Storage returns nil while the steward's log takes writes and its
// Admit (a disk budget) lets another receipt in, else why not (wrapping
// ErrStorage), after trying to heal the log: a serve asks before it does
// any work that could not be sealed.
func (s *Steward) Storage() error {
	if s.log == nil {
		return nil // a steward that builds but never seals
	}
	if err := s.log.Storage(); err != nil {
		return err
	}
	if s.admit != nil {
		return s.admit()
	}
	return nil
}

// Public returns the steward's public key: its identity, the COSE kid.
func (s *Steward) Public() ed25519.PublicKey { return s.key.Public() }

// Build makes the receipt for d at the given chain position, without
// sealing it. The Energy coupling, every field rule and the evidence rules
// are checked here (Receipt.Check), so a receipt whose provenance does not
// follow from its metering evidence never reaches a signature.
func (s *Steward) Build(d Draft, seq uint64, prev *wire.ContentID, nonce []byte, now time.Time) (*Receipt, error) {
	r, err := s.assemble(d, seq, prev, nonce, now)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return r, nil
}

// assemble maps d onto the receipt's fields, refusing only what the
// receipt cannot represent; the rules are Check's, so that sealing and
// verifying judge by the very same code.
func (s *Steward) assemble(d Draft, seq uint64, prev *wire.ContentID, nonce []byte, now time.Time) (*Receipt, error) {
	if err := d.Energy.Validate(); err != nil {
		return nil, refuse(RefusedCoupling, err)
	}
	if err := d.Outcome.Validate(); err != nil {
		return nil, err
	}
	if d.Request.IsZero() {
		return nil, fmt.Errorf("%w: request_id is missing", ErrField)
	}
	if len(nonce) != NonceSize {
		return nil, fmt.Errorf("nonce must be %d bytes", NonceSize)
	}
	m := d.Metering
	r := &Receipt{
		MeshReceipt:      Profile,
		RequestID:        d.Request.String(),
		Backend:          d.Backend,
		Recipe:           d.Recipe,
		Route:            d.Route,
		TokensIn:         d.Outcome.TokensIn,
		TokensOut:        d.Outcome.TokensOut,
		TokensAccepted:   d.Outcome.TokensAccepted,
		CacheHitTokens:   d.Outcome.CacheHitTokens,
		SpecProposed:     d.Outcome.SpecProposed,
		SpecAccepted:     d.Outcome.SpecAccepted,
		FidelityFloor:    uint8(d.Floor),
		EstimatedUJ:      d.Energy.EstimatedUJ(),
		EnergyProvenance: d.Energy.Provenance().String(),
		Sequence:         seq,
		Nonce:            hex.EncodeToString(nonce),
		Steward:          s.key.ID(),
		Meter:            &m.Meter,
		MeterKind:        &m.Kind,
		WindowNs:         u64p(m.WindowNs),
		ServeNs:          u64p(m.ServeNs),
		SealedUnixMs:     u64p(uint64(now.UnixMilli())),
		GrantHold:        d.GrantHold,
		GrantDebitUJ:     d.GrantDebit,
	}
	if d.Served >= d.Floor {
		r.FidelityMet = 1
	}
	if d.Grant != nil {
		g := d.Grant.String()
		r.GrantID = &g
	}
	if d.Record != "" {
		k := d.Record
		r.Record = &k
	}
	if d.Run != nil {
		r.Run = u64p(*d.Run)
	}
	if d.PinPrev != nil {
		r.PinPrev = u64p(*d.PinPrev)
	}
	if d.FirstTokenNs != nil {
		r.FirstTokenNs = u64p(*d.FirstTokenNs)
	}
	if d.Upstream != nil {
		id, st := d.Upstream.Receipt.String(), hex.EncodeToString(d.Upstream.Steward)
		r.UpstreamReceipt, r.UpstreamSteward = &id, &st
	}
	if v, ok := d.Energy.MeasuredUJ(); ok {
		if d.Energy.Provenance() != wire.HwShunt {
			// The record allows it, but §6.1 puts measured_uj on the wire iff
			// HwShunt; dropping it silently would change the charged figure.
			return nil, fmt.Errorf("%w: a %v energy with measured_uj cannot be sealed; carry the figure as estimated_uj", ErrField, d.Energy.Provenance())
		}
		r.MeasuredUJ = &v
	}
	if d.Outcome.TokensAccepted > 0 {
		per := d.Energy.UJ() / uint64(d.Outcome.TokensAccepted)
		r.UJPerAcceptedToken = &per
	}
	// An Estimator figure has no meter behind it, so whatever readings the
	// draft carries are not evidence for it (evidence rule 2).
	if d.Energy.Provenance() != wire.Estimator {
		r.ErrorUJ, r.Samples, r.MaxGapNs = u64p(m.ErrorUJ), u64p(m.Samples), u64p(m.MaxGapNs)
		r.CoveredPPM, r.PeriodNs, r.AccuracyPPM, r.Shared = u64p(m.CoveredPPM), u64p(m.PeriodNs), u64p(m.AccuracyPPM), u64p(m.Shared)
		if m.IdleUW != nil {
			r.IdleUW = u64p(*m.IdleUW)
			if d.IdleRecord != nil {
				r.IdleRecord = u64p(*d.IdleRecord)
			}
		}
		if m.FullScaleUW != 0 {
			r.FullScaleUW = u64p(m.FullScaleUW)
		}
		if m.BusBand != nil {
			r.BusLoMV, r.BusHiMV = u64p(m.BusBand.LoMV), u64p(m.BusBand.HiMV)
		}
		if m.StatUJ != nil {
			r.StatUJ = u64p(*m.StatUJ)
		}
	}
	if d.Candidates != nil {
		cs, err := FormatCandidates(d.Candidates)
		if err != nil {
			return nil, refuse(RefusedRoute, fmt.Errorf("%w: %v", ErrField, err))
		}
		r.RouteCandidates, r.CeilingUJ = &cs, u64p(d.CeilingUJ)
	}
	if prev != nil {
		p := prev.String()
		r.Prev = &p
	}
	return r, nil
}

// Seal builds, signs and appends the receipt for d, returning only once it
// is durable. Nothing is appended if any check fails.
func (s *Steward) Seal(ctx context.Context, d Draft) (*Sealed, error) {
	if s.admit != nil {
		if err := s.admit(); err != nil {
			return nil, fmt.Errorf("seal: %w", err)
		}
	}
	nonce := make([]byte, NonceSize)
	if _, err := io.ReadFull(s.rand, nonce); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	now := s.clock()
	var out Sealed
	_, id, took, err := s.log.appendAs(ctx, s.key.Public(), func(seq uint64, prev *wire.ContentID) ([]byte, error) {
		t0 := time.Now()
		r, err := s.Build(d, seq, prev, nonce, now)
		if err != nil {
			return nil, err
		}
		core, err := r.EncodeCore()
		if err != nil {
			return nil, err
		}
		t1 := time.Now()
		env, err := Sign1(s.key, core)
		if err != nil {
			return nil, err
		}
		out.Receipt, out.Envelope = r, env
		out.Took.Build, out.Took.Sign = t1.Sub(t0), time.Since(t1)
		return env, nil
	})
	if err != nil {
		return nil, err
	}
	out.ID = id
	out.Took.Write, out.Took.Fsync = took.Write, took.Fsync
	return &out, nil
}
