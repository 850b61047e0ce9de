// Package shunt turns power sensors (any drivers.Sensor) into energy
// meters. It owns the sampling goroutine (Meter), the record of timestamped
// readings and the queries over it (Series), and the spans of meters a
// backend is metered by (Span): their windows' integral, coverage, error
// bound, and the provenance those facts allow. PROFILE.md §13 is the
// contract; this is how it is kept.
//
// # Readings
//
// A driver states, for each reading, the interval it averages over, how
// uncertain that placement is, whether it chains to the previous reading,
// and how much of it the current went unobserved (drivers.Sample). The
// record does not take the chain on trust: a reading chains only if the
// driver says so, no invalid entry came between, it begins where the
// previous one ended within both uncertainties, and its length is within
// the sensor's longest period. A read error, an overflow (including a
// value beyond full scale), a stale or stalled report, or a timestamp that
// runs backwards (a duplicate) is an invalid entry, never a zero, and
// breaks the chain.
//
// # Windows
//
// A window the chained readings surely cover is charged whole conversions:
// the run from the last conversion surely begun by the window's start to
// the first surely ended by its end. Its energy is exact up to the sensor's
// error, whatever the load did inside the conversions — the chip
// integrated it — and the interval charged (the gross window) is reported
// beside the serve interval. Any other window is integrated pro rata over
// exactly the interval asked: a span cut by an edge contributes its share
// of its mean, a gap between readings that do not chain is bridged by the
// straight line between them, and an edge past the newest reading holds
// it. Pro-rata figures add up exactly over adjacent intervals, which the
// Shared span policy relies on.
//
// # Error bound
//
// Every window carries a bound that sums, over its pieces: the sensor's
// gain and offset error (offset evaluated at each reading's bus voltage);
// the dead time of each conversion at full scale; each counter reading's
// quantum; the timestamp uncertainty of every chained boundary (|Δp|·u)
// and of the run's outer edges (|p|·u); one nanojoule of rounding per
// piece; and, for what nobody observed (bridges, held edges, clipped
// overlaps, the unknown split of a mean at a pro-rata edge), the worst case
// against full scale. It holds for any load between zero and full scale,
// which the battery (battery_test.go) checks against exact ground truth.
//
// # Provenance
//
// HwShunt only when the sensor's kind can support a hardware claim, the
// window is covered by a chain with no invalid entry, every gap is within
// the longest period, and the bound is within the sensor's declared
// accuracy — the same rules the steward enforces at seal time; otherwise
// ModelBased with the reason in Report.Why. A window no valid reading
// touches returns wire.ErrNoMeasurement.
//
// # Queries
//
// Each ring entry carries prefix sums (integer nanojoules, wrapping, so a
// long-running meter never overflows a difference) of energy, bound and
// covered time, and a count of chain breaks, so a window is a few binary
// searches and subtractions whatever its length; the largest gap comes
// from per-block maxima.
package shunt
