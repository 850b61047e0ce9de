package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"meshd/agent/config"
	"meshd/agent/fleet"
	"meshd/steward"
	"meshd/steward/witness"
)

// fleetCheckTimeout bounds the start-up comparison with the fleet stream: a
// fleet that does not answer by then delays no start further (the check is
// skipped, loudly).
const fleetCheckTimeout = 10 * time.Second

// openWitness opens the rollback witness [steward] configures (nil for
// "none").
func (n *Node) openWitness(ctx context.Context, cfg *config.Config) (steward.Witness, error) {
	s := cfg.Steward
	if s.Witness != "tpm" {
		return nil, nil
	}
	w, err := witness.OpenTPM(ctx, s.WitnessDevice, s.WitnessIndex)
	if err != nil {
		return nil, fmt.Errorf("rollback witness: %w", err)
	}
	if w.Created() {
		n.log.Info("rollback witness: defined a new TPM NV counter; the next checkpoint binds it", "witness", w.String())
	}
	n.witness = w
	return w, nil
}

// checkRollback says in the start log what guards the state directory
// against an older copy, and compares the log with the fleet stream where
// a fleet exists: a stream holding more of this steward's receipts than
// the log refuses the start.
func (n *Node) checkRollback(ctx context.Context, cfg *config.Config) error {
	var guards []string
	if wr := n.Stores.Scan.Witness; wr != nil {
		guards = append(guards, wr.Name)
		switch {
		case wr.CaughtUp:
			n.log.Warn("rollback witness: the newest checkpoint was ahead of the counter (a stop between sealing it and advancing the counter); advanced", "witness", wr.Name, "value", wr.Value)
		case !wr.Written:
			n.log.Info("rollback witness: counter not yet bound; the next checkpoint binds it", "witness", wr.Name)
		default:
			n.log.Info("rollback witness: the log's newest checkpoint matches the counter", "witness", wr.Name, "value", wr.Value)
		}
	}
	if f := cfg.Fleet; f.URL != "" {
		cctx, cancel := context.WithTimeout(ctx, fleetCheckTimeout)
		defer cancel()
		o := fleet.ConnOptions{URL: f.URL, Creds: f.Creds, NKeySeedFile: f.NKeySeedFile, User: f.User, Password: f.Password,
			CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile, Name: "meshd " + n.Key.ID() + " rollback check"}
		head, err := fleet.CheckRollback(cctx, o, f.Stream, n.Stores.Log, n.Key.Public(), n.log.With("component", "fleet"))
		switch {
		case errors.Is(err, fleet.ErrRolledBack):
			return fmt.Errorf("rollback: %w", err)
		case err != nil:
			n.log.Warn("rollback check against the fleet stream skipped: the stream could not be read; an older copy of the state directory goes unseen at this start", "err", err)
		case head == nil:
			guards = append(guards, "fleet stream (holds no receipt of this steward yet)")
		default:
			guards = append(guards, "fleet stream")
			n.log.Info("rollback check: the log reaches the fleet stream's newest receipt", "stream_receipt", head.Sequence, "log_receipts", n.Stores.Log.Durable())
		}
	}
	if len(guards) == 0 {
		n.log.Warn("no rollback witness: replacing the state directory with an older copy cannot be detected (configure [steward] witness = \"tpm\" or a [fleet])")
	}
	return nil
}
