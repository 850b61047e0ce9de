package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"meshd/agent"
	"meshd/agent/api"
	"meshd/agent/config"
	"meshd/agent/node"
	"meshd/auth"
	"meshd/systemd"
	"meshd/wire"
)

const defaultConfig = "/etc/meshd/meshd.toml"

// checkConfig is `meshd check-config`: every problem of the file, with its
// line and key, and a non-zero exit when there is one. Unless -offline it
// also looks at this machine as serve would, without starting anything:
// the models' GGUF headers, the runners, the state and key directories,
// the sensors' devices and the files the config names.
func checkConfig(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", defaultConfig, "configuration file")
	offline := fs.Bool("offline", false, "check the file alone, looking at nothing on this machine (models, runners, directories, devices, files): for a config meant for another machine")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	var ec *config.EnvCheck
	if !*offline {
		ec = &config.EnvCheck{Env: config.System{}}
	}
	cfg, err := config.LoadChecked(*path, ec)
	if err != nil {
		return err
	}
	what := ""
	if *offline {
		what = "; offline: nothing on this machine looked at"
	}
	fmt.Fprintf(stdout, "%s: ok (%d backends, %d meters%s)\n", *path, len(cfg.Backends), len(cfg.Meters), what)
	return nil
}

// newLogger makes the daemon's structured log on w. Under systemd
// (JOURNAL_STREAM set) the journal stamps each line, so slog's own time is
// left out.
func newLogger(w io.Writer, c config.Log, getenv func(string) string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	o := &slog.HandlerOptions{Level: lvl}
	if getenv("JOURNAL_STREAM") != "" {
		o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// daemon is one running `meshd serve`.
type daemon struct {
	path     string
	log      *slog.Logger
	notify   *systemd.Notifier
	node     *node.Node
	api      *api.Server
	servers  []*http.Server
	unixPath string
	ready    chan struct{} // closed once READY=1 is sent (tests wait on it)
	addrs    []net.Addr
	// storageDown is whether the storage refused writes at the watchdog's
	// last check (only the watchdog's goroutine touches it).
	storageDown bool
	// auth is the policy in force and tls the listeners' certificate
	// (nil without [listen.tls]); SIGHUP rereads both.
	auth *auth.Authenticator
	tls  *auth.ServerTLS
	// rag announces the corpora on the fleet's NATS (nil: not announced).
	rag *ragAnnouncement
}

// serveHooks let tests see the daemon's listeners and run it with a fake
// notify socket; the zero hooks change nothing.
type serveHooks struct {
	getenv  func(string) string
	started func(*daemon)
	opts    node.Options
	// tick drives the watchdog one check at a time (nil: a ticker).
	tick func(time.Duration) <-chan time.Time
	// reloaded is told when a SIGHUP has been handled.
	reloaded func()
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runServeWith(ctx, args, stderr, serveHooks{})
}

// runServeWith is `meshd serve`: open the node, listen, tell systemd it is
// ready, feed the watchdog while alive, reload on SIGHUP and drain on
// SIGTERM or SIGINT (or ctx's end).
func runServeWith(ctx context.Context, args []string, stderr io.Writer, hooks serveHooks) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", defaultConfig, "configuration file")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	getenv := hooks.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	// What check-config would find missing on this machine stops the
	// start here, every problem at once with its line and key, rather
	// than one at a time from whichever part fails first.
	cfg, err := config.LoadChecked(*path, &config.EnvCheck{Serve: true, NoSensors: hooks.opts.OpenSensor != nil})
	if err != nil {
		return err
	}
	d := &daemon{path: *path, log: newLogger(stderr, cfg.Log, getenv), notify: systemd.NewNotifier(getenv), ready: make(chan struct{})}
	d.notify.Tick = hooks.tick
	var current atomic.Pointer[node.Node]
	metrics := api.NewMetrics(current.Load)
	opts := hooks.opts
	opts.Logger, opts.Metrics = d.log, metrics
	// The API's live stream hears of each serve; the server is made after
	// the node, so the node is told through this.
	var apiSrv atomic.Pointer[api.Server]
	outer := opts.Observe
	opts.Observe = func(ev agent.Event) {
		if s := apiSrv.Load(); s != nil {
			s.Served(ev)
		}
		if outer != nil {
			outer(ev)
		}
	}
	_ = d.notify.Status("opening the receipt log, the ledger, the meters and the engines")
	n, err := node.Open(ctx, cfg, opts)
	if err != nil {
		// Not logged as well: cli.Main prints the error, once.
		return fmt.Errorf("cannot start: %w", err)
	}
	d.node = n
	current.Store(n)
	pol, err := cfg.AuthPolicy()
	if err == nil && cfg.Listen.TLS.Enabled() {
		d.tls, err = auth.NewServerTLS(cfg.Listen.TLS.Files())
	}
	if err != nil {
		n.Close(context.WithoutCancel(ctx))
		return err
	}
	d.auth = auth.New(pol)
	d.logAuth(pol, cfg)
	d.api = api.New(n, api.Options{
		Defaults: api.Defaults{FidelityFloor: wire.Fidelity(cfg.Defaults.FidelityFloor), JouleCeilingUJ: cfg.Defaults.JouleCeilingUJ,
			MaxTokens: cfg.Defaults.MaxTokens},
		MaxBodyBytes: cfg.Listen.MaxBodyBytes,
		ServeTimeout: time.Duration(cfg.Listen.ServeTimeout),
		MaxInFlight:  cfg.Listen.MaxInFlight,
		Logger:       d.log,
		Metrics:      metrics,
		Auth:         d.auth,
		CORSOrigins:  cfg.Listen.CORSOrigins,
	})
	apiSrv.Store(d.api)
	if d.rag, err = announceRAG(ctx, n, d.api, d.log); err != nil {
		n.Close(context.WithoutCancel(ctx))
		return err
	}
	lns, err := d.listen(cfg.Listen)
	if err != nil {
		n.Close(context.WithoutCancel(ctx))
		return err
	}
	errc := make(chan error, len(lns))
	for _, l := range lns {
		ln := l.ln
		hs := d.api.HTTPServer(time.Duration(cfg.Listen.ReadHeaderTimeout), time.Duration(cfg.Listen.ReadTimeout), time.Duration(cfg.Listen.IdleTimeout))
		hs.ConnContext = auth.ConnContext(l.class)
		d.servers = append(d.servers, hs)
		d.addrs = append(d.addrs, ln.Addr())
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("listener %s: %w", ln.Addr(), err)
			}
		}()
		d.log.Info("listening", "addr", ln.Addr().String(), "network", ln.Addr().Network(), "tls", l.tls, "anonymous", l.anonymous(d.auth.Policy()).String())
	}
	// The signals are ours before anyone is told we are ready: a reload
	// (SIGHUP) sent the moment systemd or a caller sees readiness would
	// otherwise meet the default action and end the process.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	status := fmt.Sprintf("serving %d backends, %d meters, %d receipts in the chain", len(n.Backends()), len(n.Meters()), n.Stores.Log.Durable())
	if err := d.notify.Ready(status); err != nil {
		d.log.Warn("telling systemd we are ready", "err", err)
	}
	close(d.ready)
	if hooks.started != nil {
		hooks.started(d)
	}

	wctx, stopWatchdog := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.notify.Watchdog(wctx, d.alive, func(err error) {
			d.log.Error("watchdog not fed: the serve path or a meter is stalled; systemd will restart meshd", "err", err)
		})
	}()

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-errc:
			runErr = err // printed by cli.Main once the drain is done
			d.log.Info("stopping: a listener failed")
			break loop
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				d.reload(ctx)
				if hooks.reloaded != nil {
					hooks.reloaded()
				}
				continue
			}
			d.log.Info("stopping", "signal", sig.String())
			break loop
		}
	}
	stopWatchdog()
	wg.Wait()
	if err := d.shutdown(time.Duration(cfg.Listen.ShutdownTimeout)); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// alive is what feeds the watchdog: the node's meters, and no serve
// running past its deadline. A storage that refuses writes does not starve
// it (the node heals by itself once writes succeed again, which a restart
// would not hasten); each check retries the heal and says so in STATUS=.
func (d *daemon) alive() error {
	d.storageStatus(d.node.Storage())
	if err := d.node.Alive(); err != nil {
		return err
	}
	return d.api.Stuck(30 * time.Second)
}

// storageStatus tells the service manager and the log when the storage
// starts or stops refusing writes.
func (d *daemon) storageStatus(err error) {
	was := d.storageDown
	d.storageDown = err != nil
	switch {
	case err != nil && !was:
		d.log.Error("storage refuses writes: serves are refused with storage_unavailable until writes succeed again", "err", err)
		_ = d.notify.Status("storage unavailable: " + err.Error())
	case err == nil && was:
		d.log.Info("storage takes writes again; serving")
		_ = d.notify.Status("serving")
	}
}

// listener is one bound listener and what it grants a caller without
// credentials.
type listener struct {
	ln    net.Listener
	class auth.Class
	tls   bool
}

func (l listener) anonymous(p *auth.Policy) auth.Roles {
	if l.class == auth.Public {
		return p.PublicAnonymous
	}
	return p.Anonymous
}

func (d *daemon) listen(c config.Listen) ([]listener, error) {
	var lns []listener
	fail := func(err error) ([]listener, error) {
		for _, l := range lns {
			l.ln.Close()
		}
		return nil, err
	}
	for _, a := range c.TCP {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", a, err))
		}
		// The class goes by the address bound, never by the peer's: on
		// a listener open to every interface a connection from 127.0.0.1
		// may be a proxy relaying anyone.
		host, _, _ := net.SplitHostPort(a)
		l := listener{ln: ln, class: auth.Public}
		if auth.IsLoopbackHost(host) {
			l.class = auth.Loopback
		}
		if d.tls != nil {
			l.ln, l.tls = tls.NewListener(ln, d.tls.Config()), true
		}
		lns = append(lns, l)
	}
	if c.Unix != "" {
		// A socket file left by a killed meshd would make the bind fail;
		// anything else at that path is not ours to remove.
		if fi, err := os.Lstat(c.Unix); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if conn, err := net.Dial("unix", c.Unix); err == nil {
				conn.Close()
				return fail(fmt.Errorf("listen on %s: another process is serving on it", c.Unix))
			}
			os.Remove(c.Unix)
		}
		ln, err := net.Listen("unix", c.Unix)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", c.Unix, err))
		}
		if err := os.Chmod(c.Unix, 0o660); err != nil {
			ln.Close()
			return fail(err)
		}
		d.unixPath = c.Unix
		lns = append(lns, listener{ln: ln, class: auth.Unix})
	}
	return lns, nil
}

// logAuth says at start and on reload who may do what, loudly when a
// caller without credentials may make the steward sign.
func (d *daemon) logAuth(p *auth.Policy, cfg *config.Config) {
	args := []any{"anonymous_local", p.Anonymous.String(), "anonymous_public", p.PublicAnonymous.String(),
		"tokens", len(p.Tokens), "certs", len(p.Certs), "peers", len(p.Peers), "tls", cfg.Listen.TLS.Enabled()}
	switch {
	case p.PublicAnonymous != 0:
		d.log.Warn("auth.insecure_public: callers without credentials beyond loopback may "+p.PublicAnonymous.String(), args...)
	case p.Anonymous.Has(auth.Operate) || p.Anonymous.Has(auth.Serve):
		d.log.Info("authentication: callers on loopback and the socket need no credentials", args...)
	default:
		d.log.Info("authentication", args...)
	}
}

// reloadAuth rereads the tokens file and the TLS files; on error the
// ones in force stay.
func (d *daemon) reloadAuth(cfg *config.Config) error {
	pol, err := cfg.AuthPolicy()
	if err != nil {
		return fmt.Errorf("authentication: %w", err)
	}
	if d.tls != nil {
		if !cfg.Listen.TLS.Enabled() {
			d.log.Warn("listen.tls removed: the listeners keep TLS until restart")
		} else if err := d.tls.Reload(cfg.Listen.TLS.Files()); err != nil {
			return fmt.Errorf("listen.tls: %w", err)
		}
	} else if cfg.Listen.TLS.Enabled() {
		d.log.Warn("listen.tls added: the listeners speak TLS only after a restart")
	}
	d.auth.Set(pol)
	d.logAuth(pol, cfg)
	return nil
}

// reload rereads the configuration and applies what may change while
// running; a bad file changes nothing.
func (d *daemon) reload(ctx context.Context) {
	_ = d.notify.Reloading()
	defer d.notify.Ready("reloaded")
	cfg, err := config.Load(d.path)
	if err != nil {
		d.log.Error("reload refused: the configuration has problems; keeping the running one", "err", err)
		return
	}
	if err := d.reloadAuth(cfg); err != nil {
		d.log.Error("reload refused: keeping the running credentials and configuration", "err", err)
		return
	}
	if err := d.node.Reload(ctx, cfg); err != nil {
		d.log.Error("reload failed; keeping the running configuration", "err", err)
		return
	}
	d.rag = d.rag.refresh(ctx, d.node, d.api, d.log)
}

// shutdown stops accepting and lets in-flight serves finish within
// timeout, and no longer: near the deadline (drainPhases) the serves still
// running are cut, each answering its client 503 shutting_down, sealing
// nothing and releasing its grant hold; connections left after that are
// closed. Then it stops the engines and meters and makes the log durable.
func (d *daemon) shutdown(timeout time.Duration) error {
	_ = d.notify.Stopping("draining in-flight serves")
	d.rag.stop()
	d.api.Drain()
	start := time.Now()
	cutAt, closeAt := drainPhases(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(closeAt))
	defer cancel()
	cut := time.AfterFunc(cutAt, func() {
		if n := d.api.InFlight(); n > 0 {
			d.log.Warn("drain deadline near: cutting the serves in flight", "serves", n, "shutdown_timeout", timeout)
		}
		d.api.Cut()
	})
	defer cut.Stop()
	var errs []error
	var wg sync.WaitGroup
	for _, hs := range d.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil {
				// The cut serves have not all answered: cut their
				// connections too.
				hs.Close()
				d.log.Warn("drain deadline passed; connections closed", "err", err)
			}
		}()
	}
	wg.Wait()
	// Handlers cut off still finish their unwinding (releasing grant
	// holds, sealing nothing); the log stays open until they have, or
	// until the drain's deadline.
	for end := start.Add(timeout); d.api.InFlight() > 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := d.api.InFlight(); n > 0 {
		d.log.Error("drain deadline passed with serves still unwinding; closing anyway", "serves", n)
	}
	if d.unixPath != "" {
		os.Remove(d.unixPath)
	}
	if err := d.node.Close(context.Background()); err != nil {
		errs = append(errs, err) // returned, and so printed once
	} else {
		d.log.Info("stopped cleanly: log synced, engines stopped")
	}
	return errors.Join(errs...)
}

// drainPhases splits a drain of timeout: serves may finish on their own
// until cutAt, are cut then (answering 503), and connections still open at
// closeAt are closed; the rest, to timeout, is for cut handlers to unwind.
// The margin is a tenth of the timeout, between 250 ms and 2 s (and at
// most half the timeout): a cut serve's engine stops at its next token,
// which on a small board may take a tenth of a second, and its answer is
// one write.
func drainPhases(timeout time.Duration) (cutAt, closeAt time.Duration) {
	margin := min(max(timeout/10, 250*time.Millisecond), 2*time.Second, timeout/2)
	return timeout - margin, timeout - margin/2
}
