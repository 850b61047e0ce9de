// Package wire owns the mesh/1 vocabulary shared by every other package:
// content ids, the ServeRequest and its identity, the Fidelity scale, the
// Energy record with its provenance coupling, the ServeOutcome counters, and
// the Metering facts an auditor needs to judge an energy figure.
//
// Everything here is plain data with validation. Nothing in this package
// performs I/O, so drivers, engines, the router and the steward can all
// depend on it without depending on each other.
package wire
