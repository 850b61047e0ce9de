package config

import (
	"errors"
	"testing"
)

const budgetBackend = `
[[backend]]
name = "ref"
kind = "reference"
fidelity = 1
uj_per_token = 1
`

func TestBudgetKeys(t *testing.T) {
	ok, err := Parse([]byte(`[steward]
state_dir = "/var/lib/meshd"
max_log_bytes = 1073741824
archive_dir = "/mnt/usb/meshd-archive"
`+budgetBackend), "good.toml")
	if err != nil {
		t.Fatal(err)
	}
	if s := ok.Steward; !s.Budgeted() || s.SegmentBytes != 0 || s.ArchiveDir != "/mnt/usb/meshd-archive" {
		t.Fatalf("steward %+v", s)
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []want
	}{
		{"nowhere to go", "[steward]\nstate_dir = \"/s\"\nmax_log_share = 0.2\n", []want{{1, "steward.max_log_bytes", "needs steward.archive_dir or a [fleet]"}}},
		{"share out of range", "[steward]\nstate_dir = \"/s\"\nmax_log_share = 1.5\narchive_dir = \"/a\"\n", []want{{3, "steward.max_log_share", "between 0 and 1"}}},
		{"under four segments", "[steward]\nstate_dir = \"/s\"\nsegment_bytes = 1048576\nmax_log_bytes = 2097152\narchive_dir = \"/a\"\n", []want{{4, "steward.max_log_bytes", "less than four segments"}}},
		{"archive inside the log", "[steward]\nstate_dir = \"/s\"\nmax_log_bytes = 1073741824\narchive_dir = \"/s/receipts/old\"\n", []want{{4, "steward.archive_dir", "inside the receipt log"}}},
		{"archive relative", "[steward]\nstate_dir = \"/s\"\nmax_log_bytes = 1073741824\narchive_dir = \"old\"\n", []want{{4, "steward.archive_dir", "absolute"}}},
		{"archive without a budget", "[steward]\nstate_dir = \"/s\"\narchive_dir = \"/a\"\n", []want{{3, "steward.archive_dir", "nothing would be archived"}}},
		{"tiny segments", "[steward]\nstate_dir = \"/s\"\nsegment_bytes = 100\n", []want{{3, "steward.segment_bytes", "at least 4096"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc+budgetBackend), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("want problems, got %v", err)
			}
			checkProblems(t, ps, tc.want)
		})
	}
}
