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
}

// Sealed is a receipt that is signed and durable in the log.
type Sealed struct {
	Receipt  *Receipt
	Envelope []byte
	ID       wire.ContentID
}

// Steward seals receipts into its log.
type Steward struct {
	key   *Key
	log   *Log
	rand  io.Reader
	clock func() time.Time
}

// Options tune a Steward. Zero values mean crypto/rand and time.Now.
type Options struct {
	Rand  io.Reader
	Clock func() time.Time
}

// New returns a steward signing with key into log.
func New(key *Key, log *Log, opt Options) *Steward {
	s := &Steward{key: key, log: log, rand: opt.Rand, clock: opt.Clock}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s
}

// Public returns the steward's public key: its identity, the COSE kid.
func (s *Steward) Public() ed25519.PublicKey { return s.key.Public() }

// Build makes the receipt for d at the given chain position, without
// sealing it. The Energy coupling and every field rule are checked here, so
// a receipt that breaks them never reaches a signature.
func (s *Steward) Build(d Draft, seq uint64, prev *wire.ContentID, nonce []byte, now time.Time) (*Receipt, error) {
	if err := d.Energy.Validate(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := d.Outcome.Validate(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if d.Request.IsZero() {
		return nil, fmt.Errorf("seal: %w: request_id is missing", ErrField)
	}
	if len(nonce) != NonceSize {
		return nil, fmt.Errorf("seal: nonce must be %d bytes", NonceSize)
	}
	meter := d.Metering.Meter
	if meter == "" {
		return nil, fmt.Errorf("seal: %w: metering does not name its meter", ErrField)
	}
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
		Meter:            &meter,
		WindowNs:         u64p(d.Metering.WindowNs),
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
	if m, ok := d.Energy.MeasuredUJ(); ok {
		if d.Energy.Provenance() != wire.HwShunt {
			// The record allows it, but §6.1 puts measured_uj on the wire iff
			// HwShunt; dropping it silently would change the charged figure.
			return nil, fmt.Errorf("seal: %w: a %v energy with measured_uj cannot be sealed; carry the figure as estimated_uj", ErrField, d.Energy.Provenance())
		}
		r.MeasuredUJ = &m
	}
	if d.Outcome.TokensAccepted > 0 {
		per := d.Energy.UJ() / uint64(d.Outcome.TokensAccepted)
		r.UJPerAcceptedToken = &per
	}
	if d.Energy.Provenance() != wire.Estimator {
		errUJ, samples, gap := d.Metering.ErrorUJ, d.Metering.Samples, d.Metering.MaxGapNs
		r.ErrorUJ, r.Samples, r.MaxGapNs = &errUJ, &samples, &gap
	}
	if prev != nil {
		p := prev.String()
		r.Prev = &p
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return r, nil
}

// Seal builds, signs and appends the receipt for d, returning only once it
// is durable. Nothing is appended if any check fails.
func (s *Steward) Seal(ctx context.Context, d Draft) (*Sealed, error) {
	nonce := make([]byte, NonceSize)
	if _, err := io.ReadFull(s.rand, nonce); err != nil {
		return nil, fmt.Errorf("seal: nonce: %w", err)
	}
	now := s.clock()
	var out Sealed
	_, id, err := s.log.appendAs(ctx, s.key.Public(), func(seq uint64, prev *wire.ContentID) ([]byte, error) {
		r, err := s.Build(d, seq, prev, nonce, now)
		if err != nil {
			return nil, err
		}
		core, err := r.EncodeCore()
		if err != nil {
			return nil, err
		}
		env, err := Sign1(s.key, core)
		if err != nil {
			return nil, err
		}
		out.Receipt, out.Envelope = r, env
		return env, nil
	})
	if err != nil {
		return nil, err
	}
	out.ID = id
	return &out, nil
}
