package config

import (
	"path/filepath"
	"strings"
)

// defaultSegmentBytes matches steward.DefaultSegmentBytes.
const defaultSegmentBytes = 64 << 20

// budget checks the [steward] disk budget keys (PROFILE.md §8).
func (v *checker) budget() {
	s := &v.c.Steward
	seg := s.SegmentBytes
	if !v.ix.has("steward.segment_bytes") {
		seg = defaultSegmentBytes // 0 stays in the Config: the log's default
	} else if seg < 4096 {
		v.problem("steward.segment_bytes", "must be at least 4096, not %d", seg)
	}
	if s.MaxLogBytes < 0 {
		v.problem("steward.max_log_bytes", "must be >= 0 (0: no bound), not %d", s.MaxLogBytes)
	}
	if !finite(s.MaxLogShare) || s.MaxLogShare < 0 || s.MaxLogShare > 1 {
		v.problem("steward.max_log_share", "must be a share of the filesystem between 0 and 1 (0.1 is a tenth), not %v", s.MaxLogShare)
	}
	if s.MaxLogBytes > 0 && seg >= 4096 && s.MaxLogBytes < 4*seg {
		// The live log always keeps the segment being written and the one
		// holding the newest checkpoint; below four segments a budget is
		// met by refusing serves, not by archiving.
		v.problem("steward.max_log_bytes", "%d is less than four segments of steward.segment_bytes (%d)", s.MaxLogBytes, seg)
	}
	if s.ArchiveDir != "" {
		if !filepath.IsAbs(s.ArchiveDir) {
			v.problem("steward.archive_dir", "must be an absolute path, not %q", s.ArchiveDir)
		} else if rel, err := filepath.Rel(filepath.Join(s.StateDir, "receipts"), s.ArchiveDir); err == nil && !strings.HasPrefix(rel, "..") {
			v.problem("steward.archive_dir", "%q is inside the receipt log directory", s.ArchiveDir)
		}
	}
	if !s.Budgeted() {
		if v.ix.has("steward.archive_dir") {
			v.problem("steward.archive_dir", "set without steward.max_log_bytes or steward.max_log_share: nothing would be archived")
		}
		return
	}
	if s.ArchiveDir == "" && v.c.Fleet.URL == "" {
		v.problem("steward.max_log_bytes", "a disk budget needs steward.archive_dir or a [fleet] that acknowledges receipts: otherwise no segment may leave the log and serves stop at the budget")
	}
}
