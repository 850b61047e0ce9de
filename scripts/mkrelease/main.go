// Command mkrelease writes the byte-reproducible parts of a release for
// scripts/release.sh (`make release`):
//
//	mkrelease tar  -root DIR -prefix NAME -epoch SECONDS -o FILE.tar.gz
//	mkrelease sbom -name meshd -version V -arch DEBARCH -epoch SECONDS -o FILE.cdx.json BINARY...
//
// The logic is in meshd/internal/release.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"meshd/internal/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: mkrelease tar|sbom [flags]")
	}
	fs := flag.NewFlagSet("mkrelease "+args[0], flag.ContinueOnError)
	out := fs.String("o", "", "output file")
	epoch := fs.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "timestamp in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	var write func(t time.Time) ([]byte, error)
	switch args[0] {
	case "tar":
		root := fs.String("root", "", "directory to archive")
		prefix := fs.String("prefix", "", "top directory name inside the archive")
		write = func(t time.Time) ([]byte, error) {
			if *root == "" {
				return nil, errors.New("tar: -root is required")
			}
			var b bytes.Buffer
			err := release.TarGz(&b, *root, *prefix, t)
			return b.Bytes(), err
		}
	case "sbom":
		name := fs.String("name", "meshd", "package name")
		version := fs.String("version", "", "release version")
		arch := fs.String("arch", "", "Debian architecture")
		write = func(t time.Time) ([]byte, error) {
			return release.SBOM(release.SBOMOptions{Name: *name, Version: *version, Arch: *arch, Time: t, Binaries: fs.Args()})
		}
	default:
		return fmt.Errorf("unknown subcommand %q (want tar or sbom)", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-o is required")
	}
	sec, err := strconv.ParseInt(*epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("-epoch %q is not a non-negative number of seconds", *epoch)
	}
	b, err := write(time.Unix(sec, 0))
	if err != nil {
		return err
	}
	// Written beside the target and renamed: a failed run leaves no
	// half-written artefact that SHA256SUMS could pick up.
	tmp, err := os.CreateTemp(filepath.Dir(*out), ".mkrelease-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), *out)
}
