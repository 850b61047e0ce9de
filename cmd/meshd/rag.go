package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"meshd/agent/api"
	"meshd/agent/node"
)

// ragAnnouncement is the node's corpora announced on the fleet's NATS
// servers (PROFILE §18, "Discovery over NATS").
type ragAnnouncement struct {
	nc  *nats.Conn
	ann *api.RAGAnnouncer
}

// announceRAG announces n's corpora when [fleet] names NATS servers and
// there are corpora; nil otherwise.
func announceRAG(ctx context.Context, n *node.Node, a *api.Server, log *slog.Logger) (*ragAnnouncement, error) {
	nc, err := n.DialRAG(ctx)
	if err != nil || nc == nil {
		return nil, err
	}
	ann, err := a.AnnounceRAG(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("announcing the corpora: %w", err)
	}
	r := &ragAnnouncement{nc: nc, ann: ann}
	// A sync that moves a pin changes the hash the announcement names.
	n.OnCorpusMoved(func() {
		if err := ann.Refresh(); err != nil {
			log.Error("re-announcing the corpora after a pin moved", "err", err)
		}
	})
	return r, nil
}

// refresh re-announces after a reload: pins moved, corpora came or went.
func (r *ragAnnouncement) refresh(log *slog.Logger) {
	if r == nil {
		return
	}
	if err := r.ann.Refresh(); err != nil {
		log.Error("re-announcing the corpora after the reload", "err", err)
	}
}

// stop withdraws the announcement before the drain, so callers stop
// finding a node that is going away.
func (r *ragAnnouncement) stop() {
	if r == nil {
		return
	}
	_ = r.ann.Stop()
	r.nc.Close()
}
