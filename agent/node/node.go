// Package node assembles one meshd from its configuration: the steward key,
// the receipt log and grant ledger recovered together, the authoriser, the
// meters and their spans, the engines, and the agent over them. The daemon,
// the demo and the end-to-end tests all build their stack here, so what is
// tested is what runs.
package node

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"meshd/agent"
	"meshd/agent/config"
	"meshd/agent/fleet"
	"meshd/auth"
	"meshd/drivers"
	"meshd/engine"
	"meshd/engine/remote"
	"meshd/engine/subprocess"
	"meshd/shunt"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

// Options are what a caller may change about how a node is assembled.
type Options struct {
	// Logger receives the node's structured log; nil discards.
	Logger *slog.Logger
	// OpenSensor opens a configured meter's sensor; nil uses the real
	// drivers (OpenSensor). Tests pass simulated buses here, so the stack
	// under test is the production one down to the registers.
	OpenSensor func(ctx context.Context, m config.Meter) (drivers.Sensor, error)
	// MeterConfig is passed to every sampler (clock and timer hooks for
	// tests); its Logger is set from Logger when nil.
	MeterConfig shunt.MeterConfig
	// Observe is told of every serve's end, after the node's own metrics.
	Observe func(agent.Event)
	// Metrics receives the node's measurements; nil makes none.
	Metrics Metrics
	// Clock is the agent's and the authoriser's clock; nil is time.Now.
	Clock func() time.Time
	// WrapMeter, if set, wraps each backend's meter as the agent sees it
	// (tests step simulated sensors around each window with it).
	WrapMeter func(agent.Meter) agent.Meter
}

// Metrics is what the node reports to a monitoring system. The HTTP API's
// Prometheus collector implements it; the node never imports it.
type Metrics interface {
	Served(agent.Event)
	Synced(time.Duration)
}

// Node is an assembled meshd.
type Node struct {
	opts    Options
	log     *slog.Logger
	cfg     *config.Config
	Key     *steward.Key
	Stores  *grant.Stores
	Steward *steward.Steward
	Agent   *agent.Agent

	mu       sync.Mutex // guards what Reload replaces
	meters   map[string]*Meter
	backends []*Backend
	grants   *grant.Authoriser
	corpora  []*Corpus

	lastMu sync.Mutex
	last   map[*shunt.Span]Window // the newest sealed window of each span

	// publisher sends the receipts to the fleet, nil when none is
	// configured; it runs until Close.
	publisher *fleet.Publisher
	stopBG    context.CancelFunc
	bgDone    chan struct{}
	// budget keeps the receipt log within its disk budget (budget.go).
	budget     *steward.Budget
	budgetWake chan struct{}
	stopBudget context.CancelFunc
	budgetDone chan struct{}
	// stopRuns ends the loop that closes abandoned runs.
	stopRuns context.CancelFunc
	runsDone chan struct{}
	// The corpus sync loop (corpus.go): stopped by Close, kicked by Reload;
	// corpusMoved are told of each pin it moves.
	stopSync    context.CancelFunc
	syncDone    chan struct{}
	syncKick    chan struct{}
	corpusMoved []func()
	// pinMu orders the sealing of corpus pins (a sync and a reload may
	// move the same corpus at once): each names the last before it.
	pinMu sync.Mutex
	// stateLock is the flock on the state directory, held until Close.
	stateLock *steward.DirLock

	// witness is the rollback witness's TPM connection, nil without one.
	witness interface{ Close() error }
}

// Publisher is the fleet publisher, nil when [fleet] is not configured.
func (n *Node) Publisher() *fleet.Publisher { return n.publisher }

// Window is a span's newest sealed window, as its receipt states it.
type Window struct {
	Sequence   uint64
	Backend    string
	Provenance string
	ChargedUJ  uint64
	ErrorUJ    *uint64
	WindowNs   uint64
	ServeNs    *uint64
}

// LastWindow is the newest sealed window among the spans m belongs to.
func (n *Node) LastWindow(m *Meter) (Window, bool) {
	n.lastMu.Lock()
	defer n.lastMu.Unlock()
	var best Window
	found := false
	for sp, w := range n.last {
		for _, mem := range sp.Meters() {
			if mem == shunt.Member(m.Meter) && (!found || w.Sequence > best.Sequence) {
				best, found = w, true
			}
		}
	}
	return best, found
}

// Breakdown is m's reading over the newest closed window of a span in
// which it is inside another member: energy that member's figure already
// contains, for display beside it. False when m is no span's breakdown or
// no such window closed yet.
func (n *Node) Breakdown(m *Meter) (shunt.Breakdown, bool) {
	n.lastMu.Lock()
	spans := make([]*shunt.Span, 0, len(n.last))
	for sp := range n.last {
		spans = append(spans, sp)
	}
	n.lastMu.Unlock()
	for _, sp := range spans {
		for _, b := range sp.Breakdown() {
			if b.Meter == m.Meter.Name() {
				return b, true
			}
		}
	}
	return shunt.Breakdown{}, false
}

// Meter is one configured meter, sampling.
type Meter struct {
	Config config.Meter
	Meter  *shunt.Meter
}

// Backend is one configured backend with its engine and the span that
// meters it.
type Backend struct {
	Config config.Backend
	Engine engine.Backend
	// Span is nil for a backend without meters (Estimator figures).
	Span *shunt.Span
	sub  *subprocess.Engine
}

// State says whether the backend's engine can serve now: "ready",
// "restarting: <why>" while a crashed engine is being restarted,
// "unhealthy: <why>" while a remote node is passed over.
func (b *Backend) State() string {
	if h, ok := b.Engine.(engine.HealthReporter); ok {
		if err := h.Health(); err != nil {
			return "unhealthy: " + err.Error()
		}
	}
	if b.sub == nil {
		return "ready"
	}
	if b.sub.PID() != 0 {
		return "ready"
	}
	if err := b.sub.LastError(); err != nil {
		return "restarting: " + err.Error()
	}
	return "starting"
}

// Restarts counts the engine restarts after crashes.
func (b *Backend) Restarts() int {
	if b.sub == nil {
		return 0
	}
	return b.sub.Restarts()
}

// Open assembles the node described by cfg. It returns once the node can
// serve: the log is open and verified, the ledger recovered from it, every
// engine healthy and every meter delivering. On error everything opened
// is closed again.
func Open(ctx context.Context, cfg *config.Config, opts Options) (_ *Node, err error) {
	n := &Node{opts: opts, log: opts.Logger, cfg: cfg, meters: map[string]*Meter{}, budgetWake: make(chan struct{}, 1)}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.opts.OpenSensor == nil {
		n.opts.OpenSensor = func(ctx context.Context, m config.Meter) (drivers.Sensor, error) {
			return OpenSensor(ctx, m, nil)
		}
	}
	if n.opts.MeterConfig.Logger == nil {
		n.opts.MeterConfig.Logger = n.log
	}
	defer func() {
		if err != nil {
			n.Close(context.WithoutCancel(ctx))
		}
	}()
	if n.stateLock, err = openState(cfg.Steward.StateDir); err != nil {
		return nil, err
	}
	if n.Key, err = loadOrCreateKey(cfg.KeyPath(), cfg.ReceiptsDir(), n.log); err != nil {
		return nil, err
	}
	// After the key is loaded (it refuses a key others may read, which
	// this would hide): whoever made the directory and under whatever
	// umask, what is in it becomes private.
	if err := steward.MakePrivate(cfg.Steward.StateDir); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	lopt := steward.LogOptions{CheckpointEvery: int(cfg.Steward.CheckpointEvery), SegmentBytes: cfg.Steward.SegmentBytes}
	if opts.Metrics != nil {
		lopt.OnSync = opts.Metrics.Synced
	}
	if lopt.Witness, err = n.openWitness(ctx, cfg); err != nil {
		return nil, err
	}
	n.Stores, err = grant.OpenStores(ctx, cfg.ReceiptsDir(), cfg.LedgerDir(), n.Key, lopt, ledger.Options{Clock: opts.Clock})
	if err != nil {
		return nil, err
	}
	if err := n.checkRollback(ctx, cfg); err != nil {
		return nil, err
	}
	sc, rec := n.Stores.Scan, n.Stores.Recovery
	if sc.TornBytes > 0 {
		n.log.Warn("receipt log: cut a torn final frame", "bytes", sc.TornBytes, "dir", cfg.ReceiptsDir())
	}
	n.log.Info("receipt log open", "dir", cfg.ReceiptsDir(), "receipts", sc.Records, "head", sc.Head.String(), "steward", n.Key.ID())
	n.log.Info("grant ledger recovered", ledgerRecoveryAttrs(cfg.LedgerDir(), rec)...)
	n.Steward = steward.New(n.Key, n.Stores.Log, steward.Options{Clock: opts.Clock, Admit: n.Storage})

	routes, err := n.build(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	ag, err := agent.New(agent.Config{
		Steward:      n.Steward,
		Clock:        opts.Clock,
		RequireGrant: cfg.Grants.Policy == "required",
		RequireMeter: cfg.Metering.OnMeterFailure == "refuse" && (routes.Meter != nil || len(routes.Meters) > 0),
		Logger:       n.log,
		Observe:      n.observe,
		Backends:     routes.Backends,
		Pinned:       routes.Pinned,
		Meters:       routes.Meters,
		Grants:       routes.Grants,
		MaxCeilingUJ: routes.MaxCeilingUJ,
		RunTimeout:   time.Duration(cfg.Metering.RunTimeout),
	})
	if err != nil {
		return nil, err
	}
	n.Agent = ag
	n.startRunReaper(ctx)
	n.startCorpusSync(ctx)
	if f := cfg.Fleet; f.URL != "" {
		pcfg := fleet.PublisherConfig{
			ConnOptions: fleet.ConnOptions{URL: f.URL, Creds: f.Creds, NKeySeedFile: f.NKeySeedFile, User: f.User, Password: f.Password,
				CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile, Name: "meshd " + n.Key.ID()},
			Stream: f.Stream, CursorPath: f.Cursor, Duplicates: time.Duration(f.Duplicates), NoStreamSetup: f.NoStreamSetup,
			Batch: f.Batch, CheckpointEvery: f.CheckpointEvery, Logger: n.log.With("component", "fleet"),
		}
		if err := pcfg.Validate(); err != nil {
			return nil, err
		}
		n.publisher = fleet.NewPublisher(n.Stores.Log, n.Key.ID(), pcfg)
		bg, stop := context.WithCancel(context.WithoutCancel(ctx))
		n.stopBG, n.bgDone = stop, make(chan struct{})
		go func() {
			defer close(n.bgDone)
			if err := n.publisher.Run(bg); err != nil {
				n.log.Error("fleet publisher stopped", "err", err)
			}
		}()
	}
	if err := n.openBudget(ctx, cfg); err != nil {
		return nil, err
	}
	return n, nil
}

func (n *Node) observe(ev agent.Event) {
	if ev.Err != nil {
		lvl := slog.LevelInfo
		if ev.Reason == "engine" || ev.Reason == "seal" || ev.Reason == "unmetered" {
			lvl = slog.LevelWarn
		}
		n.log.Log(context.Background(), lvl, "serve refused or failed", "reason", ev.Reason, "backend", ev.Backend, "err", ev.Err)
	} else if ev.Degraded {
		n.log.Warn("serve sealed as Estimator although its backend is metered", "backend", ev.Backend, "seq", ev.Sealed.Receipt.Sequence)
	}
	if ev.Sealed != nil {
		n.noteWindow(ev)
		if n.publisher != nil {
			n.publisher.Notify()
		}
		n.wakeBudget()
	}
	if n.opts.Metrics != nil {
		n.opts.Metrics.Served(ev)
	}
	if n.opts.Observe != nil {
		n.opts.Observe(ev)
	}
}

func (n *Node) noteWindow(ev agent.Event) {
	var sp *shunt.Span
	for _, b := range n.Backends() {
		if b.Config.Name == ev.Backend {
			sp = b.Span
		}
	}
	if sp == nil {
		return
	}
	r := ev.Sealed.Receipt
	w := Window{Sequence: r.Sequence, Backend: r.Backend, Provenance: r.EnergyProvenance, ErrorUJ: r.ErrorUJ, ServeNs: r.ServeNs}
	if r.WindowNs != nil {
		w.WindowNs = *r.WindowNs
	}
	if e, err := r.Energy(); err == nil {
		w.ChargedUJ = e.UJ()
	}
	n.lastMu.Lock()
	defer n.lastMu.Unlock()
	if n.last == nil {
		n.last = map[*shunt.Span]Window{}
	}
	if old, ok := n.last[sp]; !ok || w.Sequence > old.Sequence {
		n.last[sp] = w
	}
}

// Config is the configuration the node runs now.
func (n *Node) Config() *config.Config {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cfg
}

// Backends are the configured backends, in configuration order.
func (n *Node) Backends() []*Backend {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.backends)
}

// Meters are the configured meters, sorted by name.
func (n *Node) Meters() []*Meter {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Meter, 0, len(n.meters))
	for _, m := range n.meters {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Config.Name < out[j].Config.Name })
	return out
}

// Grants is the grant authoriser, nil when no issuer is trusted.
func (n *Node) Grants() *grant.Authoriser {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grants
}

// build opens what cfg adds to the node: meters and engines not already
// running with the same configuration (kept from old), and the
// authoriser. It returns the agent's routing table. On error whatever it
// opened is closed; what it kept is untouched.
func (n *Node) build(ctx context.Context, cfg *config.Config, old *Node) (agent.Routes, error) {
	keys, err := cfg.Grants.Keys()
	if err != nil {
		return agent.Routes{}, fmt.Errorf("trusted issuers: %w", err)
	}
	var auth *grant.Authoriser
	if len(keys) > 0 {
		auth, err = grant.NewAuthoriser(grant.Config{Steward: n.Key.Public(), Trusted: keys, Ledger: n.Stores.Ledger, Clock: n.opts.Clock})
		if err != nil {
			return agent.Routes{}, err
		}
	}
	if err := checkSpans(cfg); err != nil {
		return agent.Routes{}, err
	}
	meters := map[string]*Meter{}
	var backends []*Backend
	var opened []*Meter
	var started []*Backend
	fail := func(err error) (agent.Routes, error) {
		for _, b := range started {
			b.stop(context.WithoutCancel(ctx))
		}
		for _, m := range opened {
			m.Meter.Close()
		}
		return agent.Routes{}, err
	}
	for _, mc := range cfg.Meters {
		if old != nil {
			if m, ok := old.meters[mc.Name]; ok && reflect.DeepEqual(m.Config, mc) {
				meters[mc.Name] = m
				continue
			}
		}
		m, err := n.openMeter(ctx, mc, cfg.Metering.ReadyTimeout)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, m)
		meters[mc.Name] = m
	}
	spans := map[string]*shunt.Span{}
	policy := shunt.Exclusive
	if cfg.Metering.Shared {
		policy = shunt.Shared
	}
	routes := agent.Routes{Meters: map[string]agent.Meter{}, MaxCeilingUJ: cfg.Limits.MaxJouleCeilingUJ}
	// spanFor is the one span over exactly these meters, shared by every
	// backend and corpus that lists them.
	spanFor := func(names []string) (*shunt.Span, agent.Meter, error) {
		key := strings.Join(names, "+")
		sp := spans[key]
		if sp == nil {
			var members []shunt.Member
			for _, name := range names {
				members = append(members, meters[name].Meter)
			}
			rel, err := cfg.SpanInside(names)
			if err != nil {
				return nil, nil, fmt.Errorf("span %s: %w", key, err)
			}
			// The span knows its members by their sensors' names.
			inside := map[string]string{}
			for in, out := range rel {
				inside[meters[in].Meter.Name()] = meters[out].Meter.Name()
			}
			if sp, err = shunt.NewSpan(members, shunt.SpanConfig{Policy: policy, Now: n.opts.MeterConfig.Now, Inside: inside,
				Logger: n.log.With("span", key)}); err != nil {
				return nil, nil, fmt.Errorf("span %s: %w", key, err)
			}
			spans[key] = sp
		}
		am := agent.FromSpan(sp)
		if n.opts.WrapMeter != nil {
			am = n.opts.WrapMeter(am)
		}
		return sp, am, nil
	}
	for _, bc := range cfg.Backends {
		var b *Backend
		if old != nil {
			for _, ob := range old.backends {
				if ob.Config.Name == bc.Name && sameBackend(ob.Config, bc) {
					b = &Backend{Config: bc, Engine: ob.Engine, sub: ob.sub}
				}
			}
		}
		if b == nil {
			if b, err = n.startBackend(ctx, bc); err != nil {
				return fail(fmt.Errorf("backend %q: %w", bc.Name, err))
			}
			started = append(started, b)
		}
		if len(bc.Meters) > 0 {
			sp, am, err := spanFor(bc.Meters)
			if err != nil {
				return fail(fmt.Errorf("backend %q: %w", bc.Name, err))
			}
			b.Span = sp
			routes.Meters[bc.Name] = am
		}
		backends = append(backends, b)
		routes.Backends = append(routes.Backends, b.Engine)
	}
	var corpora []*Corpus
	var startedCorpora []*Corpus
	for _, cc := range cfg.Corpora {
		var c *Corpus
		if old != nil {
			for _, oc := range old.corpora {
				if sameCorpus(oc.Config, cc) {
					c = &Corpus{Config: cc, Provider: oc.Provider, sub: oc.sub}
				}
			}
		}
		if c == nil {
			var err error
			if c, err = n.startCorpus(ctx, cfg.Steward.StateDir, cc, old); err != nil {
				for _, sc := range startedCorpora {
					sc.stop(context.WithoutCancel(ctx))
				}
				return fail(fmt.Errorf("corpus %s/%s: %w", cc.Org, cc.Name, err))
			}
			startedCorpora = append(startedCorpora, c)
		}
		if len(cc.Meters) > 0 {
			sp, am, err := spanFor(cc.Meters)
			if err != nil {
				return fail(fmt.Errorf("corpus %s/%s: %w", cc.Org, cc.Name, err))
			}
			c.Span = sp
			routes.Meters[c.Provider.BackendName()] = am
		}
		corpora = append(corpora, c)
		routes.Pinned = append(routes.Pinned, c.Provider.Backend())
	}
	if auth != nil {
		routes.Grants = auth
	}
	n.meters, n.backends, n.grants, n.corpora = meters, backends, auth, corpora
	return routes, nil
}

// checkSpans refuses backends whose spans overlap without being equal: two
// spans sharing a meter would each charge the whole of its energy to
// their own serves, counting it twice. Within a span, every two meters
// must be declared related (config.SpanInside): one inside the other, or
// disjoint.
func checkSpans(cfg *config.Config) error {
	owner := map[string]string{} // meter -> span key
	type user struct {
		what   string
		meters []string
	}
	var users []user
	for _, b := range cfg.Backends {
		users = append(users, user{fmt.Sprintf("backend %q", b.Name), b.Meters})
	}
	for _, c := range cfg.Corpora {
		users = append(users, user{fmt.Sprintf("corpus %s/%s", c.Org, c.Name), c.Meters})
	}
	for _, u := range users {
		if len(u.meters) == 0 {
			continue
		}
		if _, err := cfg.SpanInside(u.meters); err != nil {
			return fmt.Errorf("%s: %w", u.what, err)
		}
		key := strings.Join(u.meters, "+")
		for _, m := range u.meters {
			if k, ok := owner[m]; ok && k != key {
				return fmt.Errorf("%s: meter %q is also in the span %s of another backend; backends that share a meter must list the same meters in the same order, so that they share one span", u.what, m, k)
			}
			owner[m] = key
		}
	}
	return nil
}

// sameBackend says whether b can keep a's engine: every field but the
// meters, which choose the span, not the engine. Compared whole, so a
// field added to the config is never missed here.
func sameBackend(a, b config.Backend) bool {
	a.Meters, b.Meters = nil, nil
	return reflect.DeepEqual(a, b)
}

func (n *Node) openMeter(ctx context.Context, mc config.Meter, ready config.Duration) (*Meter, error) {
	s, err := n.opts.OpenSensor(ctx, mc)
	if err != nil {
		return nil, fmt.Errorf("meter %q (%s): %w", mc.Name, mc.Driver, err)
	}
	mcfg := n.opts.MeterConfig
	mcfg.Logger = mcfg.Logger.With("meter", mc.Name)
	// The sampler lives until Close, not as long as the context that
	// opened it: a caller bounding the open must not stop the meter.
	m, err := shunt.New(context.WithoutCancel(ctx), s, mcfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("meter %q: %w", mc.Name, err)
	}
	// Serve nothing until the meter can measure a window: a sensor that
	// never delivers is a fault to report at start, not a reason to seal
	// Estimator receipts in silence.
	wait := time.Duration(ready)
	if wait <= 0 {
		wait = max(2*time.Second, 4*m.Info().MaxPeriod)
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := m.Ready(rctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("meter %q delivered no reading within %v: %w", mc.Name, wait, err)
	}
	n.log.Info("meter delivering", "meter", mc.Name, "driver", mc.Driver, "kind", m.Info().Kind.String(), "period", m.Info().Period)
	return &Meter{Config: mc, Meter: m}, nil
}

func (n *Node) startBackend(ctx context.Context, bc config.Backend) (*Backend, error) {
	switch bc.Kind {
	case "reference":
		e, err := engine.NewReference(engine.ReferenceConfig{Name: bc.Name, Fidelity: wire.Fidelity(bc.Fidelity), UJPerToken: bc.UJPerToken, Work: bc.Work,
			MaxTokens: uint32(bc.MaxTokens), Embedding: bc.Embedding})
		if err != nil {
			return nil, err
		}
		return &Backend{Config: bc, Engine: e}, nil
	case "mesh-gguf", "llama-server":
		runner := bc.Runner
		if runner == "" {
			runner = subprocess.DefaultRunner
			if bc.Kind == "llama-server" {
				runner = "llama-server"
			}
		}
		e, err := subprocess.New(ctx, subprocess.Config{
			Name: bc.Name, Runner: runner, Model: bc.Model, DraftModel: bc.DraftModel, DraftMax: bc.DraftMax, DraftMin: bc.DraftMin,
			CacheTypeK: bc.CacheTypeK, CacheTypeV: bc.CacheTypeV,
			ContextSize: bc.Context, Threads: bc.Threads, ExtraArgs: bc.ExtraArgs,
			Fidelity: wire.Fidelity(bc.Fidelity), UJPerToken: bc.UJPerToken,
			Temperature: bc.Temperature, Seed: bc.Seed, MaxTokens: uint32(bc.MaxTokens), Embedding: bc.Embedding,
			// The engine logs its lifecycle at INFO (WARN for a crash or a
			// restart) and the runner's own output at DEBUG.
			Log: n.log.With("backend", bc.Name),
		})
		if err != nil {
			return nil, err
		}
		if err := e.Start(ctx); err != nil {
			return nil, fmt.Errorf("start engine: %w", err)
		}
		return &Backend{Config: bc, Engine: e, sub: e}, nil
	case "meshd":
		key, err := hex.DecodeString(bc.Steward)
		if err != nil {
			return nil, fmt.Errorf("steward key: %w", err)
		}
		var tc *tls.Config
		if f := bc.RemoteFiles(); !f.Empty() {
			if tc, err = auth.ClientTLS(f); err != nil {
				return nil, fmt.Errorf("backend %s: %w", bc.Name, err)
			}
		}
		e, err := remote.New(remote.Config{Name: bc.Name, URL: bc.URL, Steward: key, Fidelity: wire.Fidelity(bc.Fidelity),
			UJPerToken: bc.UJPerToken, Timeout: time.Duration(bc.Timeout), MaxTokens: uint32(bc.MaxTokens), TokenFile: bc.TokenFile, TLS: tc})
		if err != nil {
			return nil, err
		}
		return &Backend{Config: bc, Engine: e}, nil
	}
	return nil, fmt.Errorf("unknown backend kind %q", bc.Kind)
}

func (b *Backend) stop(ctx context.Context) error {
	if b.sub == nil {
		return nil
	}
	return b.sub.Stop(ctx)
}

// Reload applies cfg without dropping the log: the trusted issuers are
// reread, backends and meters whose configuration changed are restarted,
// new ones started, removed ones stopped once the agent no longer routes
// to them. What a reload cannot change (the steward, the state directory,
// the listeners, the grant and metering policies) is kept, with a warning.
// On error the node keeps running as it was.
func (n *Node) Reload(ctx context.Context, cfg *config.Config) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cfg.Steward != n.cfg.Steward || cfg.Grants.Policy != n.cfg.Grants.Policy || cfg.Metering.OnMeterFailure != n.cfg.Metering.OnMeterFailure {
		n.log.Warn("reload: the steward, state directory, grant policy and metering policy change only on restart; kept as they were")
	}
	prev := &Node{meters: n.meters, backends: n.backends, grants: n.grants, corpora: n.corpora}
	routes, err := n.build(ctx, cfg, prev)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if err := n.Agent.Reconfigure(routes); err != nil {
		// The new table was refused: close what build opened, keep the old.
		n.closeUnshared(ctx, &Node{meters: n.meters, backends: n.backends, corpora: n.corpora}, prev)
		n.meters, n.backends, n.grants, n.corpora = prev.meters, prev.backends, prev.grants, prev.corpora
		return fmt.Errorf("reload: %w", err)
	}
	n.closeUnshared(ctx, prev, n)
	kept := *cfg
	kept.Steward, kept.Listen = n.cfg.Steward, n.cfg.Listen
	kept.Grants.Policy, kept.Metering.OnMeterFailure = n.cfg.Grants.Policy, n.cfg.Metering.OnMeterFailure
	n.cfg = &kept
	n.log.Info("reloaded", "backends", len(n.backends), "meters", len(n.meters), "trusted_issuers", n.grants != nil)
	n.kickCorpusSync()
	return nil
}

// closeUnshared stops the engines and meters of from that to does not use.
func (n *Node) closeUnshared(ctx context.Context, from, to *Node) {
	for _, c := range from.corpora {
		if c.sub != nil && !slices.ContainsFunc(to.corpora, func(o *Corpus) bool { return o.sub == c.sub }) {
			if err := c.stop(ctx); err != nil {
				n.log.Warn("stopping embedding engine", "corpus", c.Config.Org+"/"+c.Config.Name, "err", err)
			}
		}
	}
	for _, b := range from.backends {
		if b.sub == nil {
			continue
		}
		if !slices.ContainsFunc(to.backends, func(o *Backend) bool { return o.sub == b.sub }) {
			if err := b.stop(ctx); err != nil {
				n.log.Warn("stopping engine", "backend", b.Config.Name, "err", err)
			}
		}
	}
	for name, m := range from.meters {
		if o, ok := to.meters[name]; !ok || o != m {
			m.Meter.Close()
		}
	}
}

// Storage is the one check that refuses serves for storage: whether the
// receipt log and the grant ledger take writes, trying to heal each that
// the storage refused (a full disk, an I/O error), and whether the log is
// within its disk budget. The error names the cause and wraps
// steward.ErrStorage. It is a readiness matter, not a liveness one: the
// node heals by itself once writes succeed again (or segments can be
// archived), which a restart would not hasten. /readyz reports it.
func (n *Node) Storage() error {
	if n.Stores == nil {
		return n.budgetAdmit()
	}
	return errors.Join(n.Stores.Log.Storage(), n.Stores.Ledger.Storage(), n.budgetAdmit())
}

// Alive reports whether the node can still serve: every meter's sampler
// is running. The watchdog is fed only while it returns nil. A storage
// failure is not one (see Storage).
func (n *Node) Alive() error {
	for _, m := range n.Meters() {
		if !m.Meter.Running() {
			return fmt.Errorf("meter %q: sampler stopped", m.Config.Name)
		}
	}
	return nil
}

// Close stops the engines and meters, then makes the ledger and the log
// durable and closes them. It is safe on a partly opened node.
func (n *Node) Close(ctx context.Context) error {
	var errs []error
	if n.stopRuns != nil {
		n.stopRuns()
		<-n.runsDone
	}
	if n.Agent != nil && n.Stores != nil {
		// A run still open when the daemon stops is closed as incomplete
		// while the log still takes records, so the chain says so.
		if _, err := n.Agent.CloseRuns(ctx, "abandoned: the daemon shut down"); err != nil {
			errs = append(errs, err)
		}
	}
	n.closeBudget()
	if n.stopSync != nil {
		n.stopSync()
		<-n.syncDone
	}
	if n.stopBG != nil {
		// The publisher stops before the log closes; what it has not
		// sent stays in the log, and its cursor says where to resume.
		n.stopBG()
		<-n.bgDone
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, b := range n.backends {
		if err := b.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("backend %q: %w", b.Config.Name, err))
		}
	}
	for _, c := range n.corpora {
		if err := c.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("corpus %s/%s: %w", c.Config.Org, c.Config.Name, err))
		}
	}
	for _, m := range n.meters {
		m.Meter.Close()
	}
	n.backends, n.meters, n.corpora = nil, map[string]*Meter{}, nil
	if n.Stores != nil {
		if err := n.Stores.Close(); err != nil {
			errs = append(errs, err)
		}
		n.Stores = nil
	}
	if n.witness != nil {
		if err := n.witness.Close(); err != nil {
			errs = append(errs, err)
		}
		n.witness = nil
	}
	if n.stateLock != nil {
		if err := n.stateLock.Release(); err != nil {
			errs = append(errs, err)
		}
		n.stateLock = nil
	}
	return errors.Join(errs...)
}

// Trusted is the public key of the node's steward, for verifying its log.
func (n *Node) Trusted() ed25519.PublicKey { return n.Key.Public() }

// startRunReaper closes abandoned runs (PROFILE §22) until Close: it looks
// every quarter of the run timeout (at most every 15 s), and the agent
// judges by its own clock, so a test with a simulated clock calls
// Agent.CloseAbandoned itself.
func (n *Node) startRunReaper(ctx context.Context) {
	every := min(n.Agent.RunTimeout()/4, 15*time.Second)
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	n.stopRuns, n.runsDone = stop, make(chan struct{})
	go func() {
		defer close(n.runsDone)
		t := time.NewTicker(max(every, time.Second))
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				recs, err := n.Agent.CloseAbandoned(bg)
				for _, r := range recs {
					n.log.Warn("closed an abandoned run", "run", *r.Sealed.Receipt.Run, "sequence", r.Sealed.Receipt.Sequence)
				}
				if err != nil && bg.Err() == nil {
					n.log.Error("closing abandoned runs", "err", err)
				}
			}
		}
	}()
}

// ledgerRecoveryAttrs are the fields of the ledger's recovery line: each
// count by name (a struct dump is neither greppable nor parseable by a log
// pipeline), the snapshot anchor and a failed compaction only when there
// is one.
func ledgerRecoveryAttrs(path string, rec *ledger.Recovery) []any {
	a := []any{"path", path, "records", rec.Records, "torn_bytes", rec.TornBytes,
		"settled", rec.Settled, "released", rec.Released, "corrected", rec.Corrected, "compacted", rec.Compacted}
	if rec.Anchor != nil {
		a = append(a, "anchor_count", rec.Anchor.Count, "anchor_head", rec.Anchor.Head.String())
	}
	if rec.CompactErr != nil {
		a = append(a, "compact_err", rec.CompactErr)
	}
	return a
}
