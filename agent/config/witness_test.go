package config

import (
	"strings"
	"testing"
)

func TestWitnessKeys(t *testing.T) {
	const minimal = "[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 10\n"
	cases := []struct {
		name, steward string
		wantErr       string
		wantDevice    string
		wantIndex     uint32
	}{
		{"absent", "", "", "", 0},
		{"none", `witness = "none"`, "", "", 0},
		{"tpm defaults", `witness = "tpm"`, "", DefaultWitnessDevice, 0},
		{"tpm socket and index", "witness = \"tpm\"\nwitness_device = \"/run/swtpm.sock\"\nwitness_index = 0x01000042", "", "/run/swtpm.sock", 0x01000042},
		{"unknown kind", `witness = "fleet"`, `steward.witness: "fleet" is not one of "none" or "tpm"`, "", 0},
		{"device without tpm", `witness_device = "/dev/tpm0"`, `steward.witness_device: is set but steward.witness is "none"`, "", 0},
		{"index outside NV", "witness = \"tpm\"\nwitness_index = 0x81000001", "steward.witness_index: 0x81000001 is not a TPM NV index", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := "[steward]\nstate_dir = \"/s\"\n" + c.steward + "\n" + minimal
			cfg, err := Parse([]byte(doc), "w.toml")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Steward.WitnessDevice != c.wantDevice || cfg.Steward.WitnessIndex != c.wantIndex {
				t.Fatalf("device %q index %#x, want %q %#x", cfg.Steward.WitnessDevice, cfg.Steward.WitnessIndex, c.wantDevice, c.wantIndex)
			}
		})
	}
}
