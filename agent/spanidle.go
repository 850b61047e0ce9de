package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"meshd/shunt"
	"meshd/steward"
	"meshd/wire"
)

// A serve's x_idle_uw is the power of one quiet stretch its span measured
// (shunt.Span.Idle). Before the first serve that subtracts a stretch is
// sealed, the agent seals that stretch as an idle record whose document
// says the span took it (source "span"), and every serve subtracting the
// stretch names the record in x_idle_record: the idle figure is evidence
// any verifier can check against the chain, not a number taken on trust
// (PROFILE §22). One record per stretch: a serve that finds its stretch
// already sealed names the same record, so an idle span does not flood
// the chain.

// idleWindow is a window whose reading may subtract a span's quiet
// stretch: *shunt.SpanWindow.
type idleWindow interface {
	IdleStretch() (shunt.IdleStretch, bool)
	Span() *shunt.Span
}

// spanIdle is the quiet stretch a serve's reading subtracts, and the span
// it belongs to; span is nil when the reading subtracts none.
type spanIdle struct {
	span    *shunt.Span
	stretch shunt.IdleStretch
}

// idleSeal is an idle record sealed for a stretch.
type idleSeal struct {
	seq     uint64
	powerUW uint64
}

// spanIdles remembers, per span, the records sealed for its stretches.
// The lock is held while a record is sealed, so two serves subtracting a
// new stretch at once seal it once.
type spanIdles struct {
	mu     sync.Mutex
	sealed map[*shunt.Span]map[uint64]idleSeal
}

// idleRecord returns the sequence of the idle record of the stretch d's
// reading subtracts, sealing it first if no record of it was sealed yet.
// When there is no stretch, or the record cannot be sealed, or its power
// is not d's x_idle_uw, x_idle_uw is taken off d: an idle figure is sealed
// only with the record it is the power of. The new record, if one was
// sealed, is returned too.
func (a *Agent) idleRecord(ctx context.Context, d *steward.Draft, idle spanIdle) *SealedRecord {
	if d.Metering.IdleUW == nil {
		return nil
	}
	if idle.span == nil {
		d.Metering.IdleUW = nil
		return nil
	}
	si := &a.spanIdle
	si.mu.Lock()
	defer si.mu.Unlock()
	if si.sealed == nil {
		si.sealed = map[*shunt.Span]map[uint64]idleSeal{}
	}
	byID := si.sealed[idle.span]
	if byID == nil {
		byID = map[uint64]idleSeal{}
		si.sealed[idle.span] = byID
	}
	st := idle.stretch
	// A stretch older than the oldest the span keeps is never subtracted
	// again.
	for id := range byID {
		if id < st.Oldest {
			delete(byID, id)
		}
	}
	var rec *SealedRecord
	got, ok := byID[st.ID]
	if !ok {
		var err error
		rec, err = a.sealSpanIdle(ctx, d.Backend, idle.span.Name(), st)
		if err != nil {
			a.log.Warn("the quiet stretch could not be sealed as an idle record; the serve subtracts no idle power", "backend", d.Backend, "err", err)
			d.Metering.IdleUW = nil
			return nil
		}
		p, err := steward.IdlePowerUW(rec.Sealed.Receipt)
		if err != nil {
			a.log.Warn("sealed idle record has no power", "backend", d.Backend, "err", err)
			d.Metering.IdleUW = nil
			return rec
		}
		got = idleSeal{seq: rec.Sealed.Receipt.Sequence, powerUW: p}
		byID[st.ID] = got
	}
	if got.powerUW != *d.Metering.IdleUW {
		a.log.Warn("idle power differs from its record's; the serve subtracts none", "backend", d.Backend,
			"idle_uw", *d.Metering.IdleUW, "record", got.seq, "record_uw", got.powerUW)
		d.Metering.IdleUW = nil
		return rec
	}
	seq := got.seq
	d.IdleRecord = &seq
	return rec
}

// sealSpanIdle seals stretch st of the span named meter as an idle record
// of backend, outside any run: no client asked for it.
func (a *Agent) sealSpanIdle(ctx context.Context, backend, meter string, st shunt.IdleStretch) (*SealedRecord, error) {
	ms := max(st.To.Sub(st.From).Milliseconds(), 0)
	doc := steward.IdleDoc{Backend: backend, DurationMs: uint64(ms), Source: steward.IdleSourceSpan}.Encode()
	route := fmt.Sprintf("idle: %d ms on %s (span)", ms, meter)
	sealed, err := a.sealIdle(ctx, doc, nil, backend, route, st.Reading)
	if err != nil {
		return nil, err
	}
	return &SealedRecord{Sealed: sealed, Document: doc}, nil
}

// sealIdle seals reading rd of an idle window as an idle record: HwShunt
// or ModelBased as the reading is, x_idle_uw never (the record is the
// idle measurement). Evidence the steward refuses for a hardware claim is
// sealed as the model it still supports, and said so.
func (a *Agent) sealIdle(ctx context.Context, doc []byte, run *uint64, backend, route string, rd wire.Reading) (*steward.Sealed, error) {
	m := rd.Metering
	m.IdleUW = nil
	energy := wire.Modelled(nil, rd.EnergyUJ)
	if rd.Provenance == wire.HwShunt {
		energy = wire.Measured(rd.EnergyUJ, 0)
	}
	sealed, err := a.steward.Seal(ctx, steward.RecordDraft(steward.RecordIdle, doc, run, backend, steward.IdleRecipe, route, energy, m))
	if err != nil && errors.Is(err, steward.ErrField) && rd.Provenance == wire.HwShunt {
		a.log.Warn("idle evidence refused for HwShunt; claiming ModelBased", "backend", backend, "err", err)
		energy = wire.Modelled(nil, rd.EnergyUJ)
		sealed, err = a.steward.Seal(ctx, steward.RecordDraft(steward.RecordIdle, doc, run, backend, steward.IdleRecipe, route, energy, m))
	}
	return sealed, err
}
