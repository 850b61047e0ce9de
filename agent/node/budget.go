package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"meshd/agent/config"
	"meshd/steward"
	"meshd/steward/ledger"
)

// sampleEvery is how often the disk budget samples the log's size for its
// growth rate, besides after each pass.
const sampleEvery = time.Minute

// openBudget sets up the receipt log's disk budget (PROFILE.md §8), logs
// which sequences left the log and where, and starts the loop that keeps
// the log within it. Without a configured limit the budget only measures.
func (n *Node) openBudget(ctx context.Context, cfg *config.Config) error {
	s := cfg.Steward
	opt := steward.BudgetOptions{MaxBytes: s.MaxLogBytes, MaxShare: s.MaxLogShare, ArchiveDir: s.ArchiveDir, Clock: n.opts.Clock}
	if n.publisher != nil {
		opt.Acked, opt.AckedBy = n.publisher.Acked, "the fleet stream"
	}
	opt.Keep, opt.KeepWhy = n.budgetKeep, "the grant ledger's snapshot anchor"
	if n.publisher != nil {
		opt.KeepWhy += " and the first receipt the fleet stream has not acknowledged"
	}
	b, err := steward.NewBudget(n.Stores.Log, opt)
	if err != nil {
		return err
	}
	n.budget = b
	if m := b.Manifest(); len(m) > 0 {
		n.log.Info("receipt log: older segments left the log", "ranges", strings.Join(steward.Ranges(m), "; "))
	}
	if b.Limit() > 0 {
		n.log.Info("receipt log disk budget", "limit_bytes", b.Limit(), "bytes", b.Bytes(), "archive_dir", s.ArchiveDir, "fleet_acks", n.publisher != nil)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	n.stopBudget, n.budgetDone = stop, make(chan struct{})
	go n.budgetLoop(bg)
	n.budgetPass()
	return nil
}

// budgetKeep is the lowest sequence that must stay in the live log: the
// grant ledger's anchor (the log reopens from a checkpoint at or below
// it; the ledger is compacted first, so the anchor is recent when no hold
// is open) and, with a fleet, the first receipt not yet published.
func (n *Node) budgetKeep() (uint64, error) {
	if _, err := n.Stores.Ledger.Compact(nil); err != nil {
		return 0, fmt.Errorf("compact the grant ledger: %w", err)
	}
	a, snap, err := ledger.ReadAnchor(n.cfg.LedgerDir())
	if err != nil {
		return 0, err
	}
	keep := uint64(0)
	if snap {
		keep = a.Count
	}
	if n.publisher != nil {
		keep = min(keep, n.publisher.Acked())
	}
	return keep, nil
}

// budgetLoop runs a pass when woken (after a seal that left the log past
// its low water) and every sampleEvery, which remeasures the directory and
// samples the growth rate.
func (n *Node) budgetLoop(ctx context.Context) {
	defer close(n.budgetDone)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.budgetWake:
			n.budgetPass()
		case <-t.C:
			n.budgetPass()
		}
	}
}

func (n *Node) budgetPass() {
	rep, err := n.budget.Pass(context.Background())
	if rep != nil {
		for _, a := range rep.Moved {
			if a.Path != "" {
				n.log.Info("receipt log: segment archived", "first", a.First, "last", a.Next-1, "path", a.Path, "bytes", a.Bytes)
			} else {
				n.log.Info("receipt log: segment removed", "first", a.First, "last", a.Next-1, "acknowledged_by", a.Removed, "bytes", a.Bytes)
			}
		}
	}
	if err != nil {
		n.log.Warn("receipt log: disk budget not met", "err", err)
	}
}

// wakeBudget asks for a pass if one could move anything (below the low
// water a pass only measures; the ticker samples the growth rate); it
// never blocks.
func (n *Node) wakeBudget() {
	if n.budget == nil || !n.budget.Due() {
		return
	}
	select {
	case n.budgetWake <- struct{}{}:
	default:
	}
}

// budgetAdmit is the disk budget's part of Storage: nil, or an error
// wrapping steward.ErrStorage naming the cause (the log at its disk budget
// with nothing it may archive or remove).
func (n *Node) budgetAdmit() error {
	if n.budget == nil {
		return nil
	}
	return n.budget.Admit()
}

// Budget is the receipt log's disk budget (its figures feed the metrics);
// nil before the node is open.
func (n *Node) Budget() *steward.Budget { return n.budget }

func (n *Node) closeBudget() {
	if n.stopBudget != nil {
		n.stopBudget()
		<-n.budgetDone
		n.stopBudget = nil
	}
}
