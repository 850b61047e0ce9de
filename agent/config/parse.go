package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// Problem is one thing wrong with a config file, located like a compiler
// error so an editor can jump to it.
type Problem struct {
	Line, Col int    // 1-based; 0 when unknown (e.g. "no backends at all")
	Key       string // dotted path such as backend[1].fidelity; "" for syntax errors
	Msg       string
}

// String formats p without the file name, as "line:col: key: msg".
func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:", p.Line)
		if p.Col > 0 {
			fmt.Fprintf(&b, "%d:", p.Col)
		}
		b.WriteByte(' ')
	}
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found in one file: the error Parse and Load
// return for an invalid file, so the whole list reaches the operator.
type Problems struct {
	File string
	List []Problem // sorted by line, then column; unknown lines last
}

// Error lists the problems, one per line after a summary line, each as
// "file:line:col: key: msg" (the form editors and CI annotate).
func (ps *Problems) Error() string {
	var b strings.Builder
	n := len(ps.List)
	if n == 1 {
		fmt.Fprintf(&b, "1 problem in %s", ps.File)
	} else {
		fmt.Fprintf(&b, "%d problems in %s", n, ps.File)
	}
	for _, p := range ps.List {
		b.WriteByte('\n')
		b.WriteString(ps.File)
		b.WriteByte(':')
		if p.Line == 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// sort orders the list by position; problems with no line go last, after
// the ones an editor can jump to.
func (ps *Problems) sort() {
	sort.SliceStable(ps.List, func(i, j int) bool {
		a, b := ps.List[i], ps.List[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
}

// Load reads path and Parses it. The error is *Problems when the file is
// invalid, or the os error (wrapped, naming the file) when it cannot be read.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes a config file strictly, applies the defaults and checks
// every rule, returning *Problems listing all that is wrong; name is used in
// the messages. On error the returned Config is nil: a half-valid config is
// not something to run with.
func Parse(data []byte, name string) (*Config, error) {
	return parse(data, name, nil)
}

// parse is Parse, then the environment pass when ec is not nil. A table
// written twice is one problem, and the keys of each of its definitions
// are still checked: the file is checked once with the first definition
// (the others blanked), then once per other definition with only that one
// kept, whose problems within it are added.
func parse(data []byte, name string, ec *EnvCheck) (*Config, error) {
	ps := &Problems{File: name}
	ix, serr := buildIndex(data)
	if serr != nil {
		line, col := ix.position(serr.off)
		key := ""
		if len(serr.key) > 0 {
			key = strings.Join(serr.key, ".")
		}
		ps.List = append(ps.List, Problem{Line: line, Col: col, Key: key, Msg: "syntax error: " + serr.msg})
		return nil, ps
	}
	var c *Config
	if len(ix.dups) == 0 {
		c, ps.List = checkDoc(data, ix, ec)
	} else {
		blank := func(buf []byte, x int) {
			for i := ix.exprs[x].start; i < ix.exprs[x].end; i++ {
				if buf[i] != '\n' && buf[i] != '\r' {
					buf[i] = ' '
				}
			}
		}
		variant := func(keep map[int]bool) (*index, []Problem) {
			buf := bytes.Clone(data)
			for _, d := range ix.dups {
				if !keep[d.first] {
					blank(buf, d.first)
				}
				if !keep[d.dup] {
					blank(buf, d.dup)
				}
			}
			vix, serr := buildIndex(buf)
			if serr != nil {
				return nil, nil // cannot happen: whole sections were blanked
			}
			_, list := checkDoc(buf, vix, ec)
			return vix, list
		}
		firsts := map[int]bool{}
		for _, d := range ix.dups {
			firsts[d.first] = true
		}
		_, ps.List = variant(firsts)
		for _, d := range ix.dups {
			fl, _ := ix.position(ix.exprs[d.first].start)
			line, col := ix.position(ix.exprs[d.dup].start)
			ps.List = append(ps.List, Problem{Line: line, Col: col, Key: d.path,
				Msg: fmt.Sprintf("table [%s] is already defined at line %d: write each table once (the keys of both are checked here)", d.path, fl)})
			keep := map[int]bool{d.dup: true}
			for _, o := range ix.dups {
				if o.path != d.path {
					keep[o.first] = true
				}
			}
			from, _ := ix.position(ix.exprs[d.dup].start)
			to, _ := ix.position(ix.exprs[d.dup].end - 1)
			_, list := variant(keep)
			for _, p := range list {
				if p.Line >= from && p.Line <= to && !slices.Contains(ps.List, p) {
					ps.List = append(ps.List, p)
				}
			}
		}
	}
	if len(ps.List) > 0 {
		ps.sort()
		return nil, ps
	}
	return c, nil
}

// checkDoc decodes one document, runs the static checks and, with ec,
// the environment pass on it.
func checkDoc(data []byte, ix *index, ec *EnvCheck) (*Config, []Problem) {
	c, decodeProblems, complete := decode(data, ix)
	list := slices.Clone(decodeProblems)
	if complete {
		v := &checker{ix: ix, c: c}
		v.run()
		if ec != nil {
			v.envPass(ec)
		}
		for _, p := range v.problems {
			if !covered(decodeProblems, p.Key) {
				list = append(list, p)
			}
		}
	}
	return c, list
}

// covered says whether key already has a decode problem on it or on an
// enclosing or enclosed key: a value of the wrong type is reported once, not
// again as "missing" after the decoder dropped it.
func covered(ps []Problem, key string) bool {
	for _, p := range ps {
		if p.Key == "" {
			continue
		}
		if p.Key == key || isUnder(key, p.Key) || isUnder(p.Key, key) {
			return true
		}
	}
	return false
}

// isUnder says whether path lies strictly inside prefix.
func isUnder(path, prefix string) bool {
	return len(path) > len(prefix) && strings.HasPrefix(path, prefix) &&
		(path[len(prefix)] == '.' || path[len(prefix)] == '[')
}

// decode runs the strict decoder until it accepts what is left of the
// document. The decoder stops at its first type error, so each refused
// expression is recorded and blanked (spaces, newlines kept, so positions
// do not move) and decoding starts again; unknown keys come back all at
// once at the end. complete is false when the decoder failed in a way that
// could not be isolated, and then the semantic checks, which would only
// report its consequences, are skipped.
func decode(data []byte, ix *index) (c *Config, problems []Problem, complete bool) {
	buf := bytes.Clone(data)
	blanked := make([]bool, len(ix.exprs))
	for range len(ix.exprs) + 1 {
		c = new(Config)
		err := safeDecode(buf, c)
		if err == nil {
			return c, problems, true
		}
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			for i := range sm.Errors {
				e := &sm.Errors[i]
				line, col := e.Position()
				key := ix.keyAt(ix.offset(line, col), e.Key())
				problems = append(problems, Problem{Line: line, Col: col, Key: key, Msg: unknownMsg(e)})
			}
			return c, problems, true
		}
		var de *toml.DecodeError
		if !errors.As(err, &de) {
			problems = append(problems, Problem{Msg: strings.TrimPrefix(err.Error(), "toml: ")})
			return c, problems, false
		}
		line, col := de.Position()
		off := ix.offset(line, col)
		key := ix.keyAt(off, de.Key())
		problems = append(problems, Problem{Line: line, Col: col, Key: key, Msg: decodeMsg(de)})
		if len(problems) >= maxDecodeProblems {
			// Each retry decodes the whole file again; past this many, the
			// file is not a config with typos and the list is long enough.
			problems = append(problems, Problem{Line: line, Col: col, Msg: fmt.Sprintf("too many errors (%d), stopping here", len(problems))})
			return c, problems, false
		}
		x := ix.exprAt(off)
		if x < 0 || blanked[x] {
			return c, problems, false
		}
		blanked[x] = true
		for i := ix.exprs[x].start; i < ix.exprs[x].end; i++ {
			if buf[i] != '\n' && buf[i] != '\r' {
				buf[i] = ' '
			}
		}
	}
	return c, problems, false
}

// maxDecodeProblems bounds the decode-and-blank retries, which cost a full
// decode each.
const maxDecodeProblems = 50

// safeDecode decodes strictly, turning a panic inside the library into an
// error: a config checker must not crash on the input it checks.
func safeDecode(buf []byte, c *Config) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cannot decode: %v", r)
		}
	}()
	d := toml.NewDecoder(bytes.NewReader(buf))
	d.DisallowUnknownFields()
	return d.Decode(c)
}

// decodeMsg rewords the decoder's message in the file's terms: "cannot
// decode TOML string into int" becomes "wrong type: a string where an
// integer is expected".
func decodeMsg(de *toml.DecodeError) string {
	msg := strings.TrimPrefix(de.Error(), "toml: ")
	if m := mismatch.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("wrong type: %s where %s is expected", article(m[1]), goTypeName(m[2]))
	}
	return msg
}

// mismatch matches go-toml's two forms of a type error.
var mismatch = regexp.MustCompile(`^cannot decode TOML (.+?) into (?:struct field \S+ of type )?(\S+)$`)

// article prefixes a TOML type name with a/an.
func article(s string) string {
	switch s {
	case "integer", "array", "inline", "offset", "local":
		return "an " + s
	}
	return "a " + s
}

// goTypeName names a Go field type the way the config file would.
func goTypeName(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int", "int64", "uint64", "uint32", "int32":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "a boolean (true or false)"
	case "config.Duration":
		return `a duration string like "30s"`
	case "[]string":
		return "an array of strings"
	}
	if strings.HasPrefix(t, "[]config.") {
		return "an array of tables"
	}
	if strings.HasPrefix(t, "config.") {
		return "a table"
	}
	return t
}

// unknownMsg explains a key the schema does not have, suggesting the
// nearest known key at that level when one is close: most unknown keys are
// typos.
func unknownMsg(e *toml.DecodeError) string {
	k := e.Key()
	what := "unknown key"
	if strings.Contains(e.Error(), "table") {
		what = "unknown table"
	}
	if len(k) == 0 {
		return what
	}
	msg := fmt.Sprintf("%s %q", what, k[len(k)-1])
	if s := suggest(k); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return msg
}

// defaults fills in every absent key. It goes by presence in the document,
// not by zero value, so an explicit `max_in_flight = 0` is checked (and
// refused) rather than silently replaced, and `tcp = []` means no TCP.
func (v *checker) defaults() {
	c, ix := v.c, v.ix
	if !ix.has("steward.state_dir") {
		c.Steward.StateDir = "/var/lib/meshd"
		// systemd's StateDirectory= may list several, colon-separated; the
		// first is the unit's own.
		if d, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); d != "" {
			c.Steward.StateDir = d
		}
	}
	if !ix.has("steward.key_file") {
		c.Steward.KeyFile = filepath.Join(c.Steward.StateDir, "steward.key")
	}
	if !ix.has("steward.checkpoint_every") {
		c.Steward.CheckpointEvery = 1024
	}
	l := &c.Listen
	if !ix.has("listen.tcp") {
		l.TCP = []string{"127.0.0.1:8477"}
	}
	if l.TCP == nil {
		l.TCP = []string{}
	}
	setInt64(ix, "listen.max_body_bytes", &l.MaxBodyBytes, 1<<20)
	setDur(ix, "listen.read_header_timeout", &l.ReadHeaderTimeout, "5s")
	setDur(ix, "listen.read_timeout", &l.ReadTimeout, "30s")
	setDur(ix, "listen.idle_timeout", &l.IdleTimeout, "120s")
	setDur(ix, "listen.serve_timeout", &l.ServeTimeout, "5m")
	setDur(ix, "listen.shutdown_timeout", &l.ShutdownTimeout, "30s")
	if !ix.has("listen.max_in_flight") {
		l.MaxInFlight = 256
	}
	setStr(ix, "grants.policy", &c.Grants.Policy, "optional")
	setStr(ix, "metering.on_meter_failure", &c.Metering.OnMeterFailure, "refuse")
	setDur(ix, "metering.ready_timeout", &c.Metering.ReadyTimeout, "10s")
	setDur(ix, "metering.run_timeout", &c.Metering.RunTimeout, "10m")
	setStr(ix, "log.level", &c.Log.Level, "info")
	setStr(ix, "log.format", &c.Log.Format, "text")
	if c.Fleet.URL != "" && c.Fleet.Cursor == "" {
		c.Fleet.Cursor = filepath.Join(c.Steward.StateDir, "fleet.cursor")
	}
	for i := range c.Backends {
		if c.Backends[i].Kind == "meshd" {
			setDur(ix, fmt.Sprintf("backend[%d].timeout", i), &c.Backends[i].Timeout, "5m")
		}
	}
	for i := range c.Corpora {
		k := &c.Corpora[i]
		p := fmt.Sprintf("corpus[%d].", i)
		setStr(ix, p+"runner", &k.Runner, "mesh-gguf")
		setStr(ix, p+"signing_profile", &k.SigningProfile, "pq_pure")
		if !ix.has(p + "uj_per_token") {
			k.UJPerToken = 1
		}
		if !ix.has(p + "chunk_lines") {
			k.ChunkLines = 40
		}
		if !ix.has(p + "chunk_overlap") {
			k.ChunkOverlap = min(8, k.ChunkLines/4)
		}
		setInt64(ix, p+"max_file_bytes", &k.MaxFileBytes, 1<<20)
		if !ix.has(p + "max_chunk_bytes") {
			k.MaxChunkBytes = 1500
		}
	}
	if !ix.has("defaults.joule_ceiling_uj") {
		c.Defaults.JouleCeilingUJ = DefaultJouleCeilingUJ
	}
	if !ix.has("defaults.max_tokens") {
		c.Defaults.MaxTokens = 16
	}
	limitDefaults(ix, c)
	for i := range c.Meters {
		m := &c.Meters[i]
		p := fmt.Sprintf("meter[%d].", i)
		switch m.Driver {
		case "ina226", "ina219":
			setStr(ix, p+"preset", &m.Preset, "precise")
		case "hwmon":
			setStr(ix, p+"hwmon_root", &m.HwmonRoot, "/sys/class/hwmon")
		case "rapl":
			setStr(ix, p+"powercap_root", &m.PowercapRoot, "/sys/class/powercap")
		}
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		p := fmt.Sprintf("backend[%d].", i)
		switch b.Kind {
		case "mesh-gguf", "llama-server":
			setStr(ix, p+"runner", &b.Runner, b.Kind)
			// A cache named in the recipe is named whole: the half not
			// set is the engine's default, passed explicitly.
			if ix.has(p+"cache_type_k") || ix.has(p+"cache_type_v") {
				setStr(ix, p+"cache_type_k", &b.CacheTypeK, kvDefault[b.Kind])
				setStr(ix, p+"cache_type_v", &b.CacheTypeV, kvDefault[b.Kind])
			}
		case "reference":
			if !ix.has(p + "work") {
				b.Work = 8
			}
		}
	}
}

// setStr sets *s to def when key is absent.
func setStr(ix *index, key string, s *string, def string) {
	if !ix.has(key) {
		*s = def
	}
}

// setInt64 sets *n to def when key is absent.
func setInt64(ix *index, key string, n *int64, def int64) {
	if !ix.has(key) {
		*n = def
	}
}

// setDur sets *d to def when key is absent.
func setDur(ix *index, key string, d *Duration, def string) {
	if !ix.has(key) {
		if err := d.UnmarshalText([]byte(def)); err != nil {
			panic(err) // a bad literal above is a bug in this file
		}
	}
}
