package config

import (
	"slices"
	"strings"
	"testing"
)

func TestCORSOrigins(t *testing.T) {
	tests := []struct {
		origins string
		problem string // "" accepted
	}{
		{`[]`, ""},
		{`["https://dash.example.org", "http://127.0.0.1:3000"]`, ""},
		{`["*"]`, ""},
		{`["*", "https://a.example"]`, `listen.cors_origins[0]: "*" allows every origin`},
		{`["dash.example.org"]`, `listen.cors_origins[0]: "dash.example.org": an origin is http:// or https://`},
		{`["https://a.example", "https://b.example/app"]`, `listen.cors_origins[1]: "https://b.example/app": an origin is only scheme://host[:port]`},
		{`["https://a.example/"]`, `without a trailing slash ("https://a.example")`},
		{`["https://Dash.example.org"]`, `lower case`},
		{`["ftp://a.example"]`, `an origin is http:// or https://`},
	}
	for _, tt := range tests {
		t.Run(tt.origins, func(t *testing.T) {
			c, err := Parse([]byte("[listen]\ncors_origins = "+tt.origins+"\n\n"+authBackend), "cors.toml")
			switch {
			case tt.problem == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.problem == "" && !slices.Equal(c.Listen.CORSOrigins, parseList(tt.origins)):
				t.Errorf("cors_origins = %q", c.Listen.CORSOrigins)
			case tt.problem != "" && (err == nil || !strings.Contains(err.Error(), tt.problem) || !strings.Contains(err.Error(), "cors.toml:2:")):
				t.Errorf("got %v, want a problem at line 2 saying %q", err, tt.problem)
			}
		})
	}
}

// parseList reads a TOML list of plain strings back, for the comparison.
func parseList(s string) []string {
	var out []string
	for _, f := range strings.Split(strings.Trim(s, "[]"), ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			out = append(out, f)
		}
	}
	return out
}
