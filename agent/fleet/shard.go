package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// ProblemShard: one steward's messages were found in two shards, so a
// shard saw only part of its chain. The server's partitioning never does
// this; a consumer filter that does not match the stream's transform does.
const ProblemShard = "shard"

// Sharding a fleet stream: the stream rewrites each subject
// mesh.<tree>.<steward> to mesh.<tree>.<shard>.<steward> as it stores it,
// where <shard> is the server's partition() hash of the steward token
// alone. A steward's receipts and checkpoints therefore always land in the
// same shard, and each shard is verified by its own filtered consumer and
// verifier, on its own cores or machines, without ever splitting a chain.
// Boards keep publishing to mesh.receipts.<steward>; nothing changes for
// them. (With one stream per shard instead, the same mapping goes into the
// account's subject mappings and each stream captures one shard.)

// ShardTransform is the stream subject transform that partitions a fleet
// stream into shards shards by steward.
func ShardTransform(shards int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      "mesh.*.*",
		Destination: "mesh.{{wildcard(1)}}.{{partition(" + strconv.Itoa(shards) + ",2)}}.{{wildcard(2)}}",
	}
}

// ShardedStreamConfig is StreamConfig with the shards' transform.
func ShardedStreamConfig(name string, shards int) jetstream.StreamConfig {
	c := StreamConfig(name, 0)
	c.SubjectTransform = ShardTransform(shards)
	return c
}

// ShardFilters are the consumer filter subjects of shard k.
func ShardFilters(k int) []string {
	s := strconv.Itoa(k)
	return []string{ReceiptPrefix + s + ".*", CheckpointPrefix + s + ".*"}
}

// ConsumeShards verifies a sharded stream with one durable consumer per
// shard (cfg.Durable with "-<k>" appended, filtered to ShardFilters(k)),
// each feeding its own verifier vs[k], all at once. save, if set, persists
// shard k's verifier before its batch is acknowledged. It returns when
// every shard has returned, with their errors joined. The stream must be
// partitioned into len(vs) shards (ShardedStreamConfig): filters over a
// stream that is not would match nothing and report an empty fleet.
func ConsumeShards(ctx context.Context, js jetstream.JetStream, vs []*Verifier, cfg ConsumeConfig, save func(k int) error) error {
	if cfg.Durable == "" {
		cfg.Durable = DefaultDurable
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	s, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("stream %s not found: no board has published yet, or -stream is wrong", cfg.Stream)
	}
	if err != nil {
		return fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	want := ShardTransform(len(vs))
	if got := s.CachedInfo().Config.SubjectTransform; got == nil || *got != *want {
		have := "none"
		if got != nil {
			have = got.Source + " -> " + got.Destination
		}
		return fmt.Errorf("stream %s is not partitioned into %d shards: its subject transform is %s, want %s -> %s", cfg.Stream, len(vs), have, want.Source, want.Destination)
	}
	errs := make([]error, len(vs))
	var wg sync.WaitGroup
	for k, v := range vs {
		c := cfg
		c.Durable = cfg.Durable + "-" + strconv.Itoa(k)
		c.FilterSubjects = ShardFilters(k)
		if save != nil {
			c.Save = func() error { return save(k) }
		}
		wg.Go(func() {
			if err := Consume(ctx, js, v, c); err != nil {
				errs[k] = fmt.Errorf("shard %d: %w", k, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// MergeReports joins the reports of a fleet's shards. A steward found in
// more than one is kept from the first and reported as a shard problem:
// its chain was split, and neither shard verified all of it.
func MergeReports(rs ...Report) Report {
	var out Report
	in := map[string]int{}
	for k, r := range rs {
		out.Messages += r.Messages
		out.Fleet = append(out.Fleet, r.Fleet...)
		for _, s := range r.Stewards {
			if j, ok := in[s.Steward]; ok {
				out.Fleet = append(out.Fleet, Problem{Kind: ProblemShard, Steward: s.Steward,
					Detail: fmt.Sprintf("steward's messages are in shards %d and %d: each verified part of its chain", j, k)})
				continue
			}
			in[s.Steward] = k
			out.Stewards = append(out.Stewards, s)
		}
	}
	sort.Slice(out.Stewards, func(i, j int) bool { return out.Stewards[i].Steward < out.Stewards[j].Steward })
	return out
}
