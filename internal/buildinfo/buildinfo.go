// Package buildinfo says which build of meshd is running: the module
// version, the VCS revision and whether the tree was dirty, the Go version
// and the target architecture, read from what the Go toolchain stamped into
// the binary (runtime/debug.ReadBuildInfo). Every place that names the
// build — `version` subcommands, the meshd_build_info metric, /v1/node and
// benchmark reports — uses String, so a bug report quotes one string.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is one build's identity.
type Info struct {
	// Module is the main module's path ("meshd").
	Module string
	// Version is the module version the toolchain stamped: a tag, a
	// pseudo-version derived from VCS, or "(devel)".
	Version string
	// Revision is the VCS commit ("" when built without VCS information,
	// e.g. from a tarball or under `go test`).
	Revision string
	// Time is the commit's time (RFC 3339), "" when unknown.
	Time string
	// Dirty: the tree had uncommitted changes when built.
	Dirty bool
	// GoVersion is the toolchain that built the binary ("go1.26.8").
	GoVersion string
	// OS and Arch are the build target; Variant is the architecture's
	// level where the toolchain records one (GOARM=7 → "v7", GOAMD64=v3).
	OS, Arch, Variant string
}

// Read returns the running binary's Info. It never fails: a binary without
// build information (unusual) reports "(devel)" and the runtime's own
// Go version and architecture.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fromBuild(nil)
	}
	return fromBuild(bi)
}

// fromBuild is Read for a given build information, so tests can give one.
func fromBuild(bi *debug.BuildInfo) Info {
	in := Info{Module: "meshd", Version: "(devel)", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		return in
	}
	if bi.Main.Path != "" {
		in.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Dirty = s.Value == "true"
		case "GOOS":
			in.OS = s.Value
		case "GOARCH":
			in.Arch = s.Value
		case "GOARM", "GOAMD64", "GOARM64", "GORISCV64", "GO386", "GOMIPS", "GOMIPS64", "GOPPC64":
			// Only the variable of the target architecture is recorded.
			in.Variant = strings.TrimPrefix(s.Value, "v")
			in.Variant = "v" + in.Variant
		}
	}
	return in
}

// Rev is the revision as printed: twelve hex digits (as `git log
// --abbrev=12` would) and "+dirty" when the tree had changes; "unknown"
// without VCS information.
func (in Info) Rev() string {
	r := in.Revision
	if r == "" {
		r = "unknown"
	} else if len(r) > 12 {
		r = r[:12]
	}
	if in.Dirty {
		r += "+dirty"
	}
	return r
}

// Platform is "linux/arm64", or "linux/arm/v7" where a variant is known.
func (in Info) Platform() string {
	p := in.OS + "/" + in.Arch
	if in.Variant != "" {
		p += "/" + in.Variant
	}
	return p
}

// String is the one-line identity every report carries:
// "meshd v1.2.3 (rev 0123456789ab+dirty, go1.26.8, linux/arm64)".
func (in Info) String() string {
	return in.Module + " " + in.Version + " (rev " + in.Rev() + ", " + in.GoVersion + ", " + in.Platform() + ")"
}
