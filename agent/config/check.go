package config

import (
	"encoding/hex"
	"fmt"
	"math"
	"meshd/wire"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2/unstable"
)

// checker applies the defaults and the semantic rules to a decoded Config,
// collecting every problem rather than stopping at the first.
type checker struct {
	ix       *index
	c        *Config
	problems []Problem
	// shadowed are keys already reported by a schema-level check (written
	// in the wrong case, a duration given as a number): each is reported
	// once, not again as missing or out of range.
	shadowed []Problem
}

// problem records msg against key, located where key is written (or its
// nearest written ancestor).
func (v *checker) problem(key, format string, args ...any) {
	if covered(v.shadowed, key) {
		return
	}
	line, col := v.ix.pos(key)
	v.problems = append(v.problems, Problem{Line: line, Col: col, Key: key, Msg: fmt.Sprintf(format, args...)})
}

var (
	meterName   = regexp.MustCompile(`^[a-z0-9_-]+$`)
	backendName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

// meterFields says which keys each driver reads; any other key set on a
// meter of that driver is a problem. name and driver apply to all.
var meterFields = map[string][]string{
	"ina226": {"bus", "address", "shunt_uohm", "max_current_a", "preset", "bus_tolerance"},
	"ina219": {"bus", "address", "shunt_uohm", "max_current_a", "preset", "bus_tolerance"},
	"hwmon":  {"rail", "hwmon_root", "shunt_uohm"},
	"rapl":   {"zone", "powercap_root"},
	"nvml":   {"gpu"},
	"um":     {"device"},
	"line":   {"device", "max_mw"},
}

// drivers lists meterFields' keys in the order messages show them.
var drivers = []string{"ina226", "ina219", "hwmon", "rapl", "nvml", "um", "line"}

// backendFields says which keys each kind reads, besides the common name,
// kind, fidelity, uj_per_token and meters.
var backendFields = map[string][]string{
	"mesh-gguf":    {"model", "runner", "threads", "context", "temperature", "seed", "draft_model", "draft_max", "draft_min", "cache_type_k", "cache_type_v", "extra_args", "embedding"},
	"llama-server": {"model", "runner", "threads", "context", "temperature", "seed", "draft_model", "draft_max", "draft_min", "cache_type_k", "cache_type_v", "extra_args", "embedding"},
	"reference":    {"work", "embedding"},
	"meshd":        {"url", "steward", "timeout", "token_file", "ca_file", "server_sha256", "cert_file", "key_file"},
}

// kvTypes are the KV cache types each engine kind takes for cache_type_k
// and cache_type_v, as its --cache-type-k/-v spell them.
var kvTypes = map[string][]string{
	"mesh-gguf":    {"f32", "q8_0"},
	"llama-server": {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"},
}

// kvDefault is the KV cache type each engine kind runs when not told one.
var kvDefault = map[string]string{"mesh-gguf": "f32", "llama-server": "f16"}

// cacheTypeFlags are the runner flags that set the KV cache type; extra_args
// must not carry them, or the recipe would not name the cache.
var cacheTypeFlags = []string{"ctk", "cache-type-k", "ctv", "cache-type-v"}

// kinds lists backendFields' keys in the order messages show them.
var kinds = []string{"mesh-gguf", "llama-server", "reference", "meshd"}

// run applies defaults, then every rule.
func (v *checker) run() {
	v.keyCase()
	v.durationTypes()
	v.defaults()
	v.steward()
	v.witness()
	v.listen()
	v.cors()
	v.auth()
	v.grants()
	v.metering()
	v.requestDefaults()
	v.limits()
	v.log()
	v.meters()
	v.relations()
	v.backends()
	v.aliases()
	v.corpora()
	v.fleet()
	v.budget()
}

// fleet checks the [fleet] table.
func (v *checker) fleet() {
	f := v.c.Fleet
	if f.URL == "" {
		for _, k := range tomlNames(reflect.TypeOf(Fleet{})) {
			if k != "url" && v.ix.has("fleet."+k) {
				v.problem("fleet."+k, "set without fleet.url: nothing would be published")
			}
		}
		return
	}
	for i, u := range strings.Split(f.URL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.Host == "" || (pu.Scheme != "nats" && pu.Scheme != "tls" && pu.Scheme != "ws" && pu.Scheme != "wss") {
			v.problem("fleet.url", "server %d %q: want nats://host:port (or tls://, ws://, wss://)", i+1, strings.TrimSpace(u))
		}
	}
	if (f.User == "") != (f.Password == "") {
		v.problem("fleet.user", "user and password go together")
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		v.problem("fleet.cert_file", "cert_file and key_file go together")
	}
	if f.Batch < 0 {
		v.problem("fleet.batch", "must be > 0")
	}
	if f.Duplicates < 0 {
		v.problem("fleet.duplicates", "must not be negative")
	}
}

// keyCase refuses keys that match a field only when case is ignored: the
// decoder folds case, but `Fidelity` working while the docs say `fidelity`
// is a difference nobody should have to know about, and presence-based
// defaults would miss it.
func (v *checker) keyCase() {
	for _, e := range v.ix.all {
		path := e.path
		if v.ix.byPath[path] != e {
			continue // a redefinition, reported by the decoder
		}
		parts := splitPath(stripIndices(path))
		t := reflect.TypeOf(Config{})
		for i, p := range parts {
			names := fieldNames(t)
			if names == nil {
				break
			}
			ft, exact := names[p]
			if !exact {
				for n, nt := range names {
					if strings.EqualFold(n, p) {
						if i == len(parts)-1 {
							v.problem(path, "keys are case-sensitive: write %q", n)
							v.shadowed = append(v.shadowed, Problem{Key: joinKey(parentPath(path), n)})
						}
						ft = nt
						break
					}
				}
				if ft == nil {
					break
				}
				if i < len(parts)-1 {
					break // reported at the mismatched part itself
				}
			}
			t = ft
		}
	}
}

// durationTypes refuses integers for Duration fields: the decoder would
// store them as nanoseconds.
func (v *checker) durationTypes() {
	durs := []string{
		"listen.read_header_timeout", "listen.read_timeout", "listen.idle_timeout",
		"listen.serve_timeout", "listen.shutdown_timeout", "metering.ready_timeout", "metering.run_timeout",
	}
	for _, k := range durs {
		if kd := v.ix.kind(k); kd != unstable.Invalid && kd != unstable.String {
			v.problem(k, `wrong type: %s where a duration string like "30s" is expected`, article(strings.ToLower(kd.String())))
			v.shadowed = append(v.shadowed, Problem{Key: k})
		}
	}
}

// oneOf checks an enumerated string, listing the allowed values.
func (v *checker) oneOf(key, val string, allowed ...string) bool {
	for _, a := range allowed {
		if val == a {
			return true
		}
	}
	v.problem(key, "%q is not one of %s", val, quoteList(allowed))
	return false
}

// quoteList renders "a", "b" or "c".
func quoteList(s []string) string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = strconv.Quote(x)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// steward checks where the state lives: a relative state_dir would follow
// the daemon's working directory, which systemd sets to /.
func (v *checker) steward() {
	s := v.c.Steward
	if s.StateDir == "" {
		v.problem("steward.state_dir", "must not be empty")
	} else if !filepath.IsAbs(s.StateDir) {
		// The daemon's working directory is not a place to keep a ledger.
		v.problem("steward.state_dir", "must be an absolute path, not %q", s.StateDir)
	}
	if v.ix.has("steward.key_file") && s.KeyFile == "" {
		v.problem("steward.key_file", "must not be empty (omit it for <state_dir>/steward.key)")
	}
	if s.CheckpointEvery == 0 {
		v.problem("steward.checkpoint_every", "must be > 0")
	}
}

// listen checks the addresses (so a typo fails check-config, not the
// bind at start) and the limits.
func (v *checker) listen() {
	l := v.c.Listen
	for i, a := range l.TCP {
		key := fmt.Sprintf("listen.tcp[%d]", i)
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			v.problem(key, "%q is not host:port: %v", a, strings.TrimPrefix(err.Error(), "address "+a+": "))
			continue
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			v.problem(key, "%q: port %q is not a number 0..65535", a, port)
		}
		if strings.ContainsAny(host, " /") {
			v.problem(key, "%q: bad host %q", a, host)
		}
	}
	if len(l.TCP) == 0 && l.Unix == "" {
		v.problem("listen.tcp", "nowhere to listen: tcp is empty and unix is not set")
	}
	if len(l.Unix) > 107 {
		v.problem("listen.unix", "socket path is %d bytes, the limit is 107", len(l.Unix))
	}
	if l.MaxBodyBytes < 1<<10 || l.MaxBodyBytes > 64<<20 {
		v.problem("listen.max_body_bytes", "%d is outside 1024..67108864 (1 KiB..64 MiB)", l.MaxBodyBytes)
	}
	v.duration("listen.read_header_timeout", l.ReadHeaderTimeout, false)
	v.duration("listen.read_timeout", l.ReadTimeout, false)
	v.duration("listen.idle_timeout", l.IdleTimeout, false)
	v.duration("listen.serve_timeout", l.ServeTimeout, true)
	v.duration("listen.shutdown_timeout", l.ShutdownTimeout, true)
	if l.MaxInFlight <= 0 {
		v.problem("listen.max_in_flight", "must be > 0")
	}
}

// duration refuses negative durations, and zero where zero would mean
// "never" for something that must end.
func (v *checker) duration(key string, d Duration, positive bool) {
	switch {
	case d < 0:
		v.problem(key, "must not be negative (%s)", d)
	case d == 0 && positive:
		v.problem(key, "must be > 0")
	}
}

// grants checks the issuer keys and refuses a policy that could admit no
// serve at all.
func (v *checker) grants() {
	g := v.c.Grants
	v.oneOf("grants.policy", g.Policy, "optional", "required")
	for i, s := range g.TrustedIssuers {
		if _, err := decodeKey(s); err != nil {
			v.problem(fmt.Sprintf("grants.trusted_issuers[%d]", i), "%v", err)
		}
	}
	if g.Policy == "required" && len(g.TrustedIssuers) == 0 && g.TrustedIssuersFile == "" {
		v.problem("grants.policy", `"required" but no trusted issuers: set trusted_issuers or trusted_issuers_file, or no serve could ever be admitted`)
	}
}

// metering checks what happens when a meter fails.
func (v *checker) metering() {
	m := v.c.Metering
	v.oneOf("metering.on_meter_failure", m.OnMeterFailure, "refuse", "estimate")
	v.duration("metering.ready_timeout", m.ReadyTimeout, true)
	v.duration("metering.run_timeout", m.RunTimeout, true)
}

// defaults checks what fills the fields a request leaves out.
func (v *checker) requestDefaults() {
	d := v.c.Defaults
	if d.FidelityFloor < 0 || d.FidelityFloor > 4 {
		v.problem("defaults.fidelity_floor", "%d is outside 0..4 (F0..F4)", d.FidelityFloor)
	}
	if d.JouleCeilingUJ == 0 {
		v.problem("defaults.joule_ceiling_uj", "must be > 0: a zero ceiling admits no serve")
	}
	if d.MaxTokens == 0 {
		v.problem("defaults.max_tokens", "must be > 0")
	}
}

// log checks the log settings.
func (v *checker) log() {
	v.oneOf("log.level", v.c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", v.c.Log.Format, "text", "json")
}

// finite reports whether f is usable as a quantity: TOML allows nan and
// inf, and NaN fails every comparison, so a range check alone would pass it.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// meters checks each [[meter]] against its driver: names, required and
// foreign keys, ranges, and two meters claiming one I2C device.
func (v *checker) meters() {
	names := map[string]int{}
	type busAddr struct {
		bus  string
		addr int
	}
	addrs := map[busAddr]int{}
	for i, m := range v.c.Meters {
		p := fmt.Sprintf("meter[%d].", i)
		has := func(k string) bool { return v.ix.has(p + k) }
		switch {
		case !has("name") || m.Name == "":
			v.problem(p+"name", "required")
		case !meterName.MatchString(m.Name):
			v.problem(p+"name", "%q: use only a-z, 0-9, _ and -", m.Name)
		default:
			if j, dup := names[m.Name]; dup {
				line, _ := v.ix.pos(fmt.Sprintf("meter[%d].name", j))
				v.problem(p+"name", "duplicate meter name %q (first at line %d)", m.Name, line)
			} else {
				names[m.Name] = i
			}
		}
		if !has("driver") {
			v.problem(p+"driver", "required, one of %s", quoteList(drivers))
			continue
		}
		if !v.oneOf(p+"driver", m.Driver, drivers...) {
			continue
		}
		allowed := map[string]bool{"name": true, "driver": true, "inside": true, "disjoint": true}
		for _, f := range meterFields[m.Driver] {
			allowed[f] = true
		}
		for _, f := range tomlNames(reflect.TypeOf(Meter{})) {
			if has(f) && !allowed[f] {
				v.problem(p+f, "not used by driver %s", m.Driver)
			}
		}
		required := func(k string) bool {
			if !has(k) {
				v.problem(p+k, "required by driver %s", m.Driver)
				return false
			}
			return true
		}
		switch m.Driver {
		case "ina226", "ina219":
			if required("bus") && m.Bus == "" {
				v.problem(p+"bus", "must not be empty")
			}
			if required("address") {
				if m.Address < 0x40 || m.Address > 0x4f {
					v.problem(p+"address", "%#x is outside 0x40..0x4f", m.Address)
				} else if m.Bus != "" {
					// "1" and "/dev/i2c-1" are the same bus to periph.
					k := busAddr{strings.TrimPrefix(m.Bus, "/dev/i2c-"), m.Address}
					if j, dup := addrs[k]; dup {
						v.problem(p+"address", "bus %q address %#x is already meter[%d] (%s)", m.Bus, m.Address, j, v.c.Meters[j].Name)
					} else {
						addrs[k] = i
					}
				}
			}
			if required("shunt_uohm") && m.ShuntUOhm <= 0 {
				v.problem(p+"shunt_uohm", "must be > 0 (µΩ)")
			}
			if required("max_current_a") && !(m.MaxCurrentA > 0 && finite(m.MaxCurrentA)) {
				v.problem(p+"max_current_a", "must be > 0 (amps)")
			}
			v.oneOf(p+"preset", m.Preset, "precise", "fast", "kernel", "shunt-only")
			if m.Preset == "shunt-only" {
				if !has("bus_tolerance") {
					v.problem(p+"bus_tolerance", "required with preset shunt-only (it never measures the bus voltage)")
				} else if !(m.BusTolerance > 0 && m.BusTolerance < 0.5) {
					v.problem(p+"bus_tolerance", "%g is outside (0, 0.5)", m.BusTolerance)
				}
			} else if m.BusTolerance != 0 {
				v.problem(p+"bus_tolerance", "only used with preset shunt-only (preset %q measures the bus)", m.Preset)
			}
		case "hwmon":
			if required("rail") && m.Rail == "" {
				v.problem(p+"rail", "must not be empty")
			}
			if has("shunt_uohm") && m.ShuntUOhm <= 0 {
				v.problem(p+"shunt_uohm", "must be > 0 (µΩ)")
			}
			if m.HwmonRoot == "" {
				v.problem(p+"hwmon_root", "must not be empty")
			}
		case "rapl":
			if required("zone") && m.Zone == "" {
				v.problem(p+"zone", "must not be empty")
			}
			if m.PowercapRoot == "" {
				v.problem(p+"powercap_root", "must not be empty")
			}
		case "nvml":
			if m.GPU < 0 {
				v.problem(p+"gpu", "must be >= 0")
			}
		case "um", "line":
			if required("device") && m.Device == "" {
				v.problem(p+"device", "must not be empty")
			}
			if m.Driver == "line" && required("max_mw") && m.MaxMW <= 0 {
				v.problem(p+"max_mw", "must be > 0 (mW)")
			}
		}
	}
}

// relations checks what the meters declare of one another: inside and
// disjoint name other meters, a meter is never inside or disjoint from
// itself, inside does not go round in a cycle, and no two meters are
// declared both nested and disjoint.
func (v *checker) relations() {
	for i, m := range v.c.Meters {
		p := fmt.Sprintf("meter[%d].", i)
		if v.ix.has(p + "inside") {
			switch _, ok := v.c.Meter(m.Inside); {
			case m.Inside == m.Name:
				v.problem(p+"inside", "a meter cannot be inside itself")
			case !ok:
				v.problem(p+"inside", "no [[meter]] is named %q", m.Inside)
			case v.c.Contains(m.Name, m.Name):
				v.problem(p+"inside", "meters declared inside one another form a cycle through %q", m.Name)
			}
		}
		seen := map[string]bool{}
		for j, d := range m.Disjoint {
			k := fmt.Sprintf("%sdisjoint[%d]", p, j)
			switch _, ok := v.c.Meter(d); {
			case d == m.Name:
				v.problem(k, "a meter cannot be disjoint from itself")
			case !ok:
				v.problem(k, "no [[meter]] is named %q", d)
			case seen[d]:
				v.problem(k, "%q is listed twice", d)
			case v.c.Contains(d, m.Name) || v.c.Contains(m.Name, d):
				v.problem(k, "%q and %q are declared both disjoint and one inside the other", m.Name, d)
			}
			seen[d] = true
		}
	}
}

// spanRelated reports a span (at key, the list of meters) whose meters
// are not all declared related: a span adds its meters, so two that may
// measure the same energy would be counted twice.
func (v *checker) spanRelated(key string, names []string) {
	for _, n := range names {
		if _, ok := v.c.Meter(n); !ok {
			return // already reported
		}
	}
	if _, err := v.c.SpanInside(names); err != nil {
		v.problem(key, "%v", err)
	}
}

// backends checks each [[backend]] against its kind, its meters against
// the [[meter]]s, and that there is something to serve.
func (v *checker) backends() {
	if len(v.c.Backends) == 0 && len(v.c.Corpora) == 0 {
		v.problem("backend", "no [[backend]] or [[corpus]] configured: there would be nothing to serve")
		return
	}
	names := map[string]int{}
	for i, b := range v.c.Backends {
		p := fmt.Sprintf("backend[%d].", i)
		has := func(k string) bool { return v.ix.has(p + k) }
		switch {
		case !has("name") || b.Name == "":
			v.problem(p+"name", "required")
		case !backendName.MatchString(b.Name):
			v.problem(p+"name", "%q: use only A-Z, a-z, 0-9, '.', '_' and '-'", b.Name)
		default:
			if j, dup := names[b.Name]; dup {
				line, _ := v.ix.pos(fmt.Sprintf("backend[%d].name", j))
				v.problem(p+"name", "duplicate backend name %q (first at line %d)", b.Name, line)
			} else {
				names[b.Name] = i
			}
		}
		if !has("fidelity") {
			v.problem(p+"fidelity", "required (0..4, the mesh/1 levels F0..F4)")
		} else if b.Fidelity < 0 || b.Fidelity > 4 {
			v.problem(p+"fidelity", "%d is outside 0..4 (F0..F4)", b.Fidelity)
		}
		if !has("uj_per_token") {
			v.problem(p+"uj_per_token", "required (µJ per token, > 0)")
		} else if b.UJPerToken == 0 {
			v.problem(p+"uj_per_token", "must be > 0")
		}
		seen := map[string]int{}
		for j, m := range b.Meters {
			k := fmt.Sprintf("%smeters[%d]", p, j)
			if _, ok := v.c.Meter(m); !ok {
				v.problem(k, "no [[meter]] is named %q", m)
			} else if first, dup := seen[m]; dup {
				v.problem(k, "meter %q is already meters[%d]: it would be counted twice", m, first)
			}
			if _, dup := seen[m]; !dup {
				seen[m] = j
			}
		}
		if len(seen) == len(b.Meters) {
			v.spanRelated(p+"meters", b.Meters)
		}
		if !has("kind") {
			v.problem(p+"kind", "required, one of %s", quoteList(kinds))
			continue
		}
		if !v.oneOf(p+"kind", b.Kind, kinds...) {
			continue
		}
		allowed := map[string]bool{"name": true, "kind": true, "fidelity": true, "uj_per_token": true, "meters": true, "max_tokens": true, "aliases": true}
		for _, f := range backendFields[b.Kind] {
			allowed[f] = true
		}
		for _, f := range tomlNames(reflect.TypeOf(Backend{})) {
			if has(f) && !allowed[f] {
				v.problem(p+f, "not used by kind %s", b.Kind)
			}
		}
		switch b.Kind {
		case "mesh-gguf", "llama-server":
			if !has("model") {
				v.problem(p+"model", "required by kind %s (a GGUF path)", b.Kind)
			} else if b.Model == "" {
				v.problem(p+"model", "must not be empty")
			}
			if b.Runner == "" {
				v.problem(p+"runner", "must not be empty (omit it for %q)", b.Kind)
			}
			if b.Threads < 0 {
				v.problem(p+"threads", "must be >= 0 (0 = engine default)")
			}
			if b.Context < 0 {
				v.problem(p+"context", "must be >= 0 (0 = engine default)")
			}
			if !(b.Temperature >= 0 && finite(b.Temperature)) {
				v.problem(p+"temperature", "must be >= 0")
			}
			if has("draft_model") && b.DraftModel == "" {
				v.problem(p+"draft_model", "must not be empty (omit it for no draft model)")
			}
			for _, d := range []struct {
				key string
				n   int
			}{{"draft_max", b.DraftMax}, {"draft_min", b.DraftMin}} {
				switch {
				case !has(d.key):
				case d.n < 0:
					v.problem(p+d.key, "must be >= 0 (0 = the runner's default)")
				case b.DraftModel == "":
					v.problem(p+d.key, "needs draft_model (the draft model it bounds)")
				}
			}
			if b.DraftMax > 0 && b.DraftMin > b.DraftMax {
				v.problem(p+"draft_min", "%d exceeds draft_max %d", b.DraftMin, b.DraftMax)
			}
			for _, kv := range []struct{ key, val string }{{"cache_type_k", b.CacheTypeK}, {"cache_type_v", b.CacheTypeV}} {
				if has(kv.key) && !slices.Contains(kvTypes[b.Kind], kv.val) {
					v.problem(p+kv.key, "%q is not a KV cache type kind %s takes (%s)", kv.val, b.Kind, quoteList(kvTypes[b.Kind]))
				}
			}
			for j, a := range b.ExtraArgs {
				name, ok := strings.CutPrefix(a, "-")
				name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
				if ok && slices.Contains(cacheTypeFlags, name) {
					v.problem(fmt.Sprintf("%sextra_args[%d]", p, j), "%q sets the KV cache type, which the receipt's recipe would not name: use cache_type_k and cache_type_v", a)
				}
			}
		case "reference":
			if b.Work <= 0 {
				v.problem(p+"work", "must be > 0")
			}
		case "meshd":
			if !has("url") {
				v.problem(p+"url", "required by kind meshd (the node's API, e.g. http://10.0.0.7:8477)")
			} else if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.problem(p+"url", "%q: want http://host:port or https://host:port", b.URL)
			}
			if !has("steward") {
				v.problem(p+"steward", "required by kind meshd: the node's steward key (64 hex digits), to verify its receipts")
			} else if k, err := hex.DecodeString(b.Steward); err != nil || len(k) != 32 || strings.ToLower(b.Steward) != b.Steward {
				v.problem(p+"steward", "want the node's steward key as 64 lowercase hex digits")
			}
			v.duration(p+"timeout", b.Timeout, true)
			v.remoteAuth(p, b)
		}
	}
}

// tomlNames lists a struct type's toml keys in field order.
func tomlNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); n != "" && n != "-" {
			names = append(names, n)
		}
	}
	return names
}

// fieldNames maps the toml keys of t (a struct, or a slice of structs as
// for [[meter]]) to their types; nil when t has no keys.
func fieldNames(t reflect.Type) map[string]reflect.Type {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(Duration(0)) {
		return nil
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ","); n != "" && n != "-" {
			m[n] = t.Field(i).Type
		}
	}
	return m
}

// suggest finds the schema key nearest to the last part of key (a decoder
// key, without indices), for "did you mean" hints; "" when none is close.
func suggest(key []string) string {
	t := reflect.TypeOf(Config{})
	for _, p := range key[:len(key)-1] {
		names := fieldNames(t)
		ft, ok := names[p]
		if !ok {
			return ""
		}
		t = ft
	}
	bad := strings.ToLower(key[len(key)-1])
	best, bestD := "", 3
	for _, n := range tomlNames(derefStruct(t)) {
		if d := editDistance(bad, n); d < bestD && d <= len(n)/2 {
			best, bestD = n, d
		}
	}
	return best
}

// derefStruct unwraps slices to their struct element; a non-struct yields
// an empty struct type so tomlNames finds nothing.
func derefStruct(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return reflect.TypeOf(struct{}{})
	}
	return t
}

// editDistance is the Levenshtein distance between a and b, bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// splitPath splits a dotted path (no indices) into its parts, unquoting
// quoted ones.
func splitPath(p string) []string {
	var parts []string
	for p != "" {
		if p[0] == '"' {
			end := 1
			for end < len(p) && p[end] != '"' {
				if p[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(p) {
				parts = append(parts, p)
				break
			}
			s, err := strconv.Unquote(p[:end+1])
			if err != nil {
				s = p[:end+1]
			}
			parts = append(parts, s)
			p = strings.TrimPrefix(p[end+1:], ".")
			continue
		}
		head, rest, _ := strings.Cut(p, ".")
		parts = append(parts, head)
		p = rest
	}
	return parts
}

var corpusName = regexp.MustCompile(`^[a-z0-9._-]+$`)

// corpora checks each [[corpus]] and its [[corpus.repo]]s.
func (v *checker) corpora() {
	where := map[string]int{}
	for i, c := range v.c.Corpora {
		p := fmt.Sprintf("corpus[%d].", i)
		has := func(k string) bool { return v.ix.has(p + k) }
		for _, k := range []string{"org", "name"} {
			val := map[string]string{"org": c.Org, "name": c.Name}[k]
			if !has(k) || val == "" {
				v.problem(p+k, "required")
			} else if !corpusName.MatchString(val) {
				v.problem(p+k, "%q: use only a-z, 0-9, '.', '_' and '-'", val)
			}
		}
		if j, dup := where[c.Org+"/"+c.Name]; dup && c.Org != "" && c.Name != "" {
			line, _ := v.ix.pos(fmt.Sprintf("corpus[%d].name", j))
			v.problem(p+"name", "corpus %s/%s is already served (line %d)", c.Org, c.Name, line)
		} else {
			where[c.Org+"/"+c.Name] = i
		}
		if c.Model == "" {
			v.problem(p+"model", "required: the embedding's name in the corpus identity")
		}
		if c.EmbeddingModel == "" {
			v.problem(p+"embedding_model", "required: the GGUF file the embedding engine runs")
		}
		if c.Fidelity < 0 || c.Fidelity > 4 {
			v.problem(p+"fidelity", "%d is outside 0..4 (F0..F4)", c.Fidelity)
		}
		if has("uj_per_token") && c.UJPerToken == 0 {
			v.problem(p+"uj_per_token", "must be > 0")
		}
		if c.ChunkLines < 0 || (has("chunk_lines") && c.ChunkLines == 0) {
			v.problem(p+"chunk_lines", "must be > 0")
		}
		if c.ChunkOverlap < 0 || (c.ChunkLines > 0 && c.ChunkOverlap >= c.ChunkLines) {
			v.problem(p+"chunk_overlap", "must be >= 0 and below chunk_lines")
		}
		if c.MaxFileBytes < 0 {
			v.problem(p+"max_file_bytes", "must be > 0")
		}
		if c.MaxChunkBytes < 0 || (has("max_chunk_bytes") && c.MaxChunkBytes == 0) {
			v.problem(p+"max_chunk_bytes", "must be > 0")
		}
		if has("signing_profile") {
			v.oneOf(p+"signing_profile", c.SigningProfile, "pq_pure", "pq_hybrid")
		}
		if has("sync") && time.Duration(c.Sync) < 10*time.Second {
			v.problem(p+"sync", "want at least 10s between syncs, got %v", time.Duration(c.Sync))
		}
		for j, m := range c.Meters {
			if _, ok := v.c.Meter(m); !ok {
				v.problem(fmt.Sprintf("%smeters[%d]", p, j), "no [[meter]] is named %q", m)
			}
		}
		v.spanRelated(p+"meters", c.Meters)
		ids := map[string]bool{}
		for j, r := range c.Repos {
			rp := fmt.Sprintf("%srepo[%d].", p, j)
			for _, f := range []struct{ k, v string }{{"id", r.ID}, {"url", r.URL}, {"path", r.Path}, {"branch", r.Branch}} {
				if f.v == "" {
					v.problem(rp+f.k, "required")
				}
			}
			if ids[r.ID] && r.ID != "" {
				v.problem(rp+"id", "repo id %q listed twice in this corpus", r.ID)
			}
			ids[r.ID] = true
			switch {
			case c.Sync > 0 && r.Commit != "":
				v.problem(rp+"commit", "a corpus with sync follows the branch's head: leave commit out")
			case c.Sync == 0 && !wire.IsLowerHex(r.Commit, 20):
				v.problem(rp+"commit", "want the pinned commit as 40 lowercase hex digits, got %q", r.Commit)
			}
		}
	}
}
