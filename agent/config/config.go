// Package config owns meshd's configuration file: its schema, defaults, and
// the checks that refuse a bad file with every problem listed.
//
// `meshd serve -config /etc/meshd/meshd.toml` and `meshd check-config` both
// go through Load. The file is TOML, decoded strictly (a misspelt key is an
// error, not silently ignored, because an ignored `on_meter_failure` or
// `policy` would quietly change what the daemon seals or admits). Parse
// reports every problem it can find at once, each with its line, column and
// dotted key path (`backend[1].fidelity`), so that an operator fixes a file
// in one round rather than one error per restart. Defaults are applied by
// Parse, so callers never see a zero value that means "unset".
package config

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Duration is a time.Duration written in the file as a string such as "30s"
// or "5m" (time.ParseDuration syntax). A bare TOML integer is refused rather
// than read as nanoseconds, because `serve_timeout = 300` meaning 300 ns is a
// trap nobody intends.
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler so that the decoder
// accepts the string form.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q: want a number with a unit, like \"30s\" or \"5m\"", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText implements encoding.TextMarshaler, the inverse of
// UnmarshalText, so a Config can be written back out.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// String formats the duration as time.Duration does, for messages.
func (d Duration) String() string { return time.Duration(d).String() }

// Config is the whole file. Every section is optional except at least one
// [[backend]]; absent keys take the defaults documented on each field.
type Config struct {
	Steward  Steward   `toml:"steward"`
	Listen   Listen    `toml:"listen"`
	Grants   Grants    `toml:"grants"`
	Metering Metering  `toml:"metering"`
	Log      Log       `toml:"log"`
	Defaults Defaults  `toml:"defaults"`
	Limits   Limits    `toml:"limits"`
	Meters   []Meter   `toml:"meter"`   // [[meter]] tables
	Backends []Backend `toml:"backend"` // [[backend]] tables
	Corpora  []Corpus  `toml:"corpus"`  // [[corpus]] tables
	Fleet    Fleet     `toml:"fleet"`
	Auth     Auth      `toml:"auth"`
}

// Fleet publishes the node's receipts to NATS JetStream (FLEET.md); an
// empty URL publishes nothing.
type Fleet struct {
	// URL is one NATS server URL or several separated by commas.
	URL string `toml:"url,omitempty"`
	// Stream defaults to MESH_RECEIPTS.
	Stream string `toml:"stream,omitempty"`
	// Credentials: a creds file, an nkey seed file, or user and password
	// (the password is a secret: it is never logged).
	Creds        string `toml:"creds,omitempty"`
	NKeySeedFile string `toml:"nkey_seed_file,omitempty"`
	User         string `toml:"user,omitempty"`
	Password     string `toml:"password,omitempty"`
	// TLS: the CA to trust and a client certificate.
	CAFile   string `toml:"ca_file,omitempty"`
	CertFile string `toml:"cert_file,omitempty"`
	KeyFile  string `toml:"key_file,omitempty"`
	// Cursor is the file holding the next sequence to publish; default
	// <state_dir>/fleet.cursor.
	Cursor string `toml:"cursor,omitempty"`
	// Duplicates is the stream's duplicate window (default 2m);
	// NoStreamSetup leaves the stream to the operator.
	Duplicates    Duration `toml:"duplicates,omitempty"`
	NoStreamSetup bool     `toml:"no_stream_setup,omitempty"`
	// Batch (default 128) and CheckpointEvery (default 1000, negative:
	// never) tune publishing.
	Batch           int `toml:"batch,omitempty"`
	CheckpointEvery int `toml:"checkpoint_every,omitempty"`
}

// Steward says where the steward keeps its key, receipts and ledger.
type Steward struct {
	// StateDir must be absolute. Default "/var/lib/meshd", or
	// $STATE_DIRECTORY (its first entry) when systemd sets it and state_dir
	// is absent, so a unit with StateDirectory=meshd needs no config line.
	// Receipts live in <state_dir>/receipts, the ledger in <state_dir>/ledger.
	StateDir string `toml:"state_dir,omitempty"`
	// KeyFile defaults to <state_dir>/steward.key (created at first start if
	// absent, mode 0600). A relative path is taken relative to state_dir.
	KeyFile string `toml:"key_file,omitempty"`
	// CheckpointEvery is how many receipts go between signed checkpoints;
	// default 1024, must be > 0.
	CheckpointEvery uint64 `toml:"checkpoint_every,omitempty"`

	// Disk budget (PROFILE.md §8; checked in budget.go). MaxLogBytes and
	// MaxLogShare (a share 0..1 of the filesystem holding the log) bound
	// <state_dir>/receipts; 0 or absent: no bound. Past it, segments
	// before the newest checkpoint move to ArchiveDir (gzip), or, without
	// one, are removed once [fleet] acknowledged every receipt in them.
	// SegmentBytes is the size at which the log starts a new segment
	// (0 or absent: 64 MiB); a budget must hold at least four.
	MaxLogBytes  int64   `toml:"max_log_bytes,omitempty"`
	MaxLogShare  float64 `toml:"max_log_share,omitempty"`
	ArchiveDir   string  `toml:"archive_dir,omitempty"`
	SegmentBytes int64   `toml:"segment_bytes,omitempty"`
	// The rollback witness (PROFILE.md §8, "Rollback witness"). Witness is "none" (or
	// empty, the default: an older copy of the state directory cannot be detected,
	// and the start log says so) or "tpm": every checkpoint is bound to a
	// TPM 2.0 NV counter at WitnessIndex (default 0x01004D53) on
	// WitnessDevice (default /dev/tpmrm0; a unix socket speaking raw TPM
	// commands, such as swtpm's, also works), and a start that finds the
	// log older than the counter is refused.
	Witness       string `toml:"witness,omitempty"`
	WitnessDevice string `toml:"witness_device,omitempty"`
	WitnessIndex  uint32 `toml:"witness_index,omitempty"`
}

// Budgeted says whether the receipt log has a disk budget.
func (s Steward) Budgeted() bool { return s.MaxLogBytes > 0 || s.MaxLogShare > 0 }

// Listen configures the HTTP front: where it listens and the limits that
// keep a slow or hostile client from holding resources.
type Listen struct {
	// TCP lists host:port addresses; default ["127.0.0.1:8477"] (loopback,
	// so a fresh install is not exposed). An explicit empty list means no
	// TCP, and then Unix must be set.
	TCP []string `toml:"tcp,omitempty"`
	// Unix is a socket path; default "" (none). At most 107 bytes, the
	// kernel's sun_path limit.
	Unix string `toml:"unix,omitempty"`
	// MaxBodyBytes caps a request body; default 1 MiB (1048576), must be
	// 1 KiB..64 MiB.
	MaxBodyBytes int64 `toml:"max_body_bytes,omitempty"`
	// ReadHeaderTimeout: default 5s; 0 means none (net/http semantics).
	ReadHeaderTimeout Duration `toml:"read_header_timeout,omitempty"`
	// ReadTimeout covers the whole request body; default 30s; 0 means none.
	ReadTimeout Duration `toml:"read_timeout,omitempty"`
	// IdleTimeout for keep-alive connections; default 120s; 0 means none.
	IdleTimeout Duration `toml:"idle_timeout,omitempty"`
	// ServeTimeout is the per-request deadline including the engine;
	// default 5m, must be > 0.
	ServeTimeout Duration `toml:"serve_timeout,omitempty"`
	// ShutdownTimeout bounds the SIGTERM drain; default 30s, must be > 0.
	ShutdownTimeout Duration `toml:"shutdown_timeout,omitempty"`
	// MaxInFlight is how many serves are admitted at once, the excess get
	// 503; default 256, must be > 0.
	MaxInFlight int `toml:"max_in_flight,omitempty"`
	// TLS, when set, makes every TCP listener speak TLS (config/auth.go).
	TLS ListenTLS `toml:"tls,omitempty"`
	// CORSOrigins are the browser origins allowed to call the API
	// (config/cors.go); default none: no CORS headers at all.
	CORSOrigins []string `toml:"cors_origins,omitempty"`
}

// Grants configures who may spend energy through this steward.
type Grants struct {
	// Policy is "optional" (default: a grant is checked when presented) or
	// "required" (a serve without a valid grant is refused; then some
	// trusted issuer must be configured).
	Policy string `toml:"policy,omitempty"`
	// TrustedIssuers are hex ed25519 public keys (64 hex chars).
	TrustedIssuers []string `toml:"trusted_issuers,omitempty"`
	// TrustedIssuersFile holds one hex key per line, '#' comments (see
	// ReadTrusted); reread on SIGHUP so issuers rotate without a restart.
	// Parse does not read it: Keys does, when the daemon needs the keys.
	TrustedIssuersFile string `toml:"trusted_issuers_file,omitempty"`
}

// Metering says what to do when the power sensors cannot be trusted.
type Metering struct {
	// OnMeterFailure is "refuse" (default): refuse serves while a backend's
	// meter is unhealthy; or "estimate": serve and seal Estimator provenance.
	OnMeterFailure string `toml:"on_meter_failure,omitempty"`
	// Shared lets serves overlap on a span (each charged its share,
	// ModelBased); default false = one metered serve at a time per span.
	Shared bool `toml:"shared,omitempty"`
	// ReadyTimeout is how long start waits for each meter's first samples;
	// default 10s, must be > 0.
	ReadyTimeout Duration `toml:"ready_timeout,omitempty"`
	// RunTimeout closes a benchmark run as incomplete ("abandoned") when
	// no request of the run came for this long (PROFILE §22); default
	// 10m, must be > 0.
	RunTimeout Duration `toml:"run_timeout,omitempty"`
}

// DefaultJouleCeilingUJ is the ceiling of a serve whose caller names none
// (1 kJ): above any ordinary serve on an edge board, so an OpenAI client
// that knows nothing of ceilings is served, yet a finite one.
const DefaultJouleCeilingUJ = 1_000_000_000

// Defaults fill the mesh/1 fields a request leaves out: OpenAI-shaped
// clients know nothing of fidelity floors or joule ceilings.
type Defaults struct {
	// FidelityFloor is 0..4 (F0..F4); default 0.
	FidelityFloor int `toml:"fidelity_floor,omitempty"`
	// JouleCeilingUJ is in µJ, > 0; default DefaultJouleCeilingUJ.
	JouleCeilingUJ uint64 `toml:"joule_ceiling_uj,omitempty"`
	// MaxTokens is the completion length when a request names none;
	// default 16, OpenAI's.
	MaxTokens uint32 `toml:"max_tokens,omitempty"`
}

// Log configures the daemon's own log.
type Log struct {
	Level  string `toml:"level,omitempty"`  // debug|info|warn|error, default info
	Format string `toml:"format,omitempty"` // "text" (default) | "json"
}

// Meter is one [[meter]] table: a power sensor. Which fields apply depends
// on Driver; a field set for a driver that does not use it is a problem, so
// a copy-pasted `zone` on an INA226 does not silently do nothing.
type Meter struct {
	// Name is required, unique, [a-z0-9_-]+; backends refer to it.
	Name string `toml:"name,omitempty"`
	// Driver is one of ina226 | ina219 | hwmon | rapl | nvml | um | line.
	Driver string `toml:"driver,omitempty"`

	// Bus (ina226/ina219, required) is the I2C bus name as periph knows it,
	// e.g. "1" or "/dev/i2c-1" (the two spellings are the same bus).
	Bus string `toml:"bus,omitempty"`
	// Address (ina226/ina219, required) is the 7-bit address, 0x40..0x4f
	// (TOML accepts 0x40).
	Address int `toml:"address,omitempty"`
	// ShuntUOhm is the shunt in µΩ, > 0; required for ina226/ina219,
	// optional for hwmon (where the kernel publishes none).
	ShuntUOhm int64 `toml:"shunt_uohm,omitempty"`
	// MaxCurrentA (ina226/ina219, required) is the expected maximum current
	// in amps, > 0; it sets the current LSB.
	MaxCurrentA float64 `toml:"max_current_a,omitempty"`
	// Preset (ina226/ina219) is precise (default) | fast | kernel |
	// shunt-only.
	Preset string `toml:"preset,omitempty"`
	// BusTolerance (ina226/ina219) is the rail's relative regulation,
	// required > 0 and < 0.5 with preset shunt-only (which never measures
	// the bus voltage), and must be 0 with any other preset.
	BusTolerance float64 `toml:"bus_tolerance,omitempty"`

	// Rail (hwmon, required) is the label or name of the rail.
	Rail string `toml:"rail,omitempty"`
	// HwmonRoot (hwmon) defaults to /sys/class/hwmon.
	HwmonRoot string `toml:"hwmon_root,omitempty"`

	// Zone (rapl, required) is e.g. package-0 or package-0/dram.
	Zone string `toml:"zone,omitempty"`
	// PowercapRoot (rapl) defaults to /sys/class/powercap.
	PowercapRoot string `toml:"powercap_root,omitempty"`

	// GPU (nvml) is the device index, >= 0; default 0.
	GPU int `toml:"gpu,omitempty"`

	// Device (um and line, required) is the serial device, e.g.
	// /dev/ttyACM0.
	Device string `toml:"device,omitempty"`
	// MaxMW (line, required > 0) is the meter's full scale in mW.
	MaxMW int64 `toml:"max_mw,omitempty"`

	// Inside (any driver) names the meter whose energy contains this
	// one's: RAPL's package inside the board input's INA226, a GPU rail
	// inside the board. In a span with that meter this one is a breakdown,
	// shown but never added. Disjoint names meters that see none of this
	// one's energy (a shunt on a separate rail). Two meters in one span
	// must be related one way or the other (PROFILE §13).
	Inside   string   `toml:"inside,omitempty"`
	Disjoint []string `toml:"disjoint,omitempty"`
}

// Backend is one [[backend]] table: an engine the router may pick.
type Backend struct {
	// Name is required, unique, [A-Za-z0-9._-]+; it appears in receipts.
	Name string `toml:"name,omitempty"`
	// Aliases are further model ids that pin an OpenAI-shaped serve to
	// this backend (PROFILE §16), e.g. the model's own name; unique
	// across all backends' names and aliases.
	Aliases []string `toml:"aliases,omitempty"`
	// Embedding makes the backend an embedding engine (mesh-gguf,
	// llama-server with --embedding; reference with deterministic
	// vectors): it serves /v1/embeddings and nothing else, and no
	// embedding serve goes anywhere else.
	Embedding bool `toml:"embedding,omitempty"`
	// Kind is mesh-gguf | llama-server | reference.
	Kind string `toml:"kind,omitempty"`
	// Model is the GGUF path; required for mesh-gguf/llama-server, not
	// used by reference.
	Model string `toml:"model,omitempty"`
	// Runner is the executable; default "mesh-gguf" or "llama-server" by
	// kind; not used by reference (it runs in process).
	Runner string `toml:"runner,omitempty"`
	// Fidelity is the mesh/1 level F0..F4 as 0..4, required.
	Fidelity int `toml:"fidelity"`
	// UJPerToken is the configured µJ per token, required > 0; the router
	// prices with it before any meter has spoken.
	UJPerToken uint64 `toml:"uj_per_token,omitempty"`
	// Meters names the [[meter]]s whose sum meters this backend (its span);
	// may be empty, and then receipts are Estimator.
	Meters []string `toml:"meters,omitempty"`
	// Threads: 0 = engine default, must be >= 0. Not used by reference.
	Threads int `toml:"threads,omitempty"`
	// Context size: 0 = engine default, must be >= 0. Not used by reference.
	Context int `toml:"context,omitempty"`
	// Temperature must be >= 0. Not used by reference (always greedy).
	Temperature float64 `toml:"temperature,omitempty"`
	// Seed for sampling. Not used by reference (deterministic).
	Seed uint32 `toml:"seed,omitempty"`
	// DraftModel is a GGUF path for speculative decoding. Not used by
	// reference.
	DraftModel string `toml:"draft_model,omitempty"`
	// DraftMax and DraftMin bound the draft's length per verifying pass
	// (the runner's --draft-max and --draft-min); 0 leaves the runner's
	// default. Both need draft_model; draft_min must not exceed a
	// draft_max that is set.
	DraftMax int `toml:"draft_max,omitempty"`
	DraftMin int `toml:"draft_min,omitempty"`
	// CacheTypeK and CacheTypeV are the KV cache storage types of keys and
	// values (the runner's --cache-type-k and --cache-type-v): mesh-gguf
	// takes f32 and q8_0, llama-server also f16, bf16, q4_0, q4_1, iq4_nl,
	// q5_0 and q5_1. Setting either names the cache in the receipt's
	// recipe (PROFILE §11), both halves, the one not set being the kind's
	// default (f32, f16); both absent leave the engine's default, unnamed.
	CacheTypeK string `toml:"cache_type_k,omitempty"`
	CacheTypeV string `toml:"cache_type_v,omitempty"`
	// ExtraArgs are passed to the runner verbatim. Not used by reference.
	ExtraArgs []string `toml:"extra_args,omitempty"`
	// Work (reference only) is hash rounds per token, default 8, > 0.
	Work int `toml:"work,omitempty"`
	// URL, Steward and Timeout describe a kind = "meshd" backend: another
	// node's API, its steward key (its receipts must verify under it) and
	// the bound on one forwarded serve (default 5m).
	URL     string   `toml:"url,omitempty"`
	Steward string   `toml:"steward,omitempty"`
	Timeout Duration `toml:"timeout,omitempty"`
	// MaxTokens caps a serve's max_tokens on this backend (any kind),
	// 1..2147483647. Default: for mesh-gguf and llama-server the context
	// the engine runs with (as its /props states it), for reference 4096
	// (engine.DefaultReferenceMaxTokens), for meshd the node's own caps.
	// A serve asking for more is refused before any work (PROFILE §16).
	MaxTokens int64 `toml:"max_tokens,omitempty"`
	// TokenFile holds the bearer token presented to the node; CAFile or
	// ServerSHA256 pin its certificate (https); CertFile and KeyFile are
	// a client certificate (config/auth.go).
	TokenFile    string `toml:"token_file,omitempty"`
	CAFile       string `toml:"ca_file,omitempty"`
	ServerSHA256 string `toml:"server_sha256,omitempty"`
	CertFile     string `toml:"cert_file,omitempty"`
	KeyFile      string `toml:"key_file,omitempty"`
}

// ReceiptsDir is where sealed receipts are written: <state_dir>/receipts.
func (c *Config) ReceiptsDir() string { return filepath.Join(c.Steward.StateDir, "receipts") }

// LedgerDir is where the budget ledger lives: <state_dir>/ledger.
func (c *Config) LedgerDir() string { return filepath.Join(c.Steward.StateDir, "ledger") }

// KeyPath is the steward key's path: key_file, resolved against state_dir
// when relative, so a config can say `key_file = "steward.key"`.
func (c *Config) KeyPath() string {
	k := c.Steward.KeyFile
	if k == "" {
		k = "steward.key"
	}
	if filepath.IsAbs(k) {
		return k
	}
	return filepath.Join(c.Steward.StateDir, k)
}

// Meter returns the [[meter]] called name, so a backend's meters list can be
// resolved without the caller scanning the slice.
func (c *Config) Meter(name string) (Meter, bool) {
	for _, m := range c.Meters {
		if m.Name == name {
			return m, true
		}
	}
	return Meter{}, false
}

// Contains reports whether the meter called inner is declared inside the
// one called outer, directly or through meters inside one another. A
// cycle contains nothing (the checker refuses one).
func (c *Config) Contains(outer, inner string) bool {
	seen := map[string]bool{}
	for at := inner; !seen[at]; {
		seen[at] = true
		m, ok := c.Meter(at)
		if !ok || m.Inside == "" {
			return false
		}
		if m.Inside == outer {
			return true
		}
		at = m.Inside
	}
	return false
}

// Disjoint reports whether either of two meters declares the other
// disjoint.
func (c *Config) Disjoint(a, b string) bool {
	ma, _ := c.Meter(a)
	mb, _ := c.Meter(b)
	return slices.Contains(ma.Disjoint, b) || slices.Contains(mb.Disjoint, a)
}

// SpanInside returns, for each meter of a span declared inside another
// member (directly or through meters inside one another), the nearest
// such outer member: the span reads it as a breakdown of that one, never
// adding it. The members left — the ones the figure sums — must be
// declared disjoint pairwise: meters that may measure the same energy
// would be counted twice, so an undeclared pair is refused.
func (c *Config) SpanInside(names []string) (map[string]string, error) {
	inside := map[string]string{}
	for _, a := range names {
		seen := map[string]bool{}
		for m, _ := c.Meter(a); m.Inside != "" && !seen[m.Inside]; m, _ = c.Meter(m.Inside) {
			seen[m.Inside] = true
			if slices.Contains(names, m.Inside) {
				inside[a] = m.Inside
				break
			}
		}
	}
	var summed []string
	for _, n := range names {
		if _, in := inside[n]; !in {
			summed = append(summed, n)
		}
	}
	for i, a := range summed {
		for _, b := range summed[i+1:] {
			if !c.Disjoint(a, b) {
				return nil, fmt.Errorf("meters %q and %q may measure the same energy, and a span adds its meters: declare inside = %q on meter %q (or inside = %q on %q) if one contains the other, which is then shown as a breakdown, not added; or disjoint = [%q] on %q if they are on separate rails", a, b, a, b, b, a, b, a)
			}
		}
	}
	return inside, nil
}

// MaxCurrentUA is MaxCurrentA in µA, rounded to the nearest, because the INA
// drivers take integer microamps.
func (m Meter) MaxCurrentUA() int64 {
	return int64(math.Round(m.MaxCurrentA * 1e6))
}

// Keys decodes trusted_issuers and, when trusted_issuers_file is set, the
// keys read from it (ReadTrusted), without duplicates. The daemon calls it
// at start and on SIGHUP; Parse has already checked the inline list.
func (g Grants) Keys() ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	seen := map[string]bool{}
	add := func(k ed25519.PublicKey) {
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	var errs []error
	for i, s := range g.TrustedIssuers {
		k, err := decodeKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("grants.trusted_issuers[%d]: %v", i, err))
			continue
		}
		add(k)
	}
	if g.TrustedIssuersFile != "" {
		fk, err := ReadTrusted(g.TrustedIssuersFile)
		if err != nil {
			errs = append(errs, err)
		}
		for _, k := range fk {
			add(k)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keys, nil
}

// ReadTrusted reads a trusted-issuers file: one hex ed25519 public key per
// line; '#' starts a comment (to the end of the line); blank lines are
// skipped. Every bad line is reported, each as "path:line: ...", so a
// rotated file with a typo is fixed in one go. An empty file yields no keys
// and no error: what that means for admission is the policy's business.
func ReadTrusted(path string) ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseTrusted(path, data)
}

// parseTrusted is ReadTrusted on a file's contents.
func parseTrusted(path string, data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k, err := decodeKey(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %v", path, line, err))
			continue
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keys, nil
}

// decodeKey parses one hex ed25519 public key, saying what is wrong with it
// in terms an operator can act on.
func decodeKey(s string) (ed25519.PublicKey, error) {
	if len(s) != 2*ed25519.PublicKeySize {
		return nil, fmt.Errorf("issuer key %s: want %d hex characters (an ed25519 public key), got %d", abbrev(s), 2*ed25519.PublicKeySize, len(s))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("issuer key %s: not hex", abbrev(s))
	}
	return ed25519.PublicKey(b), nil
}

// abbrev quotes s for a message, shortened so a pasted blob does not flood
// the error list.
func abbrev(s string) string {
	if len(s) > 20 {
		return fmt.Sprintf("%q…", s[:16])
	}
	return fmt.Sprintf("%q", s)
}

// Corpus is a RAG corpus served under <org>/<name>: git repositories
// pinned at commits, read from local clones (never fetched while
// serving), embedded by an embedding model the node runs.
type Corpus struct {
	// Org and Name say where the corpus is served: /v1/rag/<org>/<name>/.
	// Both required, [a-z0-9._-]+.
	Org  string `toml:"org,omitempty"`
	Name string `toml:"name,omitempty"`
	// Model names the embedding in the corpus identity (hashed), e.g.
	// "macula/multilingual-e5-small:f16"; required.
	Model string `toml:"model,omitempty"`
	// EmbeddingModel is the GGUF file the embedding engine runs; required.
	EmbeddingModel string `toml:"embedding_model,omitempty"`
	// Runner is the engine executable; default "mesh-gguf".
	Runner  string `toml:"runner,omitempty"`
	Threads int    `toml:"threads,omitempty"`
	Context int    `toml:"context,omitempty"`
	// Meters meter answer_query like a backend's serves.
	Meters []string `toml:"meters,omitempty"`
	// Fidelity (0..4) and UJPerToken (> 0) are what the corpus's answers
	// advertise to the router; default 0 and 1.
	Fidelity   int    `toml:"fidelity"`
	UJPerToken uint64 `toml:"uj_per_token,omitempty"`
	// QueryPrefix and PassagePrefix are the model's role prefixes (e5:
	// "query: " and "passage: "); default none.
	QueryPrefix   string `toml:"query_prefix,omitempty"`
	PassagePrefix string `toml:"passage_prefix,omitempty"`
	// ChunkLines (default 40) and ChunkOverlap (default 8) cut files into
	// passages; MaxFileBytes (default 1 MiB) skips larger files.
	ChunkLines   int   `toml:"chunk_lines,omitempty"`
	ChunkOverlap int   `toml:"chunk_overlap,omitempty"`
	MaxFileBytes int64 `toml:"max_file_bytes,omitempty"`
	// MaxChunkBytes ends a chunk early so a passage fits the embedding
	// model's context; default 1500.
	MaxChunkBytes int `toml:"max_chunk_bytes,omitempty"`
	// SigningKey is the operator's key file (the hex seed `meshctl corpus
	// keygen` writes); when set the corpus hash is signed under
	// SigningProfile ("pq_pure", default, or "pq_hybrid").
	SigningKey     string `toml:"signing_key,omitempty"`
	SigningProfile string `toml:"signing_profile,omitempty"`
	// Sync, when set (at least 10s), makes every repo follow its branch
	// in its local repository: the pin is the branch's head at start and
	// is moved to it every Sync, re-embedding only changed files. A repo
	// of such a corpus has no commit.
	Sync Duration `toml:"sync,omitempty"`
	// Repos in list order (the corpus hash keeps it).
	Repos []CorpusRepo `toml:"repo,omitempty"`
}

// CorpusRepo is one repository of a corpus.
type CorpusRepo struct {
	// ID names the repo in provenance paths; required, unique in the corpus.
	ID string `toml:"id,omitempty"`
	// URL is what describe_corpus shows; required.
	URL string `toml:"url,omitempty"`
	// Path is the local clone (work tree or bare) the commit is read from;
	// required.
	Path string `toml:"path,omitempty"`
	// Branch the pin follows and Commit (40 lowercase hex); required,
	// except Commit in a corpus with sync (the branch's head is the pin).
	Branch string `toml:"branch,omitempty"`
	Commit string `toml:"commit,omitempty"`
}
