package steward

import (
	"fmt"
	"math/bits"
	"slices"
)

// A serve's x_idle_uw is the power of an idle record earlier in the same
// chain, named by x_idle_record (PROFILE §22): the span seals the quiet
// stretch it subtracts before the first serve that uses it. The receipt
// alone can only say that the record is earlier (checkIdleRecord); that
// it is an idle record of the same meter whose power is x_idle_uw is a
// property of the chain, checked wherever chains are verified (the log's
// walk, CheckIdleLinks for a segment, the conformance vectors).

// IdleSourceSpan is an idle document's source when the span measured the
// quiet stretch before a serve, rather than a client asking for a window.
const IdleSourceSpan = "span"

// checkIdleRecord holds x_idle_record to what the receipt itself shows:
// it travels with the x_idle_uw it backs and names an earlier receipt.
func (r *Receipt) checkIdleRecord() error {
	if r.IdleRecord == nil {
		return nil
	}
	if r.IdleUW == nil {
		return fieldErr(RefusedMissingField, "x_idle_record %d without x_idle_uw: it names the idle record x_idle_uw is the power of", *r.IdleRecord)
	}
	if *r.IdleRecord >= r.Sequence {
		return recordErr("x_idle_record %d must name an earlier receipt than sequence %d", *r.IdleRecord, r.Sequence)
	}
	return nil
}

// IdlePowerUW is the charged power of an idle record, µW:
// ⌊charged × 10⁹ ÷ x_window_ns⌋, exactly (128-bit product), where charged
// is measured_uj for HwShunt, else estimated_uj. It fails for a receipt
// that is not an idle record with a window.
func IdlePowerUW(r *Receipt) (uint64, error) {
	if r.Record == nil || *r.Record != RecordIdle {
		return 0, fmt.Errorf("receipt %d is not an idle record", r.Sequence)
	}
	if r.WindowNs == nil || *r.WindowNs == 0 {
		return 0, fmt.Errorf("idle record %d has no window", r.Sequence)
	}
	charged := r.EstimatedUJ
	if r.MeasuredUJ != nil {
		charged = *r.MeasuredUJ
	}
	hi, lo := bits.Mul64(charged, 1_000_000_000)
	if hi >= *r.WindowNs {
		return 0, fmt.Errorf("idle record %d: its power does not fit 64 bits", r.Sequence)
	}
	q, _ := bits.Div64(hi, lo, *r.WindowNs)
	return q, nil
}

// idleEntry is what a link needs of an idle record.
type idleEntry struct {
	meter   string
	powerUW uint64
	err     error // why the record has no power
}

// IdleLinks checks, receipt by receipt in chain order, that every
// x_idle_record names an idle record of the same meter (x_meter equal)
// whose power (IdlePowerUW) is x_idle_uw. A record named before the first
// receipt it was given (a walk that starts at a checkpoint, a segment) is
// not judged: it cannot be seen. The zero value is ready to use.
type IdleLinks struct {
	started bool
	first   uint64
	idle    map[uint64]idleEntry
}

// Add judges r's link, if it has one, then remembers r if it is an idle
// record. Receipts must come in ascending sequence. A broken link is
// refused with the reason record (the sequence named is not an idle
// record of this meter) or evidence (x_idle_uw is not its power).
func (l *IdleLinks) Add(r *Receipt) error {
	if !l.started {
		l.started, l.first = true, r.Sequence
	}
	if err := l.judge(r, func(seq uint64) bool { return seq >= l.first }); err != nil {
		return err
	}
	if r.Record != nil && *r.Record == RecordIdle {
		if l.idle == nil {
			l.idle = map[uint64]idleEntry{}
		}
		p, err := IdlePowerUW(r)
		l.idle[r.Sequence] = idleEntry{meter: r.MeterName(), powerUW: p, err: err}
	}
	return nil
}

// judge checks r's link against the idle records remembered; seen says
// whether the receipt at a sequence was given (so its absence from the
// idle records means it is not one).
func (l *IdleLinks) judge(r *Receipt, seen func(uint64) bool) error {
	if r.IdleRecord == nil || r.IdleUW == nil {
		return nil
	}
	at := *r.IdleRecord
	e, ok := l.idle[at]
	switch {
	case !ok && !seen(at):
		return nil
	case !ok:
		return recordErr("x_idle_record of sequence %d names sequence %d, which is not an idle record", r.Sequence, at)
	case e.meter != r.MeterName():
		return recordErr("x_idle_record of sequence %d names idle record %d of meter %q, the serve's meter is %q", r.Sequence, at, e.meter, r.MeterName())
	case e.err != nil:
		return recordErr("x_idle_record of sequence %d: %v", r.Sequence, e.err)
	case e.powerUW != *r.IdleUW:
		return fieldErr(RefusedEvidence, "x_idle_uw %d of sequence %d is not the power of idle record %d (%d µW = ⌊charged × 10⁹ ÷ x_window_ns⌋)",
			*r.IdleUW, r.Sequence, at, e.powerUW)
	}
	return nil
}

// CheckIdleLinks judges every x_idle_record in a set of receipts by
// sequence (a report's chain segment): each names an idle record of the
// same meter whose power is x_idle_uw. A record named before the lowest
// sequence given is not judged; one within the set's range but absent
// from it is refused, since a contiguous segment would hold it.
func CheckIdleLinks(bySeq map[uint64]*Receipt) error {
	seqs := make([]uint64, 0, len(bySeq))
	for s := range bySeq {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	var l IdleLinks
	for _, s := range seqs {
		r := bySeq[s]
		if r.IdleRecord != nil && r.IdleUW != nil && len(seqs) > 0 && *r.IdleRecord >= seqs[0] {
			if _, ok := bySeq[*r.IdleRecord]; !ok {
				return recordErr("x_idle_record of sequence %d names sequence %d, which is not in the segment", s, *r.IdleRecord)
			}
		}
		if err := l.Add(r); err != nil {
			return err
		}
	}
	return nil
}
