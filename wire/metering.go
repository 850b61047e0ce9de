package wire

import "math/bits"

// Meter kinds as sealed in x_meter_kind. A kind states what a meter's
// readings can prove; only the first two can ever support HwShunt.
const (
	KindADC       = "adc"       // chained hardware-averaged conversions
	KindCounter   = "counter"   // a hardware energy counter with a datasheet accuracy
	KindPoint     = "point"     // instantaneous or unsynchronised readings
	KindModel     = "model"     // a vendor's modelled energy (RAPL, NVML)
	KindEstimator = "estimator" // no meter: the backend's per-token model
)

// HardwareKind reports whether a meter of kind k can support HwShunt.
func HardwareKind(k string) bool { return k == KindADC || k == KindCounter }

// MeterKindValid reports whether k is one of the kinds above.
func MeterKindValid(k string) bool {
	switch k {
	case KindADC, KindCounter, KindPoint, KindModel, KindEstimator:
		return true
	}
	return false
}

// FullPPM is complete coverage in x_covered_ppm.
const FullPPM = 1_000_000

// MaxHwAccuracyPPM is the loosest accuracy a meter may declare and still
// claim HwShunt: 10 % of the window's energy.
const MaxHwAccuracyPPM = 100_000

// AccuracyLimitUJ is the largest error bound a meter declaring
// accuracyPPM may state for a measured figure: ⌈measuredUJ × accuracyPPM
// / 10⁶⌉, so that errorUJ × 10⁶ ≤ measuredUJ × accuracyPPM + 999 999
// holds exactly when errorUJ ≤ the limit (PROFILE.md §6, evidence rule
// 4). The product is taken in 128 bits because both factors may be chosen
// by whoever built the receipt; ok is false when the limit exceeds
// 2⁶⁴−1, which then no bound can break.
func AccuracyLimitUJ(measuredUJ, accuracyPPM uint64) (limit uint64, ok bool) {
	hi, lo := bits.Mul64(measuredUJ, accuracyPPM)
	lo, carry := bits.Add64(lo, FullPPM-1, 0)
	hi += carry // cannot wrap: hi ≤ 2⁶⁴−2 for any product of two uint64
	if hi >= FullPPM {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, FullPPM)
	return q, true
}

// WithinAccuracy reports whether an error bound of errorUJ meets the
// accuracy a meter declares for measuredUJ, as AccuracyLimitUJ defines it:
// the rule every HwShunt figure must meet.
func WithinAccuracy(errorUJ, measuredUJ, accuracyPPM uint64) bool {
	limit, ok := AccuracyLimitUJ(measuredUJ, accuracyPPM)
	return !ok || errorUJ <= limit
}

// Metering is the evidence behind an energy figure, so that an auditor —
// and the steward, at seal time — can judge the figure from the receipt
// alone. It is sealed as extension fields (PROFILE.md §6, §13).
type Metering struct {
	// Meter names the meter, e.g. "ina226@i2c-1:0x40",
	// "span(ina226@i2c-1:0x40+rapl:package-0)", or "estimator".
	Meter string
	// Kind is the meter's kind (Kind* above); a span carries its weakest
	// member's kind.
	Kind string
	// WindowNs is the gross interval integrated: it contains the serve
	// interval, stretched out to whole conversions and by the readings'
	// timestamp uncertainty. For an estimator it is the serve interval.
	WindowNs uint64
	// ServeNs is the serve interval itself, from just before the engine
	// was called to just after it returned.
	ServeNs uint64
	// ErrorUJ is the bound, in µJ, on |charged figure − true energy over
	// the gross window|.
	ErrorUJ uint64
	// Samples is how many valid readings the integral used.
	Samples uint64
	// MaxGapNs is the largest distance between the ends of consecutive
	// readings used, or from a window edge to its nearest reading where
	// the edge is not inside one.
	MaxGapNs uint64
	// CoveredPPM is the fraction of the gross window, in parts per
	// million, that lay inside readings which chain one to the next: the
	// time the hardware is proven to have observed.
	CoveredPPM uint64
	// PeriodNs is the meter's longest conversion period (its nominal period
	// stretched by the chip's clock tolerance); for a span, the largest of
	// its members'.
	PeriodNs uint64
	// AccuracyPPM is the accuracy the meter declares for a hardware claim;
	// for a span, the loosest of its members'.
	AccuracyPPM uint64
	// Shared is the largest number of serves that were metered on the same
	// span at once during the window; above 1 the figure is apportioned
	// and can only be ModelBased. 0 and 1 both mean the serve was alone.
	Shared uint64
	// StatUJ is a statistical uncertainty, never a bound: the half-width
	// of a 95 % interval of the figure from the sample variance of the
	// averaged readings the window used (PROFILE.md §6, x_stat_uj). Only
	// ModelBased figures of point meters carry it, beside ErrorUJ and
	// never mixed with it; nil where none was computed.
	StatUJ *uint64
	// IdleUW is the span's idle power measured in quiet periods before the
	// window (µW), when one was measured; net energy is the figure minus
	// IdleUW × WindowNs.
	IdleUW *uint64
	// FullScaleUW is the largest power the meter can register, µW
	// (rounded up): the configured current full scale at the top of the
	// bus range; for a span, the sum of its members'. 0 means unstated.
	// No window can hold more energy than FullScaleUW × WindowNs plus
	// the error bound.
	FullScaleUW uint64
	// BusBand is set when the power was the measured current times a bus
	// voltage the meter assumed rather than measured (an INA226 or INA219
	// in shunt-only mode): the figure and its bound hold only if the rail
	// stayed within the band, which nothing observed, so such a figure is
	// never HwShunt. For a span, the union of its members' bands.
	BusBand *BusBand
}

// BusBand is the bus voltage band a meter assumed, in mV: [LoMV, HiMV].
type BusBand struct {
	LoMV, HiMV uint64
}
