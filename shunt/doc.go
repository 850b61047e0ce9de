// Package shunt turns a power sensor (any drivers.Sensor) into an energy
// meter. It owns the sampling goroutine, the ring of timestamped readings,
// and the energy windows opened around engine work: their integral, their
// coverage, their error bound, and the provenance those facts allow.
//
// # Sampling
//
// One goroutine per Meter calls Sensor.Next in a loop and appends every
// outcome to a fixed-size ring. A valid sample becomes a reading; a read
// error, an overflow flag or a timestamp that runs backwards becomes an
// invalid entry, which is never turned into a zero. Failing reads are
// retried at the update period so a dead bus cannot spin a core. A reading
// is placed on the monotonic clock at the interval the chip averaged over,
// [At−Averaged, At], whose middle At−Averaged/2 is the reading's time.
//
// # Integration model
//
// A reading from an averaging chip (an INA226 in continuous mode) is the
// mean power over its averaging span, so the estimate p̂(t) is piecewise:
//
//   - over a reading's span, p̂ is that reading's value. When spans tile
//     time, the energy of whole spans is exact whatever the load does inside
//     them, including bursts faster than the sampling: the chip integrated
//     them for us;
//   - between two valid readings whose spans do not touch (instantaneous
//     readings, a conversion shorter than the update period, a read error),
//     p̂ is the straight line between them: trapezoidal integration. Its
//     error is bounded by |Δp|·gap/2 assuming the load moves monotonically
//     across the gap; a burst inside such a gap is not seen by any reading
//     and is outside every bound (which is why a gap caused by invalid
//     readings downgrades provenance);
//   - a gap of at most a quarter span, with no invalid entry in it, is taken
//     to be the chip's clock running slow against its nominal conversion
//     time (the INA226 allows +10 %) and the span is stretched to close it;
//     an overlap (a chip running fast, or timestamp jitter) is clipped. Both
//     attribute each mean to the time that actually elapsed.
//
// A window edge that falls inside a reading's span is moved outwards to the
// span's boundary. Only the span's mean is known; any split of it between
// the two sides of the edge is a guess whose worst case (under nothing but
// non-negative power) is the whole span's energy, which would dominate the
// bound of every short window. Moving outwards keeps the integral exact,
// keeps the window around the work it meters, and is reported: Report.Start
// and Report.End, and Metering.WindowNs, describe the interval actually
// integrated, which contains the requested one. An edge that falls between
// spans is interpolated linearly, with a bound of |Δp| times the part taken.
//
// # Error bound
//
// Every window carries a bound in µJ that sums, over its pieces:
//
//   - the sensor error: with datasheet gain error G and offset O (from
//     drivers.Accuracy, offset evaluated at each reading's bus voltage), a
//     true power p read as m satisfies |m−p| ≤ G|p|+O ≤ (G|m|+O)/(1−G);
//   - the interpolation error of every bridged gap and edge, as above;
//   - for an edge left unbracketed (the window reaches past the newest
//     reading or behind the oldest one), the held value's full magnitude
//     over the stretch it was held;
//   - rounding of the integer pJ prefix sums and of the µJ figure.
//
// # Coverage and provenance
//
// Provenance follows from coverage alone, never from the sensor's name:
// wire.HwShunt only when both edges are bracketed by valid readings, no
// invalid entry falls inside and no two consecutive readings are more than
// two update periods apart; otherwise wire.ModelBased, with the gaps bridged
// and the largest one recorded. A window that no valid reading touches (one
// that lies in a stretch of read errors, before the first reading, after
// the last, or wholly older than the ring) yields wire.ErrNoMeasurement. A
// window that only partly predates the ring is ModelBased: the oldest
// reading is held back to the window's start and that stretch is its gap.
//
// # Queries
//
// Each ring entry carries prefix sums (integer picojoules, wrapping, so a
// long-running meter never overflows a difference) of energy and of the
// error bound, so a window is a pair of binary searches and a handful of
// subtractions, whatever its length; the largest gap comes from per-block
// maxima. Windows are therefore cheap and may overlap and nest freely.
package shunt
