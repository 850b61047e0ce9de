package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	content := bytes.Repeat([]byte("g"), 100)
	if err := os.WriteFile(exact, content, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, append(bytes.Clone(content), 'x'), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want []byte
		err  error  // nil: the read succeeds
		says string // the error also says this
	}{
		{name: "file at the limit", path: exact, want: content},
		{name: "empty file", path: empty, want: []byte{}},
		{name: "one byte over", path: big, err: ErrTooLarge, says: "101 bytes"},
		// Read without a limit, /dev/zero would exhaust memory.
		{name: "/dev/zero", path: "/dev/zero", err: ErrNotRegular, says: "character device"},
		{name: "FIFO without a writer", path: fifo, err: ErrNotRegular, says: "FIFO"},
		{name: "directory", path: dir, err: ErrNotRegular, says: "directory"},
		{name: "absent", path: filepath.Join(dir, "absent"), err: fs.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				b   []byte
				err error
			}
			// The deadline turns a hang (a FIFO opened blocking) into a
			// failure rather than a stuck test binary.
			done := make(chan result, 1)
			go func() {
				b, err := ReadFileLimit(tc.path, int64(len(content)))
				done <- result{b, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("ReadFileLimit(%s) hung", tc.path)
			}
			if tc.err == nil {
				if r.err != nil || !bytes.Equal(r.b, tc.want) {
					t.Fatalf("got %d bytes, %v; want %d bytes", len(r.b), r.err, len(tc.want))
				}
				return
			}
			if r.b != nil || !errors.Is(r.err, tc.err) || !strings.Contains(r.err.Error(), tc.path) || !strings.Contains(r.err.Error(), tc.says) {
				t.Fatalf("got %d bytes, %v; want %v naming %s and saying %q", len(r.b), r.err, tc.err, tc.path, tc.says)
			}
		})
	}
}
