// Package ledger keeps the durable joule budget of every grant the steward
// has authorised against: how much of each grant's budget is spent, how much
// is held by serves in flight, and what remains.
//
// A serve takes a hold of its joule ceiling before any work is done; the
// hold is granted only once its record is on disk (fsync, shared between
// concurrent holders: group commit). When the receipt is sealed the hold is
// settled at the receipt's charged figure (measured_uj if present, else
// estimated_uj) and the difference returns to the grant; a serve that fails
// releases its hold. Settlements and releases are written but not synced:
// losing one in a crash is harmless, because recovery rebuilds it from the
// receipt log.
//
// # File format
//
// The file is the 8-byte magic "MESHLDG1" followed by frames
//
//	u32 big-endian body length | u32 big-endian CRC-32C of body | body
//
// and the body is a one-byte record type and big-endian integers:
//
//	'A' account: grant_id [32] | budget_uj u64
//	'H' hold:    hold u64 | grant_id [32] | amount_uj u64
//	'S' settle:  hold u64 | charged_uj u64
//	'R' release: hold u64
//
// Hold numbers strictly increase through the file; they are what receipts
// carry as x_grant_hold. A final frame that is incomplete, or whose checksum
// fails with nothing but zeros or nothing at all after it, is a torn write
// that was never acknowledged and is cut on open; any other bad frame, or a
// record that contradicts the ones before it, refuses to open with
// ErrDamaged.
//
// # Recovery
//
// Open replays the file and is then given every receipt of the receipt log
// that debited a grant (see Collector). The receipt is the truth:
//
//   - a hold left open by a crash that has a sealed receipt is settled at
//     the receipt's charge;
//   - a hold left open with no receipt is released: nothing was charged and
//     the caller never got an answer;
//   - a released hold that has a receipt (the seal became durable although
//     the append reported failure) is settled at the receipt's charge;
//   - a settled hold whose figure differs from its receipt is corrected to
//     the receipt's figure;
//   - a receipt naming a hold the ledger never recorded, naming a hold of a
//     different grant, or sharing its hold with another receipt, means the
//     ledger and the log do not belong together: Open refuses with
//     ErrMismatch rather than guess.
//
// The corrections are appended and synced before Open returns, so after a
// restart no hold is open, spent equals the sum of the receipts' charges for
// each grant, and remaining equals budget minus spent: never more than was
// truly unspent, and no receipt charged twice.
//
// A charge above its hold (a metered figure that overran the ceiling the
// serve declared) is recorded as charged; if that takes a grant past its
// budget the excess is reported as OverdrawnUJ and nothing remains.
package ledger
