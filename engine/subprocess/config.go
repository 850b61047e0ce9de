package subprocess

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"meshd/engine"
	"meshd/engine/recipe"
	"meshd/wire"
)

// DefaultRunner is the runner looked for when Config.Runner is empty.
const DefaultRunner = "mesh-gguf"

// Config describes one local engine. Zero durations take the defaults
// documented on each field.
type Config struct {
	// Name is the backend name sealed into receipts; default "gguf".
	Name string
	// Runner is the runner executable: a path (anything containing a
	// separator), or a bare name looked up next to the running executable
	// and then on PATH. Default DefaultRunner.
	Runner string
	// Model is the GGUF model file.
	Model string
	// DraftModel is an optional draft model for speculative decoding; its
	// vocabulary must match Model's.
	DraftModel string
	// DraftMax is the draft length; 0 leaves the runner's default.
	DraftMax int
	// DraftMin is the fewest drafted tokens worth verifying (a shorter
	// draft is dropped); 0 leaves the runner's default.
	DraftMin int
	// CacheTypeK and CacheTypeV are the KV cache storage types of keys and
	// values (the runner's --cache-type-k and --cache-type-v, one of
	// recipe.KVTypes), set together or not at all: the recipe names both
	// (its kv part), since a quantised cache changes the outputs. Empty
	// leaves the runner's default, which the recipe then does not name.
	CacheTypeK, CacheTypeV string
	// Adapters are LoRA adapters, applied in order.
	Adapters []recipe.FileAdapter
	// ContextSize (-c) and Threads (-t); 0 leaves the runner's default.
	ContextSize int
	// MaxTokens caps a serve's max_tokens below the context the child
	// runs with (TokenCap); 0 leaves the context as the cap.
	MaxTokens uint32
	Threads   int
	// Embedding runs the model as an embedding engine (--embedding): Embed
	// works, and completions are not what it is for.
	Embedding bool
	// NoWarmup passes --no-warmup. Off by default: warm-up keeps one-time
	// setup out of the first metered serve.
	NoWarmup bool
	// ExtraArgs are appended to the runner's command line verbatim. They
	// must not set the KV cache type (CacheTypeK/V do, so that the recipe
	// names it).
	ExtraArgs []string
	// Env entries (KEY=value) are added to the runner's environment; they
	// must not set llama-server's LLAMA_ARG_CACHE_TYPE_K/V either.
	Env []string

	// Fidelity and UJPerToken are what the backend advertises to the router.
	Fidelity   wire.Fidelity
	UJPerToken uint64
	// Temperature 0 is greedy decoding; Seed fixes sampling otherwise
	// (llama-server reads 4294967295 as "random").
	Temperature float64
	Seed        uint32

	// HealthTimeout bounds the wait for /health 200 after a start; default
	// 10 minutes, since large models load slowly.
	HealthTimeout time.Duration
	// HealthInterval is the /health polling period; default 100ms.
	HealthInterval time.Duration
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL;
	// default 10s.
	StopGrace time.Duration
	// RestartBackoff is the first delay before restarting a crashed child;
	// default 500ms. It doubles per consecutive failure up to
	// MaxRestartBackoff (default 1 minute) and resets once a child has
	// been healthy for HealthyReset (default 1 minute).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	HealthyReset      time.Duration
	// CrashWait is how long a failed serve waits to see whether the child
	// died, to tell a crash from a network error; default 2s.
	CrashWait time.Duration

	// Recipes caches model content ids; nil uses a private cache. Share
	// one between engines that load the same files.
	Recipes *recipe.Cache
	// Log receives lifecycle events (started, healthy, a crash, a restart,
	// stopped: INFO, WARN for what went wrong) with pid, port and the like
	// as fields, and each line the runner prints at DEBUG ("engine
	// output"). nil discards them.
	Log *slog.Logger
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Name == "" {
		c.Name = "gguf"
	}
	if c.Runner == "" {
		c.Runner = DefaultRunner
	}
	def(&c.HealthTimeout, 10*time.Minute)
	def(&c.HealthInterval, 100*time.Millisecond)
	def(&c.StopGrace, 10*time.Second)
	def(&c.RestartBackoff, 500*time.Millisecond)
	def(&c.MaxRestartBackoff, time.Minute)
	def(&c.HealthyReset, time.Minute)
	def(&c.CrashWait, 2*time.Second)
	if c.Recipes == nil {
		c.Recipes = recipe.NewCache()
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model path is empty"))
	}
	if !c.Fidelity.Valid() {
		errs = append(errs, fmt.Errorf("fidelity %d is outside F0..F4", c.Fidelity))
	}
	if c.UJPerToken == 0 {
		errs = append(errs, errors.New("uj_per_token is zero (the router would treat the engine as free)"))
	}
	if c.DraftMax < 0 || c.DraftMin < 0 || c.ContextSize < 0 || c.Threads < 0 {
		errs = append(errs, errors.New("draft_max, draft_min, context_size and threads must not be negative"))
	}
	if c.MaxTokens > engine.MaxEngineTokens {
		errs = append(errs, fmt.Errorf("max_tokens %d is over %d, the largest n_predict the runner reads", c.MaxTokens, engine.MaxEngineTokens))
	}
	if (c.DraftMax > 0 || c.DraftMin > 0) && c.DraftModel == "" {
		errs = append(errs, errors.New("draft_max or draft_min is set but no draft model is"))
	}
	if c.DraftMax > 0 && c.DraftMin > c.DraftMax {
		errs = append(errs, fmt.Errorf("draft_min %d exceeds draft_max %d", c.DraftMin, c.DraftMax))
	}
	if c.Temperature < 0 {
		errs = append(errs, fmt.Errorf("temperature %v is negative", c.Temperature))
	}
	for _, d := range []time.Duration{c.HealthTimeout, c.HealthInterval, c.StopGrace,
		c.RestartBackoff, c.MaxRestartBackoff, c.HealthyReset, c.CrashWait} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("duration %v is negative", d))
		}
	}
	if c.MaxRestartBackoff < c.RestartBackoff {
		errs = append(errs, fmt.Errorf("max_restart_backoff %v is below restart_backoff %v", c.MaxRestartBackoff, c.RestartBackoff))
	}
	for i, a := range c.Adapters {
		if a.Path == "" || a.Scale == 0 {
			errs = append(errs, fmt.Errorf("adapter %d: needs a path and a non-zero scale (1 is full strength)", i))
		}
	}
	if (c.CacheTypeK == "") != (c.CacheTypeV == "") {
		errs = append(errs, fmt.Errorf("cache types: key %q and value %q must be set together (the recipe names both)", c.CacheTypeK, c.CacheTypeV))
	} else if err := (recipe.KVCache{K: c.CacheTypeK, V: c.CacheTypeV}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if i, ok := recipe.CacheTypeArg(c.ExtraArgs); ok {
		errs = append(errs, fmt.Errorf("extra args[%d] %q sets the KV cache type, which the recipe would not name: use the cache type settings", i, c.ExtraArgs[i]))
	}
	for _, e := range c.Env {
		if !strings.Contains(e, "=") {
			errs = append(errs, fmt.Errorf("env entry %q is not KEY=value", e))
		}
		if k, _, _ := strings.Cut(e, "="); slices.Contains(cacheTypeEnv, k) {
			errs = append(errs, fmt.Errorf("env entry %q sets the KV cache type, which the recipe would not name: use the cache type settings", e))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("engine config: %w", err)
	}
	return nil
}

// cacheTypeEnv are the variables llama-server reads as --cache-type-k and
// --cache-type-v. They are refused in Config.Env and removed from the
// environment the child inherits, so the cache type the child runs with is
// the one the recipe names.
var cacheTypeEnv = []string{"LLAMA_ARG_CACHE_TYPE_K", "LLAMA_ARG_CACHE_TYPE_V"}

// childEnviron is this process's environment less cacheTypeEnv, plus env.
func childEnviron(env []string) []string {
	out := slices.DeleteFunc(os.Environ(), func(e string) bool {
		k, _, _ := strings.Cut(e, "=")
		return slices.Contains(cacheTypeEnv, k)
	})
	return append(out, env...)
}

// locateRunner resolves Config.Runner to an executable path.
func locateRunner(name string) (string, error) {
	if strings.ContainsRune(name, filepath.Separator) {
		return checkExecutable(name)
	}
	if self, err := os.Executable(); err == nil {
		if p, err := checkExecutable(filepath.Join(filepath.Dir(self), name)); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("runner %q: not next to this executable nor on PATH: %w", name, err)
	}
	return filepath.Abs(p)
}

func checkExecutable(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("runner %s: %w", p, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("runner %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("runner %s: not an executable file", p)
	}
	return abs, nil
}
