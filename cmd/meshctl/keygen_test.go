package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"meshd/steward"
)

func TestKeygen(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup prepares dir and returns the -o path.
		setup func(t *testing.T, dir string) string
		want  string // "" for success, else a fragment of the error
	}{
		{"new file", func(t *testing.T, dir string) string { return filepath.Join(dir, "s.key") }, ""},
		{"existing file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s.key")
			if err := os.WriteFile(p, []byte("an older key"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "refusing to overwrite"},
		{"dangling symlink", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s.key")
			if err := os.Symlink(filepath.Join(dir, "elsewhere"), p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "refusing to overwrite"},
		{"FIFO", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s.key")
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "refusing to overwrite"},
		{"missing directory", func(t *testing.T, dir string) string { return filepath.Join(dir, "absent", "s.key") }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tc.setup(t, dir)
			before := entries(t, dir)
			var out, errb bytes.Buffer
			err := run(context.Background(), []string{"keygen", "-o", p}, &out, &errb)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("keygen: %v, want an error saying %q", err, tc.want)
				}
				if after := entries(t, dir); !bytes.Equal(before, after) {
					t.Fatalf("a refused keygen changed the directory:\n%s\n->\n%s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			k, err := steward.LoadKeyFile(p)
			if err != nil {
				t.Fatalf("the written key does not load: %v", err)
			}
			if !strings.Contains(out.String(), "steward "+k.ID()) {
				t.Fatalf("keygen printed %q, not the id of the key it wrote (%s)", out.String(), k.ID())
			}
			if es, _ := os.ReadDir(dir); len(es) != 1 || es[0].Name() != "s.key" {
				t.Fatalf("keygen left %v in the directory, want only the key", es)
			}
		})
	}
	if err := run(context.Background(), []string{"keygen", filepath.Join(t.TempDir(), "s.key")}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, errUsage) {
		t.Fatalf("keygen with a path but no -o: %v, want a usage error", err)
	}
}

// entries describes dir: each name, with the content of regular files, so
// that any change a keygen makes shows.
func entries(t *testing.T, dir string) []byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range es {
		b.WriteString(e.Name())
		if e.Type().IsRegular() {
			c, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(": " + string(c))
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}
