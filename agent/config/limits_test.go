package config

import (
	"errors"
	"testing"
)

func TestLimits(t *testing.T) {
	const ref = "[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 10\n"
	const gguf = "[[backend]]\nname = \"g\"\nkind = \"mesh-gguf\"\nmodel = \"/m.gguf\"\nfidelity = 1\nuj_per_token = 10\ncontext = 512\n"
	for _, tc := range []struct {
		name string
		doc  string
		want []want
	}{
		{"cap below the default ceiling", "[limits]\nmax_joule_ceiling_uj = 1000\n" + ref,
			[]want{{2, "limits.max_joule_ceiling_uj", "defaults.joule_ceiling_uj 1000000000 is over limits.max_joule_ceiling_uj 1000"}}},
		{"explicit default over the cap", "[defaults]\njoule_ceiling_uj = 5000\n[limits]\nmax_joule_ceiling_uj = 4000\n" + ref,
			[]want{{2, "defaults.joule_ceiling_uj", "is over limits.max_joule_ceiling_uj 4000"}}},
		{"zero cap", "[limits]\nmax_joule_ceiling_uj = 0\n" + ref,
			[]want{{2, "limits.max_joule_ceiling_uj", "must be > 0"}}},
		{"max_tokens zero", ref + "max_tokens = 0\n",
			[]want{{6, "backend[0].max_tokens", "0 is outside 1..2147483647"}}},
		{"max_tokens past int32", ref + "max_tokens = 2147483648\n",
			[]want{{6, "backend[0].max_tokens", "2147483648 is outside 1..2147483647"}}},
		{"max_tokens over the context", gguf + "max_tokens = 513\n",
			[]want{{8, "backend[0].max_tokens", "513 is over the context 512"}}},
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

	c, err := Parse([]byte(gguf+"max_tokens = 512\n"+ref+"max_tokens = 2147483647\n"), "ok.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxJouleCeilingUJ != DefaultMaxJouleCeilingUJ || c.Backends[0].MaxTokens != 512 || c.Backends[1].MaxTokens != MaxBackendTokens {
		t.Fatalf("limits %+v, backends' max_tokens %d %d", c.Limits, c.Backends[0].MaxTokens, c.Backends[1].MaxTokens)
	}
}
