package corpus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// BranchHead is the commit that branch names in the local repository at
// path (a work tree or a bare mirror): refs/heads/<branch>, else
// refs/remotes/origin/<branch> (a clone that fetches). Nothing is fetched:
// whatever updates the mirror (a cron'd git fetch, a push) is the
// operator's.
func BranchHead(path, branch string) (string, error) {
	repo, err := git.PlainOpenWithOptions(path, &git.PlainOpenOptions{DetectDotGit: false})
	if err != nil {
		return "", fmt.Errorf("open %s: %w", path, err)
	}
	for _, name := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName(branch), plumbing.NewRemoteReferenceName("origin", branch)} {
		ref, err := repo.Reference(name, true)
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("%s in %s: %w", name, path, err)
		}
		return ref.Hash().String(), nil
	}
	return "", fmt.Errorf("%s has no branch %q (refs/heads/%[2]s or refs/remotes/origin/%[2]s)", path, branch)
}

// SyncResult is what one Sync did.
type SyncResult struct {
	// Moved says the pin moved: Corpus is then served, Previous was.
	Moved    bool
	Previous *Corpus
	Corpus   *Corpus
	Stats    Stats
}

// Sync moves the corpus to its repos' branch heads (cfg's Repos name the
// paths and branches; their commits are ignored) when any head differs
// from the pin served now: it ingests at the heads, reusing the chunks and
// vectors of every file whose blob is unchanged (only changed files are
// embedded), and serves the result, signed afresh. A failure leaves the
// served corpus as it was. Syncs of one provider run one at a time.
func (p *Provider) Sync(ctx context.Context, cfg Config) (SyncResult, error) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	cur := p.Corpus()
	if len(cfg.Repos) != len(cur.Repos) {
		return SyncResult{}, fmt.Errorf("corpus %s/%s: sync with %d repos, %d served", p.Org, p.Name, len(cfg.Repos), len(cur.Repos))
	}
	// A copy: the served corpus may share the caller's slice.
	cfg.Repos = slices.Clone(cfg.Repos)
	moved := false
	for i := range cfg.Repos {
		r := &cfg.Repos[i]
		if r.ID != cur.Repos[i].ID {
			return SyncResult{}, fmt.Errorf("corpus %s/%s: sync repo %d is %q, %q served", p.Org, p.Name, i, r.ID, cur.Repos[i].ID)
		}
		head, err := BranchHead(r.Path, r.Branch)
		if err != nil {
			return SyncResult{}, fmt.Errorf("corpus %s/%s: repo %q: %w", p.Org, p.Name, r.ID, err)
		}
		r.Commit = head
		moved = moved || head != cur.Repos[i].Commit
	}
	if !moved {
		return SyncResult{Corpus: cur}, nil
	}
	next, st, err := Ingest(ctx, cfg, p.emb, cur)
	if err != nil {
		return SyncResult{}, err
	}
	if err := p.serve(next); err != nil {
		return SyncResult{}, err
	}
	return SyncResult{Moved: true, Previous: cur, Corpus: next, Stats: st}, nil
}
