package config

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	keyA = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
	keyB = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
)

// full sets (nearly) every key, so a renamed tag or a lost field shows.
const full = `
[steward]
state_dir = "/srv/meshd"
key_file = "keys/steward.key"
checkpoint_every = 64

[listen]
tcp = ["127.0.0.1:9000", "[::1]:9000"]
unix = "/run/meshd/meshd.sock"
max_body_bytes = 2048
read_header_timeout = "1s"
read_timeout = "2s"
idle_timeout = "3s"
serve_timeout = "4m"
shutdown_timeout = "5s"
max_in_flight = 8

[grants]
policy = "required"
trusted_issuers = ["` + keyA + `"]
trusted_issuers_file = "/etc/meshd/issuers"

[metering]
on_meter_failure = "estimate"
shared = true
ready_timeout = "1m"

[log]
level = "debug"
format = "json"

[[meter]]
name = "board"
driver = "ina226"
bus = "/dev/i2c-1"
address = 0x41
shunt_uohm = 2000
max_current_a = 3.2
preset = "shunt-only"
bus_tolerance = 0.05

[[meter]]
name = "cpu"
driver = "rapl"
zone = "package-0/dram"
inside = "board"

[[meter]]
name = "gpu"
driver = "nvml"
gpu = 1

[[meter]]
name = "usb"
driver = "line"
device = "/dev/ttyACM0"
max_mw = 15000

[[meter]]
name = "vdd"
driver = "hwmon"
rail = "VDD_IN"

[[backend]]
name = "big.q4"
kind = "llama-server"
model = "/m/big.gguf"
fidelity = 3
uj_per_token = 250000
meters = ["board", "cpu"]
threads = 4
context = 8192
temperature = 0.7
seed = 7
draft_model = "/m/draft.gguf"
draft_max = 8
draft_min = 2
extra_args = ["--flash-attn"]

[[backend]]
name = "ref"
kind = "reference"
fidelity = 0
uj_per_token = 1
`

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(full), "full.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Steward: Steward{StateDir: "/srv/meshd", KeyFile: "keys/steward.key", CheckpointEvery: 64},
		Listen: Listen{
			TCP: []string{"127.0.0.1:9000", "[::1]:9000"}, Unix: "/run/meshd/meshd.sock", MaxBodyBytes: 2048,
			ReadHeaderTimeout: Duration(time.Second), ReadTimeout: Duration(2 * time.Second), IdleTimeout: Duration(3 * time.Second),
			ServeTimeout: Duration(4 * time.Minute), ShutdownTimeout: Duration(5 * time.Second), MaxInFlight: 8,
		},
		Grants:   Grants{Policy: "required", TrustedIssuers: []string{keyA}, TrustedIssuersFile: "/etc/meshd/issuers"},
		Metering: Metering{OnMeterFailure: "estimate", Shared: true, ReadyTimeout: Duration(time.Minute), RunTimeout: Duration(10 * time.Minute)},
		Log:      Log{Level: "debug", Format: "json"},
		Defaults: Defaults{JouleCeilingUJ: DefaultJouleCeilingUJ, MaxTokens: 16},
		Limits:   Limits{MaxJouleCeilingUJ: DefaultMaxJouleCeilingUJ},
		Auth:     Auth{Anonymous: []string{"serve", "read", "operate"}},
		Meters: []Meter{
			{Name: "board", Driver: "ina226", Bus: "/dev/i2c-1", Address: 0x41, ShuntUOhm: 2000, MaxCurrentA: 3.2, Preset: "shunt-only", BusTolerance: 0.05},
			{Name: "cpu", Driver: "rapl", Zone: "package-0/dram", PowercapRoot: "/sys/class/powercap", Inside: "board"},
			{Name: "gpu", Driver: "nvml", GPU: 1},
			{Name: "usb", Driver: "line", Device: "/dev/ttyACM0", MaxMW: 15000},
			{Name: "vdd", Driver: "hwmon", Rail: "VDD_IN", HwmonRoot: "/sys/class/hwmon"},
		},
		Backends: []Backend{
			{Name: "big.q4", Kind: "llama-server", Model: "/m/big.gguf", Runner: "llama-server", Fidelity: 3, UJPerToken: 250000,
				Meters: []string{"board", "cpu"}, Threads: 4, Context: 8192, Temperature: 0.7, Seed: 7,
				DraftModel: "/m/draft.gguf", DraftMax: 8, DraftMin: 2, ExtraArgs: []string{"--flash-attn"}},
			{Name: "ref", Kind: "reference", Fidelity: 0, UJPerToken: 1, Work: 8},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	for _, tc := range []struct{ got, want string }{
		{c.KeyPath(), "/srv/meshd/keys/steward.key"},
		{c.ReceiptsDir(), "/srv/meshd/receipts"},
		{c.LedgerDir(), "/srv/meshd/ledger"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	if m, ok := c.Meter("board"); !ok || m.MaxCurrentUA() != 3200000 {
		t.Errorf("Meter(board) = %+v, %v; MaxCurrentUA %d", m, ok, m.MaxCurrentUA())
	}
	if _, ok := c.Meter("nope"); ok {
		t.Error("Meter(nope) found")
	}
}

// TestParseDefaults checks every default on the smallest valid file.
func TestParseDefaults(t *testing.T) {
	const minimal = "[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 10\n"
	for _, tc := range []struct {
		name, env, dir string
	}{
		{"plain", "", "/var/lib/meshd"},
		{"systemd", "/var/lib/meshd-unit:/var/lib/other", "/var/lib/meshd-unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STATE_DIRECTORY", tc.env)
			c, err := Parse([]byte(minimal), "min.toml")
			if err != nil {
				t.Fatal(err)
			}
			want := &Config{
				Steward: Steward{StateDir: tc.dir, KeyFile: tc.dir + "/steward.key", CheckpointEvery: 1024},
				Listen: Listen{
					TCP: []string{"127.0.0.1:8477"}, MaxBodyBytes: 1 << 20,
					ReadHeaderTimeout: Duration(5 * time.Second), ReadTimeout: Duration(30 * time.Second),
					IdleTimeout: Duration(120 * time.Second), ServeTimeout: Duration(5 * time.Minute),
					ShutdownTimeout: Duration(30 * time.Second), MaxInFlight: 256,
				},
				Grants:   Grants{Policy: "optional"},
				Metering: Metering{OnMeterFailure: "refuse", ReadyTimeout: Duration(10 * time.Second), RunTimeout: Duration(10 * time.Minute)},
				Log:      Log{Level: "info", Format: "text"},
				Defaults: Defaults{JouleCeilingUJ: DefaultJouleCeilingUJ, MaxTokens: 16},
				Limits:   Limits{MaxJouleCeilingUJ: DefaultMaxJouleCeilingUJ},
				Auth:     Auth{Anonymous: []string{"serve", "read", "operate"}},
				Backends: []Backend{{Name: "r", Kind: "reference", Fidelity: 1, UJPerToken: 10, Work: 8}},
			}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("got  %+v\nwant %+v", c, want)
			}
			if c.KeyPath() != tc.dir+"/steward.key" {
				t.Errorf("KeyPath %q", c.KeyPath())
			}
		})
	}
	// An explicit empty tcp list is kept (no TCP) when unix is set, and an
	// explicit state_dir wins over $STATE_DIRECTORY.
	t.Setenv("STATE_DIRECTORY", "/from/systemd")
	c, err := Parse([]byte("[steward]\nstate_dir = \"/mine\"\n[listen]\ntcp = []\nunix = \"/run/m.sock\"\n"+minimal), "m.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.TCP == nil || len(c.Listen.TCP) != 0 || c.Steward.StateDir != "/mine" {
		t.Errorf("tcp %#v, state_dir %q", c.Listen.TCP, c.Steward.StateDir)
	}
}

// want is an expected problem: its line, key, and a part of its message.
type want struct {
	line int
	key  string
	msg  string
}

// many has one mistake of each kind, each on its own line.
const many = `[steward]
state_dir = "/var/lib/meshd"
checkpiont_every = 5
[listen]
max_in_flight = "lots"
tcp = ["127.0.0.1:8477", "localhost"]
[grants]
policy = "sometimes"
trusted_issuers = ["` + keyA + `", "xyz"]
[metering]
on_meter_failure = "refuse"
[[meter]]
name = "board"
driver = "ina226"
bus = "1"
address = 0x40
shunt_uohm = 2000
[[meter]]
name = "board"
driver = "rapl"
zone = "package-0"
[[backend]]
name = "gguf"
kind = "mesh-gguf"
model = "/m.gguf"
fidelity = 2
uj_per_token = 100
meters = ["board", "ghost"]
work = 4
`

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		want []want
	}{
		{"many", many, []want{
			{3, "steward.checkpiont_every", `unknown key "checkpiont_every" (did you mean "checkpoint_every"?)`},
			{5, "listen.max_in_flight", "wrong type: a string where an integer is expected"},
			{6, "listen.tcp[1]", "not host:port"},
			{8, "grants.policy", `"sometimes" is not one of "optional" or "required"`},
			{9, "grants.trusted_issuers[1]", "want 64 hex characters"},
			{12, "meter[0].max_current_a", "required by driver ina226"},
			{19, "meter[1].name", `duplicate meter name "board" (first at line 13)`},
			{28, "backend[0].meters[1]", `no [[meter]] is named "ghost"`},
			{29, "backend[0].work", "not used by kind mesh-gguf"},
		}},
		{"types and ranges", `[listen]
idle_timeout = 30
serve_timeout = "-1s"
read_timeout = "soon"
max_body_bytes = 10
tcp = []
[log]
level = "loud"
format = 3
[[meter]]
name = "Bad Name"
driver = "ina219"
bus = "1"
address = 0x50
shunt_uohm = 0
max_current_a = 1.5
preset = "slow"
bus_tolerance = 0.1
[[meter]]
name = "dup"
driver = "ina226"
bus = "1"
address = 0x41
shunt_uohm = 1000
max_current_a = 1.0
[[meter]]
name = "dup2"
driver = "ina226"
bus = "/dev/i2c-1"
address = 0x41
shunt_uohm = 1000
max_current_a = 1.0
[[meter]]
name = "serial"
driver = "line"
[[backend]]
name = "x"
kind = "reference"
fidelity = 5
uj_per_token = 0
model = "/m.gguf"
seed = -1
[[backend]]
name = "x"
kind = "llama"
fidelity = 1
uj_per_token = 1
`, []want{
			{2, "listen.idle_timeout", `wrong type: an integer where a duration string like "30s" is expected`},
			{3, "listen.serve_timeout", "must not be negative"},
			{4, "listen.read_timeout", `bad duration "soon"`},
			{5, "listen.max_body_bytes", "outside 1024..67108864"},
			{6, "listen.tcp", "nowhere to listen"},
			{8, "log.level", `"loud" is not one of "debug", "info", "warn" or "error"`},
			{9, "log.format", "wrong type: an integer where a string is expected"},
			{11, "meter[0].name", "use only a-z"},
			{14, "meter[0].address", "0x50 is outside 0x40..0x4f"},
			{15, "meter[0].shunt_uohm", "must be > 0"},
			{17, "meter[0].preset", `"slow" is not one of "precise", "fast", "kernel" or "shunt-only"`},
			{18, "meter[0].bus_tolerance", "only used with preset shunt-only"},
			{30, "meter[2].address", `bus "/dev/i2c-1" address 0x41 is already meter[1] (dup)`},
			{33, "meter[3].device", "required by driver line"},
			{33, "meter[3].max_mw", "required by driver line"},
			{39, "backend[0].fidelity", "5 is outside 0..4"},
			{40, "backend[0].uj_per_token", "must be > 0"},
			{41, "backend[0].model", "not used by kind reference"},
			{42, "backend[0].seed", "negative integer value -1"},
			{44, "backend[1].name", `duplicate backend name "x" (first at line 37)`},
			{45, "backend[1].kind", `"llama" is not one of "mesh-gguf", "llama-server", "reference" or "meshd"`},
		}},
		{"policy and case", `[grants]
policy = "required"
[Listen]
tcp = ["127.0.0.1:1"]
[[backend]]
name = "r"
Kind = "reference"
fidelity = 0
uj_per_token = 1
[[backend]]
name = "g"
kind = "mesh-gguf"
fidelity = 0
uj_per_token = 1
[[backend]]
kind = "reference"
`, []want{
			{2, "grants.policy", "no trusted issuers"},
			{3, "Listen", `keys are case-sensitive: write "listen"`},
			{7, "backend[0].Kind", `keys are case-sensitive: write "kind"`},
			{10, "backend[1].model", "required by kind mesh-gguf"},
			{15, "backend[2].name", "required"},
			{15, "backend[2].fidelity", "required"},
			{15, "backend[2].uj_per_token", "required"},
		}},
		{"no backends", "[log]\nlevel = \"info\"\n[metering]\nshared = 1\n", []want{
			{4, "metering.shared", "wrong type: an integer where a boolean"},
			{0, "backend", "no [[backend]] or [[corpus]] configured"},
		}},
		{"unknown table", "[listen.extra]\nx = 1\n[stewart]\nstate_dir = \"/x\"\n[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 0\nuj_per_token = 1\n", []want{
			{1, "listen.extra", `unknown table "extra"`},
			{3, "stewart", `unknown table "stewart" (did you mean "steward"?)`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("error %v is not *Problems", err)
			}
			checkProblems(t, ps, tc.want)
		})
	}
}

// checkProblems asserts that ps lists exactly want, in order.
func checkProblems(t *testing.T, ps *Problems, want []want) {
	t.Helper()
	if ps.File != "bad.toml" {
		t.Errorf("File %q", ps.File)
	}
	n := len(ps.List)
	if len(want) > n {
		n = len(want)
	}
	for i := 0; i < n; i++ {
		switch {
		case i >= len(ps.List):
			t.Errorf("missing problem %d:%s: %s", want[i].line, want[i].key, want[i].msg)
		case i >= len(want):
			t.Errorf("unexpected problem %s", ps.List[i])
		default:
			p, w := ps.List[i], want[i]
			if p.Line != w.line || p.Key != w.key || !strings.Contains(p.Msg, w.msg) {
				t.Errorf("problem %d: got %d:%s: %s\n                 want %d:%s: ...%s...", i, p.Line, p.Key, p.Msg, w.line, w.key, w.msg)
			}
			if p.Line > 0 && p.Col == 0 {
				t.Errorf("problem %d (%s) has a line but no column", i, p)
			}
		}
	}
	if t.Failed() {
		t.Log(ps.Error())
	}
}

func TestProblemsError(t *testing.T) {
	_, err := Parse([]byte(many), "etc/meshd.toml")
	lines := strings.Split(err.Error(), "\n")
	if lines[0] != "9 problems in etc/meshd.toml" {
		t.Errorf("summary %q", lines[0])
	}
	if len(lines) != 10 {
		t.Fatalf("%d lines:\n%s", len(lines), err)
	}
	if want := `etc/meshd.toml:3:1: steward.checkpiont_every: unknown key`; !strings.HasPrefix(lines[1], want) {
		t.Errorf("line 1 %q, want prefix %q", lines[1], want)
	}
	one := &Problems{File: "f", List: []Problem{{Key: "backend", Msg: "none"}}}
	if got := one.Error(); got != "1 problem in f\nf: backend: none" {
		t.Errorf("%q", got)
	}
}

func TestSyntaxError(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		line int
	}{
		{"missing equals", "[steward]\nstate_dir = \"/x\"\ncheckpoint_every 5\n", 3},
		{"unclosed string", "[log]\nlevel = \"info\nformat = \"text\"\n", 2},
		{"unclosed header", "[listen\ntcp = []\n", 1},
		{"eof in array", "[listen]\ntcp = [\"a:1\",\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) || len(ps.List) != 1 {
				t.Fatalf("got %v", err)
			}
			p := ps.List[0]
			if p.Line != tc.line || p.Col == 0 || !strings.HasPrefix(p.Msg, "syntax error: ") {
				t.Errorf("got %s, want line %d", p, tc.line)
			}
		})
	}
	// A duplicate key parses but the decoder refuses it, at the second one,
	// and the rest of the file is still checked.
	_, err := Parse([]byte("[log]\nlevel = \"info\"\nlevel = \"debug\"\nformat = \"xml\"\n"), "bad.toml")
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != 3 || ps.List[0].Line != 3 || ps.List[1].Line != 4 {
		t.Errorf("got %v", err)
	}
}

// TestExample keeps the shipped example valid and as documented.
func TestExample(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "")
	c, err := Load("../../systemd/meshd.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.Unix != "/run/meshd/meshd.sock" || c.Metering.OnMeterFailure != "refuse" || c.Grants.Policy != "optional" {
		t.Errorf("listen/metering/grants: %+v %+v %+v", c.Listen, c.Metering, c.Grants)
	}
	m, ok := c.Meter("board")
	if !ok || m.Driver != "ina226" || m.Bus != "1" || m.Address != 0x40 || m.ShuntUOhm != 2000 || m.MaxCurrentUA() != 3200000 {
		t.Errorf("meter %+v", m)
	}
	if in, err := c.SpanInside(c.Backends[0].Meters); err != nil || !reflect.DeepEqual(in, map[string]string{"cpu": "board"}) {
		t.Errorf("the example's span: inside %v, %v", in, err)
	}
	if len(c.Backends) != 2 || c.Backends[0].Kind != "mesh-gguf" || c.Backends[0].Model != "/var/lib/meshd/models/model.gguf" ||
		!reflect.DeepEqual(c.Backends[0].Meters, []string{"board", "cpu"}) || c.Backends[1].Kind != "reference" ||
		c.Backends[1].Fidelity != 0 || len(c.Backends[1].Meters) != 0 {
		t.Errorf("backends %+v", c.Backends)
	}
}

func TestLoad(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.toml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("nonsense = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var ps *Problems
	if !errors.As(err, &ps) || ps.File != bad || !strings.Contains(err.Error(), bad+":1:1: nonsense: unknown key") {
		t.Errorf("bad file: %v", err)
	}
}

func TestReadTrusted(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		keys       int
		errs       []string
	}{
		{"comments and blanks", "# issuers\n\n" + keyA + "  # ops\n   \n\t" + keyB + "\n", 2, nil},
		{"empty", "", 0, nil},
		{"bad lines named", keyA + "\n# ok\nnot-a-key\n" + strings.Repeat("g", 64) + "\n", 0,
			[]string{":3: issuer key \"not-a-key\": want 64 hex", ":4: issuer key", "not hex"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			keys, err := ReadTrusted(path)
			if len(tc.errs) == 0 {
				if err != nil || len(keys) != tc.keys {
					t.Fatalf("keys %d, err %v", len(keys), err)
				}
				for _, k := range keys {
					if len(k) != ed25519.PublicKeySize {
						t.Errorf("key of %d bytes", len(k))
					}
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q lacks %q", err, e)
				}
			}
			if !strings.HasPrefix(err.Error(), path+":3: ") {
				t.Errorf("error %q does not start with the file and line", err)
			}
		})
	}
	if _, err := ReadTrusted(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
}

func TestGrantsKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "issuers")
	if err := os.WriteFile(file, []byte(keyB+"\n"+keyA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := Grants{TrustedIssuers: []string{keyA}, TrustedIssuersFile: file}.Keys()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %d, err %v (want 2: keyA listed twice counts once)", len(keys), err)
	}
	if _, err := (Grants{TrustedIssuers: []string{"00"}}).Keys(); err == nil || !strings.Contains(err.Error(), "grants.trusted_issuers[0]") {
		t.Errorf("bad key: %v", err)
	}
}

func TestDuration(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1m30s")); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("%v %v", d, err)
	}
	if b, _ := d.MarshalText(); string(b) != "1m30s" {
		t.Errorf("MarshalText %q", b)
	}
	if err := d.UnmarshalText([]byte("90")); err == nil {
		t.Error("a bare number was accepted")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(full))
	f.Add([]byte(many))
	if b, err := os.ReadFile("../../systemd/meshd.toml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[[backend]]\nname=\"a\"\n[[backend.x]]\ny=[[1],[2,{a=1}]]\nmeters=[1]\n"))
	f.Add([]byte("a.b.c = 1\n\"q.k\" = {x = [1, \"s\"]}\n[listen]\ntcp = 5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.toml")
		if (c == nil) == (err == nil) {
			t.Fatalf("config %v with error %v", c, err)
		}
		if err != nil {
			var ps *Problems
			if !errors.As(err, &ps) || len(ps.List) == 0 {
				t.Fatalf("error %v is not a non-empty *Problems", err)
			}
			_ = ps.Error()
		}
	})
}

// TestTooMany bounds the work on a file that is mostly wrong: each decode
// error costs a full decode, so the list stops after maxDecodeProblems.
func TestTooMany(t *testing.T) {
	doc := strings.Repeat("[[backend]]\nname = \"a\"\nkind = \"reference\"\nfidelity = \"x\"\nuj_per_token = 1\n", 5000)
	start := time.Now()
	_, err := Parse([]byte(doc), "bad.toml")
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != maxDecodeProblems+1 || !strings.Contains(ps.List[len(ps.List)-1].Msg, "too many errors") {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v", d)
	}
}

// [[corpus]] and its [[corpus.repo]]s are checked like the rest, with the
// lines of nested tables.
func TestCorpusProblems(t *testing.T) {
	src := `[[corpus]]
org = "Example"
name = "docs"
model = "m"
signing_profile = "rsa"

[[corpus.repo]]
id = "a"
url = "u"
path = "/srv/a"
branch = "main"
commit = "abc"

[[corpus.repo]]
id = "a"
url = "u"
branch = "main"
commit = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
`
	_, err := Parse([]byte(src), "c.toml")
	var p *Problems
	if !errors.As(err, &p) {
		t.Fatalf("want problems, got %v", err)
	}
	want := []struct {
		line int
		key  string
	}{{2, "corpus[0].org"}, {5, "corpus[0].signing_profile"}, {12, "corpus[0].repo[0].commit"}, {15, "corpus[0].repo[1].id"}, {0, "corpus[0].embedding_model"}}
	for _, w := range want {
		found := false
		for _, got := range p.List {
			if got.Key == w.key && (w.line == 0 || got.Line == w.line) {
				found = true
			}
		}
		if !found {
			t.Errorf("no problem at line %d for %s in:\n%v", w.line, w.key, err)
		}
	}
	ok := `[[corpus]]
org = "example"
name = "docs"
model = "macula/multilingual-e5-small:f16"
embedding_model = "/m/e5.gguf"
query_prefix = "query: "
[[corpus.repo]]
id = "alpha"
url = "https://example.org/alpha.git"
path = "/srv/alpha"
branch = "main"
commit = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
`
	c, err := Parse([]byte(ok), "ok.toml")
	if err != nil {
		t.Fatal(err)
	}
	k := c.Corpora[0]
	if k.Runner != "mesh-gguf" || k.ChunkLines != 40 || k.ChunkOverlap != 8 || k.UJPerToken != 1 || k.SigningProfile != "pq_pure" || len(k.Repos) != 1 || k.Repos[0].Path != "/srv/alpha" {
		t.Fatalf("corpus defaults: %+v", k)
	}
}

// relMeters is a board input, its CPU package and GPU rail, and a USB
// meter on a separate rail; the cases append relations and a backend.
const relMeters = `[[meter]]
name = "board"
driver = "ina226"
bus = "1"
address = 0x40
shunt_uohm = 2000
max_current_a = 3.2
[[meter]]
name = "cpu"
driver = "rapl"
zone = "package-0"
%s
[[meter]]
name = "gpu"
driver = "nvml"
%s
[[meter]]
name = "usb"
driver = "um"
device = "/dev/rfcomm0"
%s
[[backend]]
name = "b"
kind = "reference"
fidelity = 0
uj_per_token = 1
meters = %s
`

// Meters that may measure the same energy are summed only when declared
// disjoint; one declared inside another is its breakdown; a span of
// meters with no declared relation is refused, naming both.
func TestSpanRelations(t *testing.T) {
	for _, tc := range []struct {
		name                string
		cpu, gpu, usb, span string
		want                []want
		inside              map[string]string
	}{
		{"unrelated board and RAPL refused", "", "", "", `["board", "cpu"]`,
			[]want{{27, "backend[0].meters", `meters "board" and "cpu" may measure the same energy`}}, nil},
		{"RAPL inside the board", `inside = "board"`, "", "", `["board", "cpu"]`, nil, map[string]string{"cpu": "board"}},
		{"GPU and RAPL both inside the board", `inside = "board"`, `inside = "board"`, "", `["board", "cpu", "gpu"]`, nil,
			map[string]string{"cpu": "board", "gpu": "board"}},
		{"siblings without their outer meter", `inside = "board"`, `inside = "board"`, "", `["cpu", "gpu"]`,
			[]want{{27, "backend[0].meters", `meters "cpu" and "gpu" may measure the same energy`}}, nil},
		{"siblings declared disjoint", `inside = "board"`, `inside = "board"` + "\ndisjoint = [\"cpu\"]", "", `["cpu", "gpu"]`, nil, map[string]string{}},
		{"separate rail declared disjoint", "", "", `disjoint = ["board"]`, `["board", "usb"]`, nil, map[string]string{}},
		{"inside a meter that is not there", `inside = "ghost"`, "", "", `["board"]`,
			[]want{{12, "meter[1].inside", `no [[meter]] is named "ghost"`}}, nil},
		{"inside itself", `inside = "cpu"`, "", "", `["board"]`, []want{{12, "meter[1].inside", "cannot be inside itself"}}, nil},
		{"a cycle", `inside = "gpu"`, `inside = "cpu"`, "", `["board"]`, []want{
			{12, "meter[1].inside", `cycle through "cpu"`}, {16, "meter[2].inside", `cycle through "gpu"`}}, nil},
		{"both nested and disjoint", `inside = "board"` + "\ndisjoint = [\"board\"]", "", "", `["board"]`,
			[]want{{13, "meter[1].disjoint[0]", "declared both disjoint and one inside the other"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := fmt.Sprintf(relMeters, tc.cpu, tc.gpu, tc.usb, tc.span)
			c, err := Parse([]byte(doc), "bad.toml")
			if tc.want != nil {
				var ps *Problems
				if !errors.As(err, &ps) {
					t.Fatalf("error %v is not *Problems", err)
				}
				checkProblems(t, ps, tc.want)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.SpanInside(c.Backends[0].Meters)
			if err != nil || !reflect.DeepEqual(got, tc.inside) {
				t.Fatalf("SpanInside = %v, %v; want %v", got, err, tc.inside)
			}
		})
	}
}

// A corpus with sync follows its branches: a repo names no commit, and
// syncs are at least 10 s apart; without sync the commit is required.
func TestCorpusSyncProblems(t *testing.T) {
	corpus := func(sync, commit string) string {
		return `[[corpus]]
org = "example"
name = "docs"
model = "m"
embedding_model = "/m/e5.gguf"
` + sync + `
[[corpus.repo]]
id = "alpha"
url = "u"
path = "/srv/alpha"
branch = "main"
` + commit + "\n"
	}
	pinned := `commit = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"`
	for _, c := range []struct {
		name, src, key, says string
	}{
		{"sync and a commit", corpus(`sync = "5m"`, pinned), "corpus[0].repo[0].commit", "leave commit out"},
		{"sync too short", corpus(`sync = "2s"`, ""), "corpus[0].sync", "at least 10s"},
		{"no sync, no commit", corpus("", ""), "corpus[0].repo[0].commit", "40 lowercase hex"},
		{"sync", corpus(`sync = "5m"`, ""), "", ""},
		{"pinned", corpus("", pinned), "", ""},
	} {
		cfg, err := Parse([]byte(c.src), "c.toml")
		if c.key == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if c.name == "sync" && time.Duration(cfg.Corpora[0].Sync) != 5*time.Minute {
				t.Errorf("%s: sync %v", c.name, time.Duration(cfg.Corpora[0].Sync))
			}
			continue
		}
		var p *Problems
		if !errors.As(err, &p) || !slices.ContainsFunc(p.List, func(q Problem) bool { return q.Key == c.key && strings.Contains(q.Msg, c.says) }) {
			t.Errorf("%s: %v, want a problem at %s saying %q", c.name, err, c.key, c.says)
		}
	}
}
