package release

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// SBOMOptions names what the SBOM describes. Binaries are the files whose
// embedded build information (what `go version -m` prints) is read.
type SBOMOptions struct {
	Name     string    // the package, e.g. "meshd"
	Version  string    // the release version, as in the package's file name
	Arch     string    // Debian architecture: amd64, arm64, armhf, riscv64
	Time     time.Time // SOURCE_DATE_EPOCH: the SBOM's timestamp
	Binaries []string
}

// The subset of CycloneDX 1.5 (https://cyclonedx.org/docs/1.5/json/) that
// a Go binary's build information can fill truthfully: every module linked
// in, at the version and with the go.sum hash recorded by the toolchain,
// plus the toolchain itself and the build settings. Nothing is guessed
// (no licences, no suppliers): a consumer may trust each field it finds.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	SerialNumber string          `json:"serialNumber"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Type       string         `json:"type"`
	BOMRef     string         `json:"bom-ref,omitempty"`
	Name       string         `json:"name"`
	Version    string         `json:"version,omitempty"`
	PURL       string         `json:"purl,omitempty"`
	Hashes     []cdxHash      `json:"hashes,omitempty"`
	Properties []cdxProperty  `json:"properties,omitempty"`
	Components []cdxComponent `json:"components,omitempty"`
}

type cdxHash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// SBOM returns a CycloneDX 1.5 JSON document for the binaries of one
// architecture. The bytes depend only on the binaries and opts: the
// timestamp is opts.Time and the serial number is derived from the
// document's content, so two builds of the same tree give the same SBOM.
func SBOM(opts SBOMOptions) ([]byte, error) {
	if opts.Name == "" || opts.Version == "" || opts.Arch == "" {
		return nil, fmt.Errorf("sbom: name, version and arch are required (got %q, %q, %q)", opts.Name, opts.Version, opts.Arch)
	}
	if len(opts.Binaries) == 0 {
		return nil, fmt.Errorf("sbom: no binaries")
	}
	bins := append([]string(nil), opts.Binaries...)
	sort.Strings(bins)

	type mod struct {
		path, version, sum string
		usedBy             []string
	}
	mods := map[string]*mod{} // by path@version
	var goVersion string
	var settings []debug.BuildSetting
	var binComponents []cdxComponent
	for _, b := range bins {
		info, err := buildinfo.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("sbom: reading the build information of %s: %w", b, err)
		}
		name := filepath.Base(b)
		if goVersion == "" {
			goVersion, settings = info.GoVersion, info.Settings
		} else if info.GoVersion != goVersion {
			return nil, fmt.Errorf("sbom: %s was built by %s, the others by %s", name, info.GoVersion, goVersion)
		}
		binComponents = append(binComponents, cdxComponent{
			Type:    "application",
			BOMRef:  "bin:" + name,
			Name:    name,
			Version: opts.Version,
			Properties: []cdxProperty{
				{Name: "go:package", Value: info.Path},
			},
		})
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			key := d.Path + "@" + d.Version
			m := mods[key]
			if m == nil {
				m = &mod{path: d.Path, version: d.Version, sum: d.Sum}
				mods[key] = m
			}
			m.usedBy = append(m.usedBy, "bin:"+name)
		}
	}

	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	std := cdxComponent{
		Type:    "library",
		BOMRef:  "pkg:golang/std@" + goVersion,
		Name:    "std",
		Version: goVersion,
		PURL:    "pkg:golang/std@" + goVersion,
	}
	components := []cdxComponent{std}
	depOf := map[string][]string{}
	for _, k := range keys {
		m := mods[k]
		purl := "pkg:golang/" + m.path + "@" + m.version
		c := cdxComponent{Type: "library", BOMRef: purl, Name: m.path, Version: m.version, PURL: purl}
		if h, ok := h1SHA256(m.sum); ok {
			// go.sum's h1: is the SHA-256 of the module's dirhash summary.
			c.Hashes = []cdxHash{{Alg: "SHA-256", Content: h}}
			c.Properties = []cdxProperty{{Name: "go:sum", Value: m.sum}}
		}
		components = append(components, c)
		for _, b := range m.usedBy {
			depOf[b] = append(depOf[b], purl)
		}
	}

	props := []cdxProperty{{Name: "debian:architecture", Value: opts.Arch}, {Name: "go:version", Value: goVersion}}
	for _, s := range settings {
		props = append(props, cdxProperty{Name: "go:build:" + s.Key, Value: s.Value})
	}
	mainRef := "pkg:deb/" + opts.Name + "@" + opts.Version + "?arch=" + opts.Arch
	var deps []cdxDependency
	var binRefs []string
	for _, c := range binComponents {
		binRefs = append(binRefs, c.BOMRef)
		on := append([]string{std.BOMRef}, depOf[c.BOMRef]...)
		sort.Strings(on)
		deps = append(deps, cdxDependency{Ref: c.BOMRef, DependsOn: on})
	}
	deps = append([]cdxDependency{{Ref: mainRef, DependsOn: binRefs}}, deps...)

	bom := cdxBOM{
		BOMFormat:   "CycloneDX",
		SpecVersion: "1.5",
		Version:     1,
		Metadata: cdxMetadata{
			Timestamp: opts.Time.UTC().Format(time.RFC3339),
			Tools: cdxTools{Components: []cdxComponent{{
				Type: "application", Name: "meshd/internal/release", Version: goVersion,
			}}},
			Component: cdxComponent{
				Type:       "application",
				BOMRef:     mainRef,
				Name:       opts.Name,
				Version:    opts.Version,
				PURL:       mainRef,
				Properties: props,
				Components: binComponents,
			},
		},
		Components:   components,
		Dependencies: deps,
	}
	body, err := json.Marshal(bom)
	if err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	bom.SerialNumber = "urn:uuid:" + contentUUID(body)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	return out.Bytes(), nil
}

// contentUUID is an RFC 9562 version 8 (custom) UUID made of the SHA-256
// of the document without its serial number: the same content always gets
// the same serial, a different one a different serial.
func contentUUID(b []byte) string {
	h := sha256.Sum256(b)
	h[6] = h[6]&0x0f | 0x80 // version 8
	h[8] = h[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// h1SHA256 turns go.sum's "h1:<base64>" into hex, or reports false for a
// sum in another form (or none, as for a replaced directory module).
func h1SHA256(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != sha256.Size {
		return "", false
	}
	return fmt.Sprintf("%x", raw), true
}
