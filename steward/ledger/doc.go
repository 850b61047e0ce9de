// Package ledger keeps the durable joule budget of every grant the steward
// has authorised against: how much of each grant's budget is spent, how much
// is held by serves in flight, and what remains.
//
// A serve takes a hold of its joule ceiling before any work is done; the
// hold is granted only once its record is on disk (fsync, shared between
// concurrent holders: group commit). When the receipt is sealed the hold is
// settled at the receipt's grant debit, x_grant_debit_uj = min(charged
// figure, hold), where the charged figure is measured_uj if present, else
// estimated_uj; the rest of the hold returns to the grant. A serve that
// fails releases its hold. Settlements and releases are written but not
// synced: losing one in a crash is harmless, because recovery rebuilds it
// from the receipt log.
//
// Only one Ledger may have a file open: Open takes an exclusive flock on
// the ledger file itself (path+".lock" holds the holder's pid, information
// only: deleting it frees nothing), and a second Open, from this process or
// another, fails with ErrLocked naming the path and the holder. The file is
// 0600.
// The ledger path must be a regular file or absent.
//
// # File format
//
// The file is the 8-byte magic "MESHLDG2" followed by the frames of package
// framelog (shared with the receipt log):
//
//	u32 BE body length | u32 BE CRC-32C(body) | u32 BE CRC-32C(the 8 bytes before) | body
//
// with bodies of 1 to 64 bytes. A body is a one-byte record type and
// big-endian fields:
//
//	'A' account   (49 B): grant_id [32] | budget_uj u64 | expires_unix_ms u64
//	'H' hold      (49 B): hold u64 | grant_id [32] | amount_uj u64
//	'S' settle    (17 B): hold u64 | charged_uj u64
//	'R' release    (9 B): hold u64
//	'P' balance   (57 B): grant_id [32] | budget_uj u64 | spent_uj u64 | expires_unix_ms u64
//	'O' open hold (49 B): hold u64 | grant_id [32] | amount_uj u64
//	'E' snapshot end (49 B): next_hold u64 | anchor_count u64 | anchor_head [32]
//
// expires_unix_ms 0 means the grant's expiry is unknown. A file is either
// a log from the start (A, H, S, R records) or a snapshot followed by a
// log: P records (one per live account), O records (one per open hold; a
// snapshot the ledger writes has none, see Compaction), exactly one E, then
// A, H, S, R records. Hold numbers strictly increase through the file and
// are what receipts carry as x_grant_hold; next_hold is the number the next
// hold will take. A hold or settlement names a grant or hold the file has
// opened before; an account is opened once.
//
// A torn tail, framelog's one rule, is cut on open and reported as
// Recovery.TornBytes: fewer bytes than a header; a valid header whose body
// runs past the end; zeros from a frame's start to the end; or a valid
// final header whose body fails its checksum and is zero from a 512-byte
// boundary to the end. Anything else that does not check out, and any
// record that contradicts the ones before it, refuses to open with
// ErrDamaged, naming the record's index and byte offset (the
// *framelog.CorruptError stays in the chain), and leaves the file
// untouched. A "MESHLDG1" file, the previous format, is refused with
// ErrOldFormat; nothing was deployed with it, so there is no migration.
//
// # Recovery
//
// Open replays the file and is then given the grant debits of the receipt
// log's receipts (Charge). The receipt is the truth. Charges whose Sequence
// is below the snapshot's anchor count are already reflected in the
// snapshot and are skipped; every other charge is reconciled against the
// holds the file records after its snapshot and the snapshot's open holds,
// all of which replay keeps in memory until reconciliation is done:
//
//   - a hold left open by a crash that has a sealed receipt is settled at
//     the receipt's debit;
//   - a hold left open with no receipt is released: nothing was charged and
//     the caller never got an answer;
//   - a released hold that has a receipt (the seal became durable although
//     the append reported failure) is settled at the receipt's debit;
//   - a settled hold whose figure differs from its receipt is corrected to
//     the receipt's figure;
//   - a receipt naming a hold the ledger did not record (after its
//     snapshot), naming a hold of a different grant, or sharing its hold
//     with another receipt, means the ledger and the log do not belong
//     together: Open refuses with ErrMismatch, before changing anything,
//     rather than guess.
//
// The corrections are appended and synced before Open returns, so after a
// restart no hold is open, spent equals the sum of the receipts' debits for
// each grant, and remaining equals budget minus spent: never more than was
// truly unspent, and no receipt charged twice. Closed holds then leave
// memory; only open holds are kept.
//
// ReadAnchor reads a file's anchor without opening it, so that the receipt
// log can be opened visiting only from a checkpoint at or below the anchor
// count, gathering just the charges Open needs.
//
// A charge above its hold (a debit that overran the ceiling the serve
// declared, which meshd never seals) is recorded as charged; if that takes
// a grant past its budget the excess is reported as OverdrawnUJ and nothing
// remains.
//
// # Compaction
//
// Compact replaces the file by a snapshot: the magic, a P record per live
// account, an O record per open hold, and the E record, written to a
// temporary file beside the ledger, fsynced, renamed over it and the
// directory fsynced, after which records are appended to the new file. A
// crash leaves the old file or the new one (Open deletes a temporary file
// a crash left unrenamed); either, with the receipt log, recovers the same
// balances. The temporary file is locked before its rename, so the inode
// the path names is always locked while the Ledger is open; an Open that
// locked the replaced inode sees that the path names another and retries.
//
// The E record's anchor ties the snapshot to the receipt log: anchor_count
// N means every receipt with sequence below N that carries a grant is
// already reflected in the snapshot, and anchor_head is the content id of
// receipt N−1. It is sound because Compact runs only while no hold is open
// and takes the anchor under the ledger's mutex: every receipt holds its
// hold open until it is settled, so every granted receipt already sealed
// is settled, and none can be sealed on a hold the snapshot does not see.
// The anchor function must make the log durable up to N before the
// snapshot is persisted, and fail if the log has failed.
//
// With Options.Anchor and Options.CompactEvery set, the ledger compacts by
// itself after a Settle or Release that leaves no hold open once
// CompactEvery records have been appended since the last snapshot, and at
// Open when as many follow the snapshot (or the file has records and no
// snapshot). Open's cost is then bounded by the snapshot's size (one
// record per live account) plus the activity since it.
//
// A snapshot leaves out, and drops from memory, every account whose
// grant's expires_unix_ms lies more than Options.ExpiryGrace (default 24
// hours, a guard against clock steps) before the compaction's clock and
// that has no open hold. The authoriser refuses an expired grant before it
// asks the ledger, so such an account can never be used again. An account
// whose expiry is unknown (opened by Hold rather than HoldUntil, until a
// HoldUntil supplies it) is never dropped.
package ledger
