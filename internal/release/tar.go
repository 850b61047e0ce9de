// Package release writes the release artefacts whose bytes must not depend
// on the machine, the clock or the file system that made them: gzipped
// tarballs and a CycloneDX SBOM. `make release` (scripts/release.sh)
// calls it through scripts/mkrelease; the Debian packages themselves are
// built by dpkg-deb.
package release

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"
)

// TarGz writes the tree under root into w as a gzipped tar whose every
// entry is named prefix/<relative path>, in byte order of the names, owned
// by root:root (0:0), with modification time mtime and no access or change
// times. Modes are normalised to 0755 for directories and for files with
// any execute bit, 0644 for every other file, so the builder's umask does
// not leak into the archive. The gzip header carries no name and no time.
// Only directories, regular files and symbolic links are accepted.
func TarGz(w io.Writer, root, prefix string, mtime time.Time) error {
	if prefix == "" || path.IsAbs(prefix) || path.Clean(prefix) != prefix {
		return fmt.Errorf("tar: prefix %q must be a clean relative name", prefix)
	}
	type entry struct {
		name string // slash-separated, relative to root; "" is root itself
		info fs.FileInfo
	}
	var entries []entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		entries = append(entries, entry{filepath.ToSlash(rel), info})
		return nil
	})
	if err != nil {
		return fmt.Errorf("tar: walking %s: %w", root, err)
	}
	// WalkDir already visits in lexical order per directory; sorting the
	// full names makes the order independent of that detail.
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })

	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	// No Name, zero ModTime: gzip's header then says nothing about here or now.
	tw := tar.NewWriter(zw)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, e := range entries {
		name := prefix
		if e.name != "" {
			name = prefix + "/" + e.name
		}
		hdr := &tar.Header{
			Name:    name,
			ModTime: mtime,
			Uid:     0,
			Gid:     0,
			Uname:   "root",
			Gname:   "root",
			Format:  tar.FormatPAX,
		}
		mode := e.info.Mode()
		var src string
		switch {
		case mode.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			hdr.Mode = 0o755
		case mode.IsRegular():
			hdr.Typeflag = tar.TypeReg
			hdr.Size = e.info.Size()
			hdr.Mode = 0o644
			if mode.Perm()&0o111 != 0 {
				hdr.Mode = 0o755
			}
			src = filepath.Join(root, filepath.FromSlash(e.name))
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(e.name)))
			if err != nil {
				return fmt.Errorf("tar: %w", err)
			}
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = target
			hdr.Mode = 0o777
		default:
			return fmt.Errorf("tar: %s is a %v, not a directory, file or link", e.name, mode.Type())
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("tar: header of %s: %w", name, err)
		}
		if src != "" {
			if err := copyFile(tw, src, hdr.Size); err != nil {
				return fmt.Errorf("tar: %s: %w", name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("tar: gzip: %w", err)
	}
	return nil
}

func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("changed while archived: %d bytes, expected %d", n, size)
	}
	return nil
}
