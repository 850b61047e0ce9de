package config

import (
	"errors"
	"slices"
	"testing"
)

func TestAliases(t *testing.T) {
	ref := func(name, aliases string) string {
		return "[[backend]]\nname = \"" + name + "\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 10\naliases = " + aliases + "\n"
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []want
	}{
		{"another backend's name", ref("a", `["b"]`) + ref("b", `[]`), []want{{6, "backend[0].aliases", `"b" is another backend's name`}}},
		{"its own name", ref("a", `["a"]`), []want{{6, "backend[0].aliases", `"a" is this backend's own name`}}},
		{"twice", ref("a", `["m"]`) + ref("b", `["m"]`), []want{{12, "backend[1].aliases", `"m" is already an alias of backend "a"`}}},
		{"empty", ref("a", `[""]`), []want{{6, "backend[0].aliases", "alias 0 is empty"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("err = %v, want *Problems", err)
			}
			checkProblems(t, ps, tc.want)
		})
	}
	c, err := Parse([]byte(ref("a", `["llama-3.2-1b", "small"]`)), "ok.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Backends[0].Aliases, []string{"llama-3.2-1b", "small"}) {
		t.Fatalf("aliases %q", c.Backends[0].Aliases)
	}
}
