package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"meshd/auth"
	"meshd/drivers/hwmon"
	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/rapl"
	"meshd/steward"
)

// The environment pass: what `meshd serve` would find missing or refuse
// on this machine, looked at without starting anything — the model files'
// GGUF headers (never their weights), the runners, the state and key
// directories, the sensors' devices, and the files the config names. Each
// problem is reported against the key that names the thing, so a missing
// file is fixed where it is written.

// Env is what the environment pass probes. System is the machine itself;
// a System with a Root looks at a tree laid out like one (a board's image
// mounted elsewhere, or a test's directory).
type Env interface {
	// Path maps an absolute path of the config to where it is read here.
	Path(p string) string
	// LookRunner resolves a runner given without a directory as the
	// engine does: beside meshd's own executable, then on PATH. The
	// result is a path to pass to Path.
	LookRunner(name string) (string, error)
	// Writable says whether this process may create entries in dir (an
	// existing directory, already passed through Path).
	Writable(dir string) error
	// Model reads the header of the GGUF file at p (passed through Path).
	Model(p string) (ModelHeader, error)
}

// ModelHeader is what a GGUF file's header says about running it.
type ModelHeader struct {
	// Arch is general.architecture.
	Arch string
	// TrainedContext is <arch>.context_length; 0 when absent.
	TrainedContext int
	// ChatTemplate says tokenizer.chat_template is present and not blank.
	ChatTemplate bool
	// Types counts the tensors of each type.
	Types map[gguf.TensorType]int
}

// System is the Env of a machine: Root "" is this one's own file system.
type System struct {
	Root string
	// Self is meshd's executable, beside which runners are looked for
	// first; "" is os.Executable.
	Self string
}

// Path joins p under Root.
func (s System) Path(p string) string {
	if s.Root == "" {
		return p
	}
	return filepath.Join(s.Root, p)
}

// LookRunner looks beside Self, then on PATH (PATH's directories taken
// under Root).
func (s System) LookRunner(name string) (string, error) {
	self := s.Self
	if self == "" && s.Root == "" {
		self, _ = os.Executable()
	}
	if self != "" {
		p := filepath.Join(filepath.Dir(self), name)
		if executable(s.Path(p)) == nil {
			return p, nil
		}
	}
	if s.Root == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("not next to meshd nor on PATH")
		}
		return filepath.Abs(p)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if p := filepath.Join(d, name); filepath.IsAbs(p) && executable(s.Path(p)) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not next to meshd nor on PATH")
}

// Writable asks the kernel (access(2) with W_OK and X_OK, as creating an
// entry needs both) rather than trying a write.
func (System) Writable(dir string) error {
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("not writable by this user: %w", err)
	}
	return nil
}

// Model maps the file and parses its header: the weights are neither
// read nor paged in.
func (System) Model(p string) (ModelHeader, error) {
	f, err := gguf.Open(p)
	if err != nil {
		return ModelHeader{}, err
	}
	defer f.Close()
	h := ModelHeader{Types: map[gguf.TensorType]int{}}
	h.Arch, _ = f.String("general.architecture")
	if n, ok := f.Uint(h.Arch + ".context_length"); ok {
		h.TrainedContext = int(min(n, 1<<30))
	}
	if t, ok := f.String("tokenizer.chat_template"); ok && strings.TrimSpace(t) != "" {
		h.ChatTemplate = true
	}
	for _, t := range f.Tensors {
		h.Types[t.Type]++
	}
	return h, nil
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return unix.Access(p, unix.X_OK)
}

// EnvCheck selects the environment pass of LoadChecked.
type EnvCheck struct {
	// Env is what is probed; nil is System{}.
	Env Env
	// NoSensors leaves the meters' devices alone: for a caller that opens
	// its sensors itself (a simulator), not the configured devices.
	NoSensors bool
	// Serve is the check made at `meshd serve`'s start: only what would
	// stop it. A generative model without a chat template is then not
	// refused (its chats are, one by one), while check-config lists it.
	Serve bool
}

// LoadChecked is Load followed, when ec is not nil, by the environment
// pass; the problems of both come back in one *Problems.
func LoadChecked(path string, ec *EnvCheck) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(data, path, ec)
}

// builtinArchs are the architectures mesh-gguf loads (engine/runner/llama
// and, embedding only, engine/runner/bert); a test holds this list to
// the loaders.
var builtinArchs = []string{"llama", "qwen2", "bert"}

// builtinTypes names the tensor types mesh-gguf computes, in gguf's
// numbering order.
func builtinTypes() []string {
	var names []string
	for t := gguf.TensorType(0); t < 64; t++ {
		if t.Known() && kernels.Supports(t) {
			names = append(names, t.String())
		}
	}
	return names
}

// encoderArchs embed and do not generate: no chat template is wanted.
var encoderArchs = []string{"bert"}

// envPass runs every environment check.
func (v *checker) envPass(ec *EnvCheck) {
	env := ec.Env
	if env == nil {
		env = System{}
	}
	e := &envChecker{checker: v, env: env, ec: ec}
	e.steward()
	e.files()
	if !ec.NoSensors {
		e.sensors()
	}
	e.engines()
}

type envChecker struct {
	*checker
	env Env
	ec  *EnvCheck
}

// dir checks that dir is a directory this process may create entries in,
// or, when it does not exist, that it can be created (serve creates it):
// its nearest existing ancestor is a directory and writable.
func (e *envChecker) dir(key, dir, what string) {
	p := e.env.Path(dir)
	fi, err := os.Stat(p)
	switch {
	case err == nil && !fi.IsDir():
		e.problem(key, "%s %s is not a directory", what, dir)
		return
	case err == nil:
		if err := e.env.Writable(p); err != nil {
			e.problem(key, "%s %s: %v", what, dir, err)
		}
		return
	case !absent(err):
		e.problem(key, "%s %s: %v", what, dir, unwrapPath(err))
		return
	}
	for a := filepath.Dir(dir); ; a = filepath.Dir(a) {
		fi, err := os.Stat(e.env.Path(a))
		if absent(err) && a != filepath.Dir(a) {
			continue
		}
		switch {
		case err != nil:
			e.problem(key, "%s %s does not exist and cannot be created: %s: %v", what, dir, a, unwrapPath(err))
		case !fi.IsDir():
			e.problem(key, "%s %s does not exist and cannot be created: %s is not a directory", what, dir, a)
		default:
			if err := e.env.Writable(e.env.Path(a)); err != nil {
				e.problem(key, "%s %s does not exist and cannot be created in %s: %v", what, dir, a, err)
			}
		}
		return
	}
}

// absent says err means there is nothing at the path: not there, or a
// file where a directory on the way should be.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}

// unwrapPath drops the path an *fs.PathError repeats: the message names
// the file already.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// steward checks the state directory and the key as serve's start uses
// them: the directory created if absent and refused when group or others
// may write to it; the key read, or created when there is none and no
// receipt log that an older key signed.
func (e *envChecker) steward() {
	s := e.c.Steward
	if !filepath.IsAbs(s.StateDir) {
		return // reported by the static checks
	}
	e.dir("steward.state_dir", s.StateDir, "state directory")
	if fi, err := os.Stat(e.env.Path(s.StateDir)); err == nil && fi.IsDir() && fi.Mode().Perm()&0o022 != 0 {
		e.problem("steward.state_dir", "state directory %s is mode %#o, writable by group or others, who could replace the log, the ledger or the key: serve refuses it (chmod 0700 once checked)", s.StateDir, fi.Mode().Perm())
	}
	key := e.c.KeyPath()
	_, err := os.Lstat(e.env.Path(key))
	switch {
	case err == nil:
		if _, err := steward.LoadKeyFile(e.env.Path(key)); err != nil {
			e.problem("steward.key_file", "steward key %s: %v", key, unwrapKey(err))
		}
	case absent(err):
		has, herr := steward.HasLog(e.env.Path(e.c.ReceiptsDir()))
		switch {
		case herr != nil:
			e.problem("steward.key_file", "steward key %s is missing and the receipt log %s cannot be read: %v", key, e.c.ReceiptsDir(), herr)
		case has:
			e.problem("steward.key_file", "steward key %s is missing, but the receipt log %s exists and was signed by it: restore the key (a new one cannot append to that log)", key, e.c.ReceiptsDir())
		default:
			// Created at first start, in a directory that must allow it.
			e.dir("steward.key_file", filepath.Dir(key), "key directory")
		}
	default:
		e.problem("steward.key_file", "steward key %s: %v", key, unwrapPath(err))
	}
	if s.ArchiveDir != "" && filepath.IsAbs(s.ArchiveDir) {
		e.dir("steward.archive_dir", s.ArchiveDir, "archive directory")
	}
}

// unwrapKey shortens the key loader's messages, which repeat the path.
func unwrapKey(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "load key: ")
	return msg
}

// readable checks that path (named by key) is a file this process can
// read, returning its contents.
func (e *envChecker) readable(key, path, what string) ([]byte, bool) {
	data, err := os.ReadFile(e.env.Path(path))
	if err != nil {
		e.problem(key, "%s %s: %v", what, path, unwrapPath(err))
		return nil, false
	}
	return data, true
}

// files checks the files the config names besides models and runners:
// issuers, tokens, TLS, fleet credentials, remote backends' secrets.
func (e *envChecker) files() {
	c := e.c
	if f := c.Grants.TrustedIssuersFile; f != "" {
		if data, ok := e.readable("grants.trusted_issuers_file", f, "trusted issuers file"); ok {
			if _, err := parseTrusted(f, data); err != nil {
				for _, m := range strings.Split(err.Error(), "\n") {
					e.problem("grants.trusted_issuers_file", "trusted issuers file %s", m)
				}
			}
		}
	}
	if f := c.Auth.TokensFile; f != "" {
		if _, ok := e.readable("auth.tokens_file", f, "tokens file"); ok {
			if _, err := auth.ReadTokens(e.env.Path(f)); err != nil {
				for _, m := range strings.Split(err.Error(), "\n") {
					e.problem("auth.tokens_file", "%s", strings.ReplaceAll(m, e.env.Path(f), f))
				}
			}
		}
	}
	t := c.Listen.TLS
	if t.CertFile != "" && t.KeyFile != "" {
		cert, ok1 := e.readable("listen.tls.cert_file", t.CertFile, "TLS certificate")
		key, ok2 := e.readable("listen.tls.key_file", t.KeyFile, "TLS key")
		if ok1 && ok2 {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				e.problem("listen.tls.cert_file", "TLS certificate %s and key %s: %v", t.CertFile, t.KeyFile, err)
			}
		}
	}
	if f := t.ClientCAFile; f != "" {
		if _, ok := e.readable("listen.tls.client_ca_file", f, "client CA file"); ok {
			if _, err := auth.ReadPool(e.env.Path(f)); err != nil {
				e.problem("listen.tls.client_ca_file", "%s holds no PEM certificate", f)
			}
		}
	}
	if l := c.Listen.Unix; l != "" && filepath.IsAbs(l) {
		e.dir("listen.unix", filepath.Dir(l), "socket directory")
	}
	fl := c.Fleet
	if fl.URL != "" {
		for _, f := range []struct{ key, path, what string }{
			{"fleet.creds", fl.Creds, "credentials file"}, {"fleet.nkey_seed_file", fl.NKeySeedFile, "nkey seed file"},
			{"fleet.ca_file", fl.CAFile, "CA file"}, {"fleet.cert_file", fl.CertFile, "certificate"}, {"fleet.key_file", fl.KeyFile, "key"},
		} {
			if f.path != "" {
				e.readable(f.key, f.path, f.what)
			}
		}
	}
	for i, b := range c.Backends {
		if b.Kind != "meshd" {
			continue
		}
		p := fmt.Sprintf("backend[%d].", i)
		for _, f := range []struct{ key, path, what string }{
			{"token_file", b.TokenFile, "token file"}, {"ca_file", b.CAFile, "CA file"},
			{"cert_file", b.CertFile, "certificate"}, {"key_file", b.KeyFile, "key"},
		} {
			if f.path != "" {
				e.readable(p+f.key, f.path, f.what)
			}
		}
	}
	for i, k := range c.Corpora {
		for j, r := range k.Repos {
			if r.Path == "" {
				continue
			}
			if fi, err := os.Stat(e.env.Path(r.Path)); err != nil {
				e.problem(fmt.Sprintf("corpus[%d].repo[%d].path", i, j), "clone %s: %v", r.Path, unwrapPath(err))
			} else if !fi.IsDir() {
				e.problem(fmt.Sprintf("corpus[%d].repo[%d].path", i, j), "clone %s is not a directory", r.Path)
			}
		}
	}
}

// i2cBus matches the bus names that are a /dev/i2c-N device; periph's
// other names (aliases a host driver registers) cannot be told apart
// from a typo without initialising it, and are left to serve.
var i2cBus = regexp.MustCompile(`^(?:/dev/i2c-)?([0-9]+)$`)

// sensors checks that each meter's device is there: the I2C bus, the
// hwmon rail, the powercap zone, the serial device. An NVML GPU is left
// to serve: only the library knows (WSL, for one, has no /dev/nvidia*).
func (e *envChecker) sensors() {
	for i, m := range e.c.Meters {
		p := fmt.Sprintf("meter[%d].", i)
		switch m.Driver {
		case "ina226", "ina219":
			if g := i2cBus.FindStringSubmatch(m.Bus); g != nil {
				dev := "/dev/i2c-" + g[1]
				if _, err := os.Stat(e.env.Path(dev)); err != nil {
					e.problem(p+"bus", "I2C bus %s: %s: %v (is the bus enabled and the i2c-dev module loaded?)", m.Bus, dev, unwrapPath(err))
				}
			}
		case "hwmon":
			if m.Rail == "" || m.HwmonRoot == "" {
				continue
			}
			rails, err := hwmon.Discover(e.env.Path(m.HwmonRoot))
			if err != nil {
				e.problem(p+"hwmon_root", "%v", err)
				continue
			}
			var names []string
			found := false
			for _, r := range rails {
				if r.Matches(m.Rail) {
					found = true
				}
				names = append(names, r.String())
			}
			if !found {
				e.problem(p+"rail", "no hwmon rail %q under %s (found: %s)", m.Rail, m.HwmonRoot, listOrNone(names))
			}
		case "rapl":
			if m.Zone == "" || m.PowercapRoot == "" {
				continue
			}
			zones, err := rapl.Discover(rapl.Config{Root: e.env.Path(m.PowercapRoot), CPUInfo: e.env.Path(rapl.DefaultCPUInfo)})
			if err != nil {
				e.problem(p+"powercap_root", "%v", err)
				continue
			}
			if _, err := rapl.Find(zones, m.Zone); err != nil {
				var keys []string
				for _, z := range zones {
					keys = append(keys, z.Key)
				}
				e.problem(p+"zone", "no powercap zone %q with an energy counter under %s (found: %s)", m.Zone, m.PowercapRoot, listOrNone(keys))
			}
		case "um", "line":
			if m.Device == "" {
				continue
			}
			if _, err := os.Stat(e.env.Path(m.Device)); err != nil {
				e.problem(p+"device", "serial device %s: %v", m.Device, unwrapPath(err))
			}
		}
	}
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// engines checks each local engine: its runner, and its models' headers
// against what the runner can load.
func (e *envChecker) engines() {
	for i, b := range e.c.Backends {
		if b.Kind != "mesh-gguf" && b.Kind != "llama-server" {
			continue
		}
		p := fmt.Sprintf("backend[%d].", i)
		e.runner(p+"runner", b.Runner)
		if b.Model != "" {
			e.model(p, "model", b.Model, b.Kind, b.Context, b.ExtraArgs, true)
		}
		if b.DraftModel != "" {
			e.model(p, "draft_model", b.DraftModel, b.Kind, 0, nil, false)
		}
	}
	for i, k := range e.c.Corpora {
		p := fmt.Sprintf("corpus[%d].", i)
		e.runner(p+"runner", k.Runner)
		if k.EmbeddingModel != "" {
			e.model(p, "embedding_model", k.EmbeddingModel, "mesh-gguf", k.Context, nil, false)
		}
	}
}

// runner checks that the runner resolves to an executable file.
func (e *envChecker) runner(key, name string) {
	if name == "" {
		return
	}
	path := name
	if !strings.ContainsRune(name, '/') {
		p, err := e.env.LookRunner(name)
		if err != nil {
			e.problem(key, "runner %q: %v", name, err)
			return
		}
		path = p
	} else if !filepath.IsAbs(name) {
		// serve takes it from its working directory, which systemd sets
		// to /; the check does the same, from the caller's.
		if abs, err := filepath.Abs(name); err == nil {
			path = abs
		}
	}
	if err := executable(e.env.Path(path)); err != nil {
		e.problem(key, "runner %s: %v", path, unwrapPath(err))
	}
}

// model reads a GGUF header and checks it against the kind's runner: the
// built-in one loads only builtinArchs, computes only the tensor types
// engine/runner/kernels supports, and refuses a context beyond the
// trained one. chat asks for a chat template on a generative model,
// unless the runner is given one in extra_args.
func (e *envChecker) model(p, k, path, kind string, ctx int, extra []string, chat bool) {
	key := p + k
	h, err := e.env.Model(e.env.Path(path))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			e.problem(key, "model %s: %v", path, pe.Err)
		} else {
			e.problem(key, "model %s: %v", path, strings.TrimPrefix(strings.TrimPrefix(err.Error(), e.env.Path(path)+": "), "gguf: "))
		}
		return
	}
	if kind == "mesh-gguf" {
		if !slices.Contains(builtinArchs, h.Arch) {
			e.problem(key, "model %s: architecture %q is not one mesh-gguf runs (%s)", path, h.Arch, strings.Join(builtinArchs, ", "))
			return
		}
		var bad []string
		for t, n := range h.Types {
			if !kernels.Supports(t) {
				bad = append(bad, fmt.Sprintf("%s (%d %s)", t, n, map[bool]string{true: "tensor", false: "tensors"}[n == 1]))
			}
		}
		if len(bad) > 0 {
			sort.Strings(bad)
			e.problem(key, "model %s: tensor types mesh-gguf does not compute: %s (it computes %s)", path, strings.Join(bad, ", "), strings.Join(builtinTypes(), ", "))
		}
		if h.TrainedContext > 0 && ctx > h.TrainedContext {
			e.problem(p+"context", "%d exceeds the trained context of %s, %d (%s.context_length): mesh-gguf refuses it", ctx, path, h.TrainedContext, h.Arch)
		}
	}
	if chat && !e.ec.Serve && !h.ChatTemplate && !slices.Contains(encoderArchs, h.Arch) && !hasTemplateArg(extra) {
		e.problem(key, "model %s has no chat template (tokenizer.chat_template): chat completions on this backend would be refused; give the runner one with extra_args = [\"--chat-template\", \"<jinja>\"]", path)
	}
}

// hasTemplateArg says whether extra_args give the runner a chat template
// (mesh-gguf and llama-server both read --chat-template; llama-server
// also --chat-template-file).
func hasTemplateArg(args []string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		name, _, _ := strings.Cut(a, "=")
		if name == "chat-template" || name == "chat-template-file" {
			return true
		}
	}
	return false
}
