package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/internal/testbin"
	"meshd/steward"
	"meshd/wire"
)

// mountTiny mounts a tmpfs of size bytes at dir, or skips the test where
// this machine does not allow mounting (not root, or no CAP_SYS_ADMIN in a
// container). The unit tests of the heal path (steward, ledger, framelog)
// inject the same failures through a file layer and run everywhere.
func mountTiny(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("skipping the real full-disk test: this machine does not allow mounting a tmpfs (%v: %s); the fault-injection unit tests cover the heal path", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// fill writes a file at path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", path, err)
			}
			return
		}
	}
}

// The built daemon on a real, tiny filesystem: fill it, and serves are
// refused with 507 storage_unavailable and /readyz turns 503 naming the
// cause; free it, and serves succeed again without a restart. The log
// then verifies (meshctl verify) holding exactly the receipts that were
// acknowledged, in sequence, none lost and none twice.
func TestDiskFullHealsWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	mountTiny(t, mnt, 1<<20)
	bin := buildMeshd(t)
	ctl := testbin.Build(t, "meshd/cmd/meshctl")
	state := filepath.Join(mnt, "state")
	cfgPath := filepath.Join(dir, "meshd.toml")
	cfg := fmt.Sprintf(`[steward]
state_dir = %q
checkpoint_every = 4
# The segment being written preallocates up to its size: kept small, it
# leaves the filler most of this tiny disk.
segment_bytes = 65536

[listen]
tcp = ["127.0.0.1:0"]

[log]
format = "json"
%s`, state, loadBackends)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startChild(t, bin, cfgPath)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var head struct{ Steward string }
	resp, err := http.Get(d.base + "/v1/chain/head")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&head)
	resp.Body.Close()
	pub, err := steward.ParsePublicKey(head.Steward)
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiptClient(d.base, pub, 1)
	defer rc.close()
	acked := map[uint64]wire.ContentID{}
	i := 0
	serve := func() served {
		t.Helper()
		i++
		s, err := rc.serve(ctx, map[string]any{"prompt": fmt.Sprintf("disk full %d", i), "max_tokens": 4})
		if err != nil {
			t.Fatalf("serve %d: %v\n%s", i, err, d.logs.String())
		}
		if s.status == http.StatusOK {
			if _, dup := acked[s.opened.Receipt.Sequence]; dup {
				t.Fatalf("sequence %d acknowledged twice", s.opened.Receipt.Sequence)
			}
			acked[s.opened.Receipt.Sequence] = s.opened.ID
		}
		return s
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(d.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for range 3 {
		if s := serve(); s.status != http.StatusOK {
			t.Fatalf("serve before the disk fills: %+v", s)
		}
	}

	filler := filepath.Join(mnt, "filler")
	fill(t, filler)
	// Receipts still fit in the room the segment had preallocated (zeros
	// written ahead of its frames) and in its last page: durable, as they
	// overwrite blocks the file has. Once that is used the log needs
	// blocks the disk no longer has. A receipt takes a few hundred bytes
	// of it.
	segs, _ := filepath.Glob(filepath.Join(state, "receipts", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	slices.Sort(segs)
	fi, err := os.Stat(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}
	bound := 10 + int(fi.Size()/256)
	refused := 0
	for n := 0; n < bound && refused == 0; n++ {
		s := serve()
		switch {
		case s.status == http.StatusInsufficientStorage && s.code == "storage_unavailable":
			refused++
		case s.status != http.StatusOK:
			t.Fatalf("serve on a full disk: %d %s %s, want 507 storage_unavailable", s.status, s.code, s.msg)
		}
	}
	if refused == 0 {
		t.Fatalf("%d serves on a full disk all succeeded (the segment held %d bytes)", bound, fi.Size())
	}
	for range 3 {
		if s := serve(); s.status != http.StatusInsufficientStorage || s.code != "storage_unavailable" || !strings.Contains(s.msg, "no space left") {
			t.Fatalf("serve while the disk is full: %d %s %q", s.status, s.code, s.msg)
		}
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage_unavailable") || !strings.Contains(body, "no space left") {
		t.Fatalf("/readyz on a full disk: %d %s", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "meshd_storage_ok 0") {
		t.Fatalf("metrics on a full disk do not say meshd_storage_ok 0")
	}
	before := len(acked)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if s := serve(); s.status != http.StatusOK {
			t.Fatalf("serve once the disk has room again: %d %s %q\n%s", s.status, s.code, s.msg, d.logs.String())
		}
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz once the disk has room again: %d %s", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "meshd_storage_ok 1") {
		t.Fatalf("metrics after healing do not say meshd_storage_ok 1")
	}
	d.terminate()

	n := uint64(len(acked))
	for seq := range n {
		if _, ok := acked[seq]; !ok {
			t.Fatalf("acknowledged sequences are not 0..%d: %d missing", n-1, seq)
		}
	}
	out, err := exec.Command(ctl, "verify", "-q", "-steward", head.Steward, "-count", fmt.Sprint(n), filepath.Join(state, "receipts")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("log OK: %d receipts", n)) {
		t.Fatalf("meshctl verify after healing: %v\n%s", err, out)
	}
	_, err = steward.VerifyLog(ctx, filepath.Join(state, "receipts"), steward.VerifyOptions{Trusted: pub, Visit: func(o *steward.Opened) error {
		if acked[o.Receipt.Sequence] != o.ID {
			return fmt.Errorf("receipt %d in the log is %s, the one acknowledged %s", o.Receipt.Sequence, o.ID, acked[o.Receipt.Sequence])
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d receipts acknowledged (%d before the disk filled and while it filled, %d after it was freed), %d serves refused 507; meshctl verify: %s",
		n, before, int(n)-before, refused+3, strings.TrimSpace(string(out)))
}
