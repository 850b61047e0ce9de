package steward

import (
	"bytes"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// names lists the entries of dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

// A keygen whose write fails after the temporary file exists leaves
// nothing behind: neither a key file that would block the retry nor the
// temporary copy of the key.
func TestWriteKeyFileFailureLeavesNothing(t *testing.T) {
	k, err := GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	injected := errors.New("disk full (injected)")
	for _, tc := range []struct {
		name   string
		encode func(io.Writer, *pem.Block) error
	}{
		{"nothing written", func(io.Writer, *pem.Block) error { return injected }},
		{"half written", func(w io.Writer, b *pem.Block) error {
			var buf bytes.Buffer
			if err := pem.Encode(&buf, b); err != nil {
				return err
			}
			if _, err := w.Write(buf.Bytes()[:buf.Len()/2]); err != nil {
				return err
			}
			return injected
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "steward.key")
			if err := writeKeyFile(p, k, tc.encode); !errors.Is(err, injected) {
				t.Fatalf("write: %v, want the injected failure", err)
			}
			if n := names(t, dir); len(n) != 0 {
				t.Fatalf("the failed write left %q", n)
			}
			if err := WriteKeyFile(p, k); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if n := names(t, dir); len(n) != 1 || n[0] != "steward.key" {
				t.Fatalf("after the retry the directory holds %q, want only the key", n)
			}
			got, err := LoadKeyFile(p)
			if err != nil || got.ID() != k.ID() {
				t.Fatalf("reload: %v", err)
			}
		})
	}
}

func TestWriteKeyFileNeverOverwrites(t *testing.T) {
	k, err := GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p string)
	}{
		{"regular file", func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("precious"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, p string) {
			if err := os.Symlink(filepath.Join(filepath.Dir(p), "nowhere"), p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "steward.key")
			tc.setup(t, p)
			before, _ := os.Readlink(p)
			content, _ := os.ReadFile(p)
			if err := WriteKeyFile(p, k); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
				t.Fatalf("write over %s: %v", tc.name, err)
			}
			after, _ := os.Readlink(p)
			again, _ := os.ReadFile(p)
			if before != after || !bytes.Equal(content, again) {
				t.Fatal("the existing path was changed")
			}
			if n := names(t, dir); len(n) != 1 {
				t.Fatalf("the refused write left %q", n)
			}
		})
	}
}

func TestLoadKeyFileRefusesNonKeys(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.key")
	if err := os.WriteFile(big, bytes.Repeat([]byte("A"), maxKeyFile+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
	}{
		{fifo, "not a regular file"},
		{dir, "not a regular file"},
		{"/dev/zero", "not a regular file"},
		{big, "too large"},
		{filepath.Join(dir, "absent"), "no such file"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			// A FIFO with no writer would block a plain open forever; the
			// deadline turns such a hang into a failure instead of a stuck
			// test run.
			done := make(chan error, 1)
			go func() {
				_, err := LoadKeyFile(tc.path)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
					t.Fatalf("load %s: %v, want an error naming the path and saying %q", tc.path, err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("load %s hung", tc.path)
			}
		})
	}
}
