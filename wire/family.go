package wire

import (
	"math/bits"
	"strings"
)

// MeterFamily is what the drivers meshd ships guarantee about every meter
// whose name they form the same way, so that a verifier can judge a
// receipt's evidence against the hardware it names (PROFILE.md §6,
// evidence rules 5–10). A meter meshd does not know has no family: only
// the rules that hold for any meter apply to it.
type MeterFamily struct {
	// Prefix starts the name of every meter of the family, as the driver
	// forms it: "ina226@i2c-1:0x40", "rapl:package-0", "hwmon:hwmon2/…".
	Prefix string
	// Kinds are the x_meter_kind values a meter of the family can have,
	// strongest first; most families have one (hwmon rails are counters
	// where the chip exposes energy*_input, point meters otherwise; NVML
	// likewise).
	Kinds []string
	// MinPeriodNs and MaxPeriodNs bound the x_period_ns the driver can
	// declare: its longest conversion or read period, stretched by the
	// clock tolerance, over every setting the driver accepts.
	MinPeriodNs, MaxPeriodNs uint64
	// ShortestNs is the shortest time one reading can span, or the
	// shortest spacing of two readings: no window holds more than
	// window ÷ ShortestNs + 2 of them (one cut by each edge).
	ShortestNs uint64
	// ShortestPPM is the shortest reading as parts per million of the
	// declared x_period_ns: a conversion is never shorter than this
	// fraction of the longest one the meter declares (INA: the chip's
	// clock runs within ±10 %, so 9/11).
	ShortestPPM uint64
}

// GenericShortestPPM is ShortestPPM for a meter without a known family: a
// reading lasts at least half the longest period the meter declares.
const GenericShortestPPM = 500_000

// inaShortestPPM is 9/11 rounded down: a conversion lasts at least
// P − P/10 of a nominal period P, and the longest period declared is
// P + P/10.
const inaShortestPPM = 818_181

// Periods of the INA drivers, ns (drivers/ina226, drivers/ina219,
// drivers/internal/inareg): nominal conversions of 140 µs (AVG 1, one
// 140 µs shunt conversion, shunt-only) up to 1 024 × (8.244 + 8.244) ms on
// an INA226, 84 µs up to 68.1 + 68.1 ms on an INA219; the declared period
// is the nominal one plus 10 % and the shortest conversion the nominal
// minus 10 %.
const (
	ina226MinPeriodNs = 140_000 + 14_000
	ina226MaxPeriodNs = 1024*16_488_000 + 1024*16_488_000/10
	ina226ShortestNs  = 140_000 - 14_000
	ina219MinPeriodNs = 84_000 + 8_400
	ina219MaxPeriodNs = 136_200_000 + 13_620_000
	ina219ShortestNs  = 84_000 - 8_400
)

// Periods of the polled meters, ns: none reads faster than RAPL's 1 ms
// counter update, NVML's 50 ms floor, hwmon's 1 ms update_interval unit,
// and none declares a period beyond an hour.
const (
	msNs   = 1_000_000
	hourNs = 3_600_000_000_000
)

var meterFamilies = []MeterFamily{
	{Prefix: "ina226@", Kinds: []string{KindADC}, MinPeriodNs: ina226MinPeriodNs, MaxPeriodNs: ina226MaxPeriodNs,
		ShortestNs: ina226ShortestNs, ShortestPPM: inaShortestPPM},
	{Prefix: "ina219@", Kinds: []string{KindADC}, MinPeriodNs: ina219MinPeriodNs, MaxPeriodNs: ina219MaxPeriodNs,
		ShortestNs: ina219ShortestNs, ShortestPPM: inaShortestPPM},
	// A counter rail declares pace + one update_interval, a reading spans
	// at least the pace: half the declared period at worst.
	{Prefix: "hwmon:", Kinds: []string{KindCounter, KindPoint}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	{Prefix: "rapl:", Kinds: []string{KindModel}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	// NVML is a model where the GPU has an energy counter, point
	// readings of its power otherwise.
	{Prefix: "nvml:", Kinds: []string{KindModel, KindPoint}, MinPeriodNs: 50 * msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	{Prefix: "um24c@", Kinds: []string{KindPoint}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	{Prefix: "um25c@", Kinds: []string{KindPoint}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	{Prefix: "um34c@", Kinds: []string{KindPoint}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
	{Prefix: "line@", Kinds: []string{KindPoint}, MinPeriodNs: msNs, MaxPeriodNs: hourNs,
		ShortestNs: msNs, ShortestPPM: GenericShortestPPM},
}

// MeterFamilies returns the families meshd's drivers define (a copy).
func MeterFamilies() []MeterFamily {
	out := make([]MeterFamily, len(meterFamilies))
	copy(out, meterFamilies)
	return out
}

// FamilyOf returns the family of the single meter named name, if meshd
// knows it.
func FamilyOf(name string) (MeterFamily, bool) {
	for _, f := range meterFamilies {
		if strings.HasPrefix(name, f.Prefix) && len(name) > len(f.Prefix) {
			return f, true
		}
	}
	return MeterFamily{}, false
}

// SpanMembers splits a span's name "span(a+b+…)" into the names of the
// members its figure adds (a breakdown after "; inside: " is not one);
// a name that is not a span is its own single member. ok is false for a
// malformed span (an empty member).
func SpanMembers(name string) (members []string, ok bool) {
	inner, isSpan := strings.CutPrefix(name, "span(")
	if !isSpan {
		return []string{name}, true
	}
	inner, closed := strings.CutSuffix(inner, ")")
	if !closed {
		return nil, false
	}
	// "span(a+b; inside: c)": the meters after "inside:" were read as a
	// breakdown of the others and are not in the figure (PROFILE §13).
	if i := strings.Index(inner, "; inside: "); i >= 0 {
		inner = inner[:i]
	}
	members = strings.Split(inner, "+")
	for _, m := range members {
		if m == "" {
			return nil, false
		}
	}
	return members, true
}

// KindRank orders meter kinds from the strongest evidence (adc, 0) to the
// weakest (estimator); an unknown kind ranks below all of them.
func KindRank(k string) int {
	switch k {
	case KindADC:
		return 0
	case KindCounter:
		return 1
	case KindModel:
		return 2
	case KindPoint:
		return 3
	case KindEstimator:
		return 4
	}
	return 5
}

// MulDivUp returns ⌈a × b ÷ d⌉ for d > 0 in 128-bit arithmetic; ok is
// false when the result exceeds 2⁶⁴−1.
func MulDivUp(a, b, d uint64) (q uint64, ok bool) {
	hi, lo := bits.Mul64(a, b)
	lo, carry := bits.Add64(lo, d-1, 0)
	hi += carry
	if hi >= d {
		return 0, false
	}
	q, _ = bits.Div64(hi, lo, d)
	return q, true
}

// MulDivDown returns ⌊a × b ÷ d⌋ for d > 0 in 128-bit arithmetic; ok is
// false when the result exceeds 2⁶⁴−1.
func MulDivDown(a, b, d uint64) (q uint64, ok bool) {
	hi, lo := bits.Mul64(a, b)
	if hi >= d {
		return 0, false
	}
	q, _ = bits.Div64(hi, lo, d)
	return q, true
}
