package fleet

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"meshd/steward"
)

// TestShardsNeverSplitASteward stores many stewards' receipts and
// checkpoints in a stream partitioned into shards by the server, verifies
// each shard with its own filtered consumer and verifier, all at once, and
// checks that every steward's chain was verified whole in exactly one
// shard, that every shard had work, and that a second run continues from
// each shard's own state.
func TestShardsNeverSplitASteward(t *testing.T) {
	const stewards, chainLen, shards = 24, 5, 4
	srv := startServer(t, t.TempDir(), -1)
	_, js := connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := EnsureStream(ctx, js, ShardedStreamConfig("", shards)); err != nil {
		t.Fatal(err)
	}
	ids, chains := benchChains(t, stewards, chainLen+1)
	publishAll := func(from, to int) {
		for seq := from; seq < to; seq++ {
			for i, id := range ids {
				if _, err := js.PublishMsg(ctx, ReceiptMsg(id, uint64(seq), chains[i][seq])); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	publishAll(0, chainLen)
	// A forgery under one steward's subject lands in that steward's shard.
	// (Signed by an outsider: an envelope a steward publishes later would
	// be dropped then by the server as a duplicate message id.)
	outsider := signChain(t, newKey(t), chainLen+1)
	if _, err := js.PublishMsg(ctx, ReceiptMsg(ids[0], chainLen, outsider[chainLen])); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	statePath := func(k int) string { return fmt.Sprintf("%s/shard-%d.state", dir, k) }
	run := func() ([]Report, Report) {
		vs := make([]*Verifier, shards)
		for k := range vs {
			vs[k] = NewVerifier(VerifierConfig{Trusted: ids})
			if err := vs[k].LoadState(statePath(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := ConsumeShards(ctx, js, vs, ConsumeConfig{Durable: "shard"}, func(k int) error { return vs[k].SaveState(statePath(k)) }); err != nil {
			t.Fatal(err)
		}
		var rs []Report
		for _, v := range vs {
			rs = append(rs, v.Report())
		}
		return rs, MergeReports(rs...)
	}
	rs, all := run()
	busy := 0
	for k, r := range rs {
		if len(r.Stewards) > 0 {
			busy++
		}
		for _, s := range r.Stewards {
			if s.Count != chainLen {
				t.Errorf("shard %d: steward %s verified %d receipts, want %d", k, s.Steward, s.Count, chainLen)
			}
		}
	}
	if busy < 2 {
		t.Errorf("only %d of %d shards had stewards: the stream is not partitioned", busy, shards)
	}
	if len(all.Stewards) != stewards {
		t.Errorf("%d stewards across the shards, want %d", len(all.Stewards), stewards)
	}
	if got := KindsString(all.Kinds()); got != "1 forged" {
		t.Errorf("problems %q, want the one forgery (a shard problem would mean a split steward)", got)
	}
	if s, _ := all.Steward(ids[0]); s.ProblemCount != 1 {
		t.Errorf("the forged steward has %d problems, want 1", s.ProblemCount)
	}

	// A node's rollback check finds its newest receipt under the shard's
	// subject too.
	head, ok, err := NewestReceipt(ctx, js, DefaultStream, mustKey(t, ids[2]))
	if err != nil || !ok || head.Sequence != chainLen-1 {
		t.Errorf("newest receipt in the sharded stream: %+v %v %v, want sequence %d", head, ok, err, chainLen-1)
	}

	// The next receipts: each shard resumes from its own state.
	publishAll(chainLen, chainLen+1)
	_, all = run()
	for _, s := range all.Stewards {
		if s.Count != chainLen+1 || s.Duplicates != 0 {
			t.Errorf("second run: steward %s (forged %v) count %d duplicates %d, want %d and 0: %v", s.Steward, s.Steward == ids[0], s.Count, s.Duplicates, chainLen+1, s.Problems)
		}
	}
}

func mustKey(t *testing.T, id string) ed25519.PublicKey {
	t.Helper()
	k, err := steward.ParsePublicKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
