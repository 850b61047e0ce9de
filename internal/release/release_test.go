package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tree writes the same files under dir with the given file times and
// permission style, as two builders with different clocks and umasks would.
func tree(t *testing.T, dir string, mtime time.Time, loose bool) {
	t.Helper()
	files := []struct {
		name string
		mode os.FileMode
		body string
	}{
		{"usr/bin/meshd", 0o755, "\x7fELF pretend"},
		{"README.md", 0o644, "hello\n"},
		{"etc/meshd/meshd.toml", 0o644, "[listen]\n"},
		{"a/b/c/deep.txt", 0o600, "deep"},
	}
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		mode := f.mode
		if loose {
			mode |= 0o060 // a group-writable umask
		}
		if err := os.WriteFile(p, []byte(f.body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("meshd", filepath.Join(dir, "usr/bin/meshd-link")); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.Mode()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, mtime, mtime)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTarGzIsReproducibleAndNormalised(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0)
	a, b := t.TempDir(), t.TempDir()
	tree(t, a, time.Unix(1, 0), false)
	tree(t, b, time.Now(), true)
	var ta, tb bytes.Buffer
	if err := TarGz(&ta, a, "meshd_1.0_linux_amd64", epoch); err != nil {
		t.Fatal(err)
	}
	if err := TarGz(&tb, b, "meshd_1.0_linux_amd64", epoch); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta.Bytes(), tb.Bytes()) {
		t.Fatalf("two trees differing only in file times and umask gave different tarballs (%d and %d bytes)", ta.Len(), tb.Len())
	}

	zr, err := gzip.NewReader(bytes.NewReader(ta.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Fatalf("gzip header carries name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	want := []struct {
		name string
		mode int64
		body string
	}{
		{"meshd_1.0_linux_amd64/", 0o755, ""},
		{"meshd_1.0_linux_amd64/README.md", 0o644, "hello\n"},
		{"meshd_1.0_linux_amd64/a/", 0o755, ""},
		{"meshd_1.0_linux_amd64/a/b/", 0o755, ""},
		{"meshd_1.0_linux_amd64/a/b/c/", 0o755, ""},
		{"meshd_1.0_linux_amd64/a/b/c/deep.txt", 0o644, "deep"},
		{"meshd_1.0_linux_amd64/etc/", 0o755, ""},
		{"meshd_1.0_linux_amd64/etc/meshd/", 0o755, ""},
		{"meshd_1.0_linux_amd64/etc/meshd/meshd.toml", 0o644, "[listen]\n"},
		{"meshd_1.0_linux_amd64/usr/", 0o755, ""},
		{"meshd_1.0_linux_amd64/usr/bin/", 0o755, ""},
		{"meshd_1.0_linux_amd64/usr/bin/meshd", 0o755, "\x7fELF pretend"},
		{"meshd_1.0_linux_amd64/usr/bin/meshd-link", 0o777, ""},
	}
	for i, w := range want {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("entry %d (%s): %v", i, w.name, err)
		}
		if h.Name != w.name || h.Mode != w.mode || h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" {
			t.Fatalf("entry %d: %s mode %o %d:%d %s:%s; want %s mode %o root 0:0", i, h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, w.name, w.mode)
		}
		if !h.ModTime.Equal(epoch) || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Fatalf("%s: times %v %v %v; want mtime %v only", h.Name, h.ModTime, h.AccessTime, h.ChangeTime, epoch)
		}
		body, _ := io.ReadAll(tr)
		if string(body) != w.body {
			t.Fatalf("%s: body %q, want %q", h.Name, body, w.body)
		}
		if strings.HasSuffix(w.name, "-link") && (h.Typeflag != tar.TypeSymlink || h.Linkname != "meshd") {
			t.Fatalf("%s: type %c -> %q; want a link to meshd", h.Name, h.Typeflag, h.Linkname)
		}
	}
	if h, err := tr.Next(); err != io.EOF {
		t.Fatalf("extra entry %v (err %v)", h, err)
	}

	// A different time is a different archive: the epoch is really used.
	var tc bytes.Buffer
	if err := TarGz(&tc, a, "meshd_1.0_linux_amd64", epoch.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ta.Bytes(), tc.Bytes()) {
		t.Fatal("the epoch does not reach the archive")
	}
}

func TestTarGzRefuses(t *testing.T) {
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, prefix, want string
	}{
		{"empty prefix", t.TempDir(), "", "must be a clean relative name"},
		{"absolute prefix", t.TempDir(), "/meshd", "must be a clean relative name"},
		{"unclean prefix", t.TempDir(), "meshd/../x", "must be a clean relative name"},
		{"missing root", filepath.Join(t.TempDir(), "absent"), "meshd", "walking"},
		{"a fifo", fifoDir, "meshd", "pipe is a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := TarGz(io.Discard, tc.root, tc.prefix, time.Unix(0, 0))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
}

func TestSBOMFromBuildInfo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts := SBOMOptions{Name: "meshd", Version: "1.2.3", Arch: "armhf", Time: time.Unix(1_700_000_000, 0), Binaries: []string{self}}
	a, err := SBOM(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := SBOM(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two SBOMs of the same binaries differ")
	}
	var doc struct {
		BOMFormat, SpecVersion, SerialNumber string
		Metadata                             struct {
			Timestamp string
			Component struct {
				Name, Version, PURL string
				Properties          []cdxProperty
				Components          []cdxComponent
			}
		}
		Components []cdxComponent
	}
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if doc.BOMFormat != "CycloneDX" || doc.SpecVersion != "1.5" || doc.Metadata.Timestamp != "2023-11-14T22:13:20Z" {
		t.Fatalf("header %q %q %q", doc.BOMFormat, doc.SpecVersion, doc.Metadata.Timestamp)
	}
	if len(doc.SerialNumber) != len("urn:uuid:")+36 || doc.SerialNumber[len("urn:uuid:")+14] != '8' {
		t.Fatalf("serial %q is not a version 8 UUID URN", doc.SerialNumber)
	}
	if doc.Metadata.Component.PURL != "pkg:deb/meshd@1.2.3?arch=armhf" {
		t.Fatalf("main purl %q", doc.Metadata.Component.PURL)
	}
	if len(doc.Metadata.Component.Components) != 1 || doc.Metadata.Component.Components[0].Name != filepath.Base(self) {
		t.Fatalf("binaries %+v", doc.Metadata.Component.Components)
	}
	if len(doc.Components) == 0 || doc.Components[0].PURL != "pkg:golang/std@"+runtime.Version() {
		t.Fatalf("first component %+v; want the standard library of %s", doc.Components, runtime.Version())
	}
	var sawGOARCH bool
	for _, p := range doc.Metadata.Component.Properties {
		if p.Name == "go:build:GOARCH" && p.Value == runtime.GOARCH {
			sawGOARCH = true
		}
	}
	if !sawGOARCH {
		t.Fatalf("no go:build:GOARCH=%s in %+v", runtime.GOARCH, doc.Metadata.Component.Properties)
	}

	opts.Version = "1.2.4"
	c, err := SBOM(opts)
	if err != nil {
		t.Fatal(err)
	}
	var doc2 struct{ SerialNumber string }
	_ = json.Unmarshal(c, &doc2)
	if doc2.SerialNumber == doc.SerialNumber {
		t.Fatal("a different version kept the same serial number")
	}
}

func TestSBOMRefuses(t *testing.T) {
	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := SBOMOptions{Name: "meshd", Version: "1", Arch: "amd64", Time: time.Unix(0, 0)}
	for _, tc := range []struct {
		name string
		edit func(*SBOMOptions)
		want string
	}{
		{"no binaries", func(o *SBOMOptions) {}, "no binaries"},
		{"no version", func(o *SBOMOptions) { o.Version = ""; o.Binaries = []string{notGo} }, "are required"},
		{"not a Go binary", func(o *SBOMOptions) { o.Binaries = []string{notGo} }, "reading the build information of " + notGo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			_, err := SBOM(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want one containing %q", err, tc.want)
			}
		})
	}
}

func TestH1SHA256(t *testing.T) {
	for _, tc := range []struct {
		sum, hex string
		ok       bool
	}{
		// An h1: sum is the base64 of 32 bytes.
		{"h1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", true},
		{"", "", false},
		{"h2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "", false},
		{"h1:AAEC", "", false},
		{"h1:not base64!", "", false},
	} {
		got, ok := h1SHA256(tc.sum)
		if got != tc.hex || ok != tc.ok {
			t.Errorf("h1SHA256(%q) = %q, %v; want %q, %v", tc.sum, got, ok, tc.hex, tc.ok)
		}
	}
}
