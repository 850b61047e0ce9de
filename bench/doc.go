// Package bench is meshd's benchmark report format and everything done
// with it, for meshctl and for any other Go program (a leaderboard, a
// lab's own harness): the workload a run serves (LoadWorkload, the TOML
// files beside this package), the run harness that serves it against a
// meshd and returns a report the steward signed (Run), the report's
// layout and canonical form (Report, Encode, Decode), the one function
// that computes every figure from the enclosed receipts (Summarise), the
// verifier that checks a report from its bytes alone and names the place
// of each problem (Verify), the rules by which two boards are ranked or
// not (Compare), and the pictures and tables made from verified reports
// (Plot, CSV). The fleet report, a report of kind "fleet" aggregating the
// receipts a fleet publishes to NATS JetStream, is made and checked here
// too (BuildFleet, VerifyFleet), by the same summary and ranking rules.
//
// The format and its rules are PROFILE.md §20 and §21. Nothing in this
// package prints or parses flags: cmd/meshctl does.
package bench
