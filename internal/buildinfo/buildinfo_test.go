package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	tests := []struct {
		name     string
		bi       *debug.BuildInfo
		want     string
		platform string
	}{
		{
			name: "no build information",
			want: "meshd (devel) (rev unknown, " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")",
		},
		{
			name: "tagged clean build",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "meshd", Version: "v1.2.3"},
				Settings: []debug.BuildSetting{
					{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
					{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
					{Key: "vcs.modified", Value: "false"},
				}},
			want: "meshd v1.2.3 (rev 0123456789ab, go1.26.8, linux/arm64)",
		},
		{
			name: "dirty 32-bit ARM build",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "meshd", Version: "v0.0.0-20260101000000-0123456789ab+dirty"},
				Settings: []debug.BuildSetting{
					{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm"}, {Key: "GOARM", Value: "7"},
					{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
					{Key: "vcs.modified", Value: "true"},
				}},
			want: "meshd v0.0.0-20260101000000-0123456789ab+dirty (rev 0123456789ab+dirty, go1.26.8, linux/arm/v7)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromBuild(tt.bi).String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadNamesThisToolchain(t *testing.T) {
	in := Read()
	if in.GoVersion != runtime.Version() || in.Arch != runtime.GOARCH {
		t.Errorf("Read() = %+v, want go %s arch %s", in, runtime.Version(), runtime.GOARCH)
	}
}
