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
// A node that announced nothing (it started with no corpus) starts
// announcing once the reload brought corpora and [fleet] url is set. It
// returns the announcement now running.
func (r *ragAnnouncement) refresh(ctx context.Context, n *node.Node, a *api.Server, log *slog.Logger) *ragAnnouncement {
	if r == nil {
		nr, err := announceRAG(ctx, n, a, log)
		if err != nil {
			log.Error("announcing the corpora after the reload", "err", err)
			return nil
		}
		if nr != nil {
			log.Info("announcing the corpora on the fleet's NATS servers")
		}
		return nr
	}
	if err := r.ann.Refresh(); err != nil {
		log.Error("re-announcing the corpora after the reload", "err", err)
	}
	return r
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
