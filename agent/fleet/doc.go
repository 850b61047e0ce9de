// Package fleet publishes a node's receipts to NATS JetStream and verifies a
// fleet's chains.
//
// A Publisher treats the node's receipt log as its outbox: it reads sealed
// envelopes with Log.Range in chain order, publishes each to
// mesh.receipts.<steward-id> with the envelope's content id as its
// Nats-Msg-Id, and advances a cursor file only once the server has
// acknowledged. An outage or a crash therefore loses nothing; it replays,
// and the replay is idempotent twice over: JetStream drops a repeated
// message id inside the stream's duplicate window, and the Verifier skips
// an identical envelope at a sequence it already holds beyond it.
//
// A Verifier is fed the stream's messages (from any consumer, or crafted by
// a test) and checks every steward's chain independently: signatures under
// the steward id named by the subject, prev links, sequence gaps (buffering
// what arrives early), forks, replays, trust, and the steward's signed
// checkpoints. It never trusts a board's clock or the network: everything
// it accepts is checked against signatures and the hash chain.
package fleet
