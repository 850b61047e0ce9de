package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/engine/runner/bert"
	"meshd/engine/runner/gguf"
	"meshd/engine/runner/llama"
)

// tiny is a model shape small enough to synthesise in a test, trained for
// 2048 positions.
var tiny = gguf.Shape{Layers: 1, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 2048, Type: gguf.F32}

// synthModel writes a synthesised llama GGUF of shape s, with the extra
// metadata kv (a chat template, say) added to what gguf.Synth writes.
func synthModel(t *testing.T, path string, s gguf.Shape, kv map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, s, 1); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if len(kv) > 0 {
		f, err := gguf.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		var w gguf.Writer
		for _, e := range f.KV {
			w.AddKV(e.Key, e.Value)
		}
		for k, v := range kv {
			w.AddKV(k, v)
		}
		for _, ti := range f.Tensors {
			w.AddTensor(ti.Name, ti.Type, ti.Dims, func() ([]byte, error) { return f.TensorData(ti), nil })
		}
		var out bytes.Buffer
		if _, err := w.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		data = out.Bytes()
	}
	writeFile(t, path, data, 0o644)
}

// headerModel writes a GGUF with only the given metadata and one tensor of
// type tt (nil data: zeros), for architectures and types Synth does not
// write.
func headerModel(t *testing.T, path string, kv map[string]any, tt gguf.TensorType) {
	t.Helper()
	var w gguf.Writer
	for k, v := range kv {
		w.AddKV(k, v)
	}
	w.AddTensor("token_embd.weight", tt, []uint64{256, 1}, func() ([]byte, error) { return make([]byte, tt.RowBytes(256)), nil })
	var out bytes.Buffer
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, out.Bytes(), 0o644)
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

const template = "{% for m in messages %}{{ m.content }}{% endfor %}"

// board lays out, under root, a machine with everything the shipped
// example names: the I2C bus, the RAPL package zone, the runner on PATH
// and a model (with a chat template) trained for 4096 positions.
func board(t *testing.T, root string) {
	writeFile(t, filepath.Join(root, "dev/i2c-1"), nil, 0o600)
	z := filepath.Join(root, "sys/class/powercap/intel-rapl:0")
	writeFile(t, filepath.Join(z, "name"), []byte("package-0\n"), 0o644)
	writeFile(t, filepath.Join(z, "energy_uj"), []byte("12345\n"), 0o644)
	writeFile(t, filepath.Join(z, "max_energy_range_uj"), []byte("262143328850\n"), 0o644)
	writeFile(t, filepath.Join(root, "usr/bin/mesh-gguf"), []byte("#!/bin/sh\n"), 0o755)
	s := tiny
	s.Ctx = 4096
	synthModel(t, filepath.Join(root, "var/lib/meshd/models/model.gguf"), s, map[string]any{"tokenizer.chat_template": template})
}

// denyWrite is the system with one directory this user may not write to:
// tests run as root, for whom access(2) grants every write.
type denyWrite struct {
	System
	dir string
}

func (d denyWrite) Writable(dir string) error {
	if dir == d.Path(d.dir) {
		return errors.New("not writable by this user: permission denied")
	}
	return d.System.Writable(dir)
}

// lineOf is the 1-based line of the first line of text containing s, so
// the expectations follow the shipped example as it is edited.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q is not in the file", s)
	return 0
}

// problems runs LoadChecked and returns each problem as "line:key: msg".
func problems(t *testing.T, text string, ec *EnvCheck) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meshd.toml")
	writeFile(t, path, []byte(text), 0o600)
	_, err := LoadChecked(path, ec)
	if err == nil {
		return nil
	}
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("not *Problems: %v", err)
	}
	var out []string
	for _, p := range ps.List {
		out = append(out, fmt.Sprintf("%d:%s: %s", p.Line, p.Key, p.Msg))
	}
	return out
}

const gguf1 = `[steward]
state_dir = "/state"

[[backend]]
name = "edge"
kind = "mesh-gguf"
model = "/models/m.gguf"
runner = "/usr/bin/mesh-gguf"
fidelity = 2
uj_per_token = 100
`

func TestEnvironmentProblems(t *testing.T) {
	example, err := os.ReadFile("../../systemd/meshd.toml")
	if err != nil {
		t.Fatal(err)
	}
	ex := string(example)
	type tc struct {
		name  string
		text  string
		setup func(t *testing.T, root string)
		env   func(root string) Env
		serve bool
		want  []string
	}
	runner := func(t *testing.T, root string) {
		writeFile(t, filepath.Join(root, "usr/bin/mesh-gguf"), []byte("#!/bin/sh\n"), 0o755)
	}
	templated := func(t *testing.T, root string) {
		runner(t, root)
		synthModel(t, filepath.Join(root, "models/m.gguf"), tiny, map[string]any{"tokenizer.chat_template": template})
	}
	plain := func(t *testing.T, root string) {
		runner(t, root)
		synthModel(t, filepath.Join(root, "models/m.gguf"), tiny, nil)
	}
	cases := []tc{
		{name: "shipped example, nothing on this machine", text: ex, want: []string{
			fmt.Sprintf(`%d:meter[0].bus: I2C bus 1: /dev/i2c-1: no such file or directory (is the bus enabled and the i2c-dev module loaded?)`, lineOf(t, ex, `bus = "1"`)),
			fmt.Sprintf(`%d:meter[1].zone: no powercap zone "package-0" with an energy counter under /sys/class/powercap (found: none)`, lineOf(t, ex, `zone = "package-0"`)),
			fmt.Sprintf(`%d:backend[0].model: model /var/lib/meshd/models/model.gguf: no such file or directory`, lineOf(t, ex, `model = "/var/lib/meshd/models/model.gguf"`)),
			fmt.Sprintf(`%d:backend[0].runner: runner "mesh-gguf": not next to meshd nor on PATH`, lineOf(t, ex, `runner = "mesh-gguf"`)),
		}},
		{name: "shipped example on a board with all it names", text: ex, setup: board},
		{name: "context beyond the trained one", text: gguf1 + "context = 4096\n", setup: templated, want: []string{
			`11:backend[0].context: 4096 exceeds the trained context of /models/m.gguf, 2048 (llama.context_length): mesh-gguf refuses it`,
		}},
		{name: "context within the trained one", text: gguf1 + "context = 2048\n", setup: templated},
		{name: "chat backend on a model without a template", text: gguf1, setup: plain, want: []string{
			`7:backend[0].model: model /models/m.gguf has no chat template (tokenizer.chat_template): chat completions on this backend would be refused; give the runner one with extra_args = ["--chat-template", "<jinja>"]`,
		}},
		{name: "missing draft model", text: gguf1 + "draft_model = \"/models/d.gguf\"\ndraft_max = 4\n", setup: templated, want: []string{
			`11:backend[0].draft_model: model /models/d.gguf: no such file or directory`,
		}},
		{name: "draft bounds without a draft, negative, inverted", text: gguf1 + "draft_max = -1\ndraft_min = 2\n", setup: templated, want: []string{
			`11:backend[0].draft_max: must be >= 0 (0 = the runner's default)`,
			`12:backend[0].draft_min: needs draft_model (the draft model it bounds)`,
		}},
		{name: "draft min above max", text: gguf1 + "draft_model = \"/models/m.gguf\"\ndraft_max = 2\ndraft_min = 3\n", setup: templated, want: []string{
			`13:backend[0].draft_min: 3 exceeds draft_max 2`,
		}},
		{name: "a draft model that is there", text: gguf1 + "draft_model = \"/models/m.gguf\"\ndraft_max = 6\ndraft_min = 1\n", setup: templated},
		{name: "template given to the runner", text: gguf1 + `extra_args = ["--chat-template", "{{ x }}"]` + "\n", setup: plain},
		{name: "no template, at serve's start", text: gguf1, setup: plain, serve: true},
		{name: "missing runner and model", text: gguf1, want: []string{
			`7:backend[0].model: model /models/m.gguf: no such file or directory`,
			`8:backend[0].runner: runner /usr/bin/mesh-gguf: no such file or directory`,
		}},
		{name: "runner not executable", text: gguf1, setup: func(t *testing.T, root string) {
			templated(t, root)
			os.Chmod(filepath.Join(root, "usr/bin/mesh-gguf"), 0o644)
		}, want: []string{`8:backend[0].runner: runner /usr/bin/mesh-gguf: not an executable file`}},
		{name: "not a GGUF file", text: gguf1, setup: func(t *testing.T, root string) {
			runner(t, root)
			writeFile(t, filepath.Join(root, "models/m.gguf"), []byte("junk, not a model"), 0o644)
		}, want: []string{`7:backend[0].model: model /models/m.gguf: malformed file: bad magic "junk", want "GGUF"`}},
		{name: "architecture the runner does not load", text: gguf1, setup: func(t *testing.T, root string) {
			runner(t, root)
			headerModel(t, filepath.Join(root, "models/m.gguf"), map[string]any{"general.architecture": "gpt2"}, gguf.F32)
		}, want: []string{`7:backend[0].model: model /models/m.gguf: architecture "gpt2" is not one mesh-gguf runs (llama, qwen2, bert)`}},
		{name: "tensor type the runner does not compute", text: gguf1, setup: func(t *testing.T, root string) {
			runner(t, root)
			headerModel(t, filepath.Join(root, "models/m.gguf"), map[string]any{"general.architecture": "llama",
				"llama.context_length": uint32(512), "tokenizer.chat_template": template}, gguf.Q3_K)
		}, want: []string{`7:backend[0].model: model /models/m.gguf: tensor types mesh-gguf does not compute: q3_k (1 tensor) (it computes ` +
			strings.Join(builtinTypes(), ", ") + `)`}},
		{name: "key directory that cannot be created", text: strings.Replace(gguf1, "[steward]\n", "[steward]\nkey_file = \"/etc/blocker/keys/steward.key\"\n", 1), setup: func(t *testing.T, root string) {
			templated(t, root)
			writeFile(t, filepath.Join(root, "etc/blocker"), nil, 0o644)
		}, want: []string{`2:steward.key_file: key directory /etc/blocker/keys does not exist and cannot be created: /etc/blocker is not a directory`}},
		{name: "key directory not writable", text: strings.Replace(gguf1, "[steward]\n", "[steward]\nkey_file = \"/keys/steward.key\"\n", 1), setup: func(t *testing.T, root string) {
			templated(t, root)
			os.MkdirAll(filepath.Join(root, "keys"), 0o700)
		}, env: func(root string) Env { return denyWrite{System{Root: root}, "/keys"} },
			want: []string{`2:steward.key_file: key directory /keys: not writable by this user: permission denied`}},
		{name: "key directory absent, created by serve", text: strings.Replace(gguf1, "[steward]\n", "[steward]\nkey_file = \"/keys/new/steward.key\"\n", 1), setup: templated},
		{name: "state directory writable by others", text: gguf1, setup: func(t *testing.T, root string) {
			templated(t, root)
			os.MkdirAll(filepath.Join(root, "state"), 0o700)
			os.Chmod(filepath.Join(root, "state"), 0o777)
		}, want: []string{`2:steward.state_dir: state directory /state is mode 0777, writable by group or others, who could replace the log, the ledger or the key: serve refuses it (chmod 0700 once checked)`}},
		{name: "missing issuers file beside other problems", text: gguf1 + "\n[listen]\nmax_in_flight = 0\n[grants]\ntrusted_issuers_file = \"/etc/meshd/issuers\"\n[auth]\ntokens_file = \"/etc/meshd/tokens\"\n", setup: templated, want: []string{
			`13:listen.max_in_flight: must be > 0`,
			`15:grants.trusted_issuers_file: trusted issuers file /etc/meshd/issuers: no such file or directory`,
			`17:auth.tokens_file: tokens file /etc/meshd/tokens: no such file or directory`,
		}},
		{name: "bad line in the issuers file", text: gguf1 + "[grants]\ntrusted_issuers_file = \"/etc/meshd/issuers\"\n", setup: func(t *testing.T, root string) {
			templated(t, root)
			writeFile(t, filepath.Join(root, "etc/meshd/issuers"), []byte("# issuers\nnot-a-key\n"), 0o644)
		}, want: []string{`12:grants.trusted_issuers_file: trusted issuers file /etc/meshd/issuers:2: issuer key "not-a-key": want 64 hex characters (an ed25519 public key), got 9`}},
		{name: "duplicate listen, range errors in both, missing model", text: gguf1 + "[listen]\nmax_in_flight = -1\n[listen]\nmax_body_bytes = 5\n", setup: runner, want: []string{
			`7:backend[0].model: model /models/m.gguf: no such file or directory`,
			`12:listen.max_in_flight: must be > 0`,
			`13:listen: table [listen] is already defined at line 11: write each table once (the keys of both are checked here)`,
			`14:listen.max_body_bytes: 5 is outside 1024..67108864 (1 KiB..64 MiB)`,
		}},
		{name: "sensor devices", text: `[[meter]]
name = "u"
driver = "um"
device = "/dev/ttyACM0"
[[meter]]
name = "g"
driver = "nvml"
gpu = 1
disjoint = ["u"]
[[meter]]
name = "h"
driver = "hwmon"
rail = "VDD_IN"
hwmon_root = "/sys/class/hwmon"
disjoint = ["u", "g"]
[[backend]]
name = "r"
kind = "reference"
fidelity = 0
uj_per_token = 1
meters = ["u", "g", "h"]
`, want: []string{
			`4:meter[0].device: serial device /dev/ttyACM0: no such file or directory`,
			`13:meter[2].rail: no hwmon rail "VDD_IN" under /sys/class/hwmon (found: none)`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.setup != nil {
				c.setup(t, root)
			}
			var env Env = System{Root: root}
			if c.env != nil {
				env = c.env(root)
			}
			got := problems(t, c.text, &EnvCheck{Env: env, Serve: c.serve})
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// -offline: the shipped example is a valid file, whatever this machine has.
func TestShippedExampleOffline(t *testing.T) {
	example, err := os.ReadFile("../../systemd/meshd.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := problems(t, string(example), nil); got != nil {
		t.Fatalf("offline: %s", strings.Join(got, "\n"))
	}
}

// NoSensors leaves the devices alone (a caller opening its own sensors)
// and still checks the rest.
func TestEnvironmentNoSensors(t *testing.T) {
	example, err := os.ReadFile("../../systemd/meshd.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := problems(t, string(example), &EnvCheck{Env: System{Root: t.TempDir()}, NoSensors: true})
	if len(got) != 2 || !strings.Contains(got[0], "backend[0].model") || !strings.Contains(got[1], "backend[0].runner") {
		t.Fatalf("got %q", got)
	}
}

// The architectures the check accepts are the ones the loaders take.
func TestBuiltinArchsMatchLoaders(t *testing.T) {
	load := func(arch string) error {
		var w gguf.Writer
		w.AddKV("general.architecture", arch)
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if arch == bert.Arch {
			_, err = bert.Load(f)
		} else {
			_, err = llama.Load(f)
		}
		return err
	}
	for _, a := range append([]string{"gpt2", "mamba"}, builtinArchs...) {
		err := load(a)
		unsupported := err != nil && strings.Contains(err.Error(), "not supported")
		if want := !containsStr(builtinArchs, a); unsupported != want {
			t.Errorf("arch %q: loader says %v; the check says supported = %v", a, err, !want)
		}
	}
}

func containsStr(s []string, x string) bool {
	for _, e := range s {
		if e == x {
			return true
		}
	}
	return false
}
