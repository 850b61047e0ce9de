package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/pelletier/go-toml/v2"

	"meshd/agent/api/client"
	"meshd/agent/config"
	"meshd/agent/node"
	"meshd/drivers"
	"meshd/rapl"
	"meshd/shunt"
	"meshd/steward"
)

type demoRequest struct {
	prompt  string
	max     uint32
	floor   uint8
	ceiling uint64
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runDemoWith(ctx, args, stdout, stderr, meterHooks{})
}

// runDemoWith is `meshd demo`: it writes a configuration, starts the
// daemon on it (the same code as `meshd serve`), serves through the HTTP
// API — mesh/1 serves, an OpenAI completion, a chat, a streamed chat —
// prints the receipts, stops the daemon cleanly and verifies the chain it
// left. hooks let a test drive the meter step by step; the zero hooks
// change nothing.
func runDemoWith(ctx context.Context, args []string, stdout, stderr io.Writer, hooks meterHooks) (err error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the config, key, receipt log and demo model (default: a new temporary directory)")
	meterSpec := fs.String("meter", "", "meter the engines with a power sensor (see `meshd demo -h`); default: RAPL package-0 if readable, else none (Estimator figures)")
	hwmonRoot := fs.String("hwmon-root", "", "sysfs hwmon root for hwmon: meters (default /sys/class/hwmon)")
	noGGUF := fs.Bool("no-gguf", false, "serve with the reference engines only (skip the GGUF engine subprocess)")
	shared := fs.Bool("shared-meter", false, "let serves overlap on the meter's span, each charged its apportioned share (ModelBased); default: one metered serve at a time")
	requireMeter := fs.Bool("require-meter", false, "refuse serves while the meter is not measuring, rather than seal Estimator receipts")
	keep := fs.Bool("keep", false, "keep the temporary directory (config, key, receipts, log) at exit and print where it is; without -dir it is removed after a clean run")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshd demo [flags]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, meterUsage)
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "meshd-demo-")
		if err != nil {
			return err
		}
		*dir = d
		// Registered before anything opens a file in it, so it runs last.
		// A failed demo keeps its directory: the error names the log in it.
		defer func() {
			if *keep || err != nil {
				fmt.Fprintf(stderr, "meshd demo: kept %s\n", d)
				return
			}
			if rerr := os.RemoveAll(d); rerr != nil {
				err = fmt.Errorf("demo: removing its temporary directory: %w", rerr)
				return
			}
			fmt.Fprintf(stdout, "meshd demo: removed %s (-keep keeps it)\n", d)
		}()
	}
	cfg, meterNote, err := demoConfig(ctx, *dir, *meterSpec, *hwmonRoot, *noGGUF, stdout)
	if err != nil {
		return err
	}
	cfg.Metering.Shared = *shared
	if *requireMeter {
		cfg.Metering.OnMeterFailure = "refuse"
	}
	path := filepath.Join(*dir, "meshd.toml")
	data, err := toml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("demo: writing the config: %w", err)
	}
	header := "# Written by `meshd demo`; run the same daemon with: meshd serve -config " + path + "\n"
	if err := os.WriteFile(path, append([]byte(header), data...), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(*dir, "meshd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()

	dctx, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan *daemon, 1)
	done := make(chan error, 1)
	sh := serveHooks{
		getenv:  func(string) string { return "" },
		started: func(d *daemon) { started <- d },
		opts: node.Options{
			OpenSensor: func(ctx context.Context, m config.Meter) (drivers.Sensor, error) {
				s, err := node.OpenSensor(ctx, m, hooks.clock)
				if err == nil && hooks.sensor != nil {
					s = hooks.sensor(s)
				}
				return s, err
			},
			MeterConfig: shunt.MeterConfig{Config: shunt.Config{Now: hooks.now}, After: hooks.after, Logger: hooks.logger},
			WrapMeter:   hooks.meter,
		},
	}
	go func() { done <- runServeWith(dctx, []string{"-config", path}, logFile, sh) }()
	var d *daemon
	select {
	case d = <-started:
	case err := <-done:
		return fmt.Errorf("demo: the daemon did not start (log: %s): %w", logPath, err)
	}
	c, err := client.New(d.addrs[0].String())
	if err != nil {
		return err
	}
	head, err := c.Head(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "meshd demo: daemon on http://%s (config %s, log %s)\nsteward %s; receipts in %s\n",
		d.addrs[0], path, logPath, head.Steward, cfg.ReceiptsDir())
	fmt.Fprint(stdout, meterNote)

	reqs := []demoRequest{
		{"what is a joule", 16, 0, 10_000},
		{"summarise the shunt datasheet in one line", 32, 2, 50_000},
		{"prove the receipt chain is tamper evident", 48, 3, 500_000},
		{"an F2 answer from a real model", 24, 2, 100_000},
		{"the same question, but F2 with a tight ceiling", 64, 2, 5_000},
		{"a frontier answer, paid in full", 16, 4, 200_000},
		{"a frontier answer on a shoestring", 64, 4, 5_000},
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tcall\tfloor\tceiling µJ\tbackend\ttokens in/out/acc\tµJ/accepted token\tprovenance\tserve/window ms\t± µJ\troute")
	served, refused := 0, 0
	row := func(i int, call string, floor uint8, ceiling uint64, s *client.Served) {
		rc := s.Receipt.Receipt
		per, bound := "-", "-" // an Estimator figure is a bound in itself, not a measurement
		if rc.UJPerAcceptedToken != nil {
			per = fmt.Sprint(*rc.UJPerAcceptedToken)
		}
		if rc.ErrorUJ != nil {
			bound = fmt.Sprint(*rc.ErrorUJ)
		}
		window := float64(*rc.WindowNs)
		serve := window
		if rc.ServeNs != nil {
			serve = float64(*rc.ServeNs)
		}
		fmt.Fprintf(tw, "%d\t%s\tF%d\t%d\t%s\t%d/%d/%d\t%s\t%s\t%.2f/%.2f\t%s\t%s\n", i, call, floor, ceiling, rc.Backend,
			rc.TokensIn, rc.TokensOut, rc.TokensAccepted, per, rc.EnergyProvenance, serve/1e6, window/1e6, bound, rc.Route)
	}
	for i, r := range reqs {
		floor := r.floor
		s, err := c.Serve(ctx, client.ServeRequest{Prompt: r.prompt, MaxTokens: r.max, FidelityFloor: &floor, JouleCeilingUJ: r.ceiling})
		var ae *client.Error
		if errors.As(err, &ae) && ae.Code == "no_route" {
			refused++
			fmt.Fprintf(tw, "%d\tserve\tF%d\t%d\t-\t-\t-\t-\t-\t-\trefused: %s\n", i, r.floor, r.ceiling, ae.Route)
			continue
		}
		if err != nil {
			return err
		}
		served++
		row(i, "serve", r.floor, r.ceiling, s)
	}
	// The OpenAI-shaped calls any client library speaks; the defaults of
	// the config fill in the floor and ceiling such clients do not send.
	i := len(reqs)
	s, err := c.Completion(ctx, "the meter reads", nil, 12, client.Extra{}, nil)
	if err != nil {
		return fmt.Errorf("demo: completion: %w", err)
	}
	served++
	row(i, "completion", uint8(cfg.Defaults.FidelityFloor), cfg.Defaults.JouleCeilingUJ, s)
	// The chat asks for F2, which the GGUF engine serves when it runs: it
	// renders the messages with the model's own chat template.
	f2 := uint8(2)
	chatX := client.Extra{FidelityFloor: &f2}
	msgs := []client.Message{{Role: "system", Content: "answer in one line"}, {Role: "user", Content: "what does a steward seal?"}}
	if s, err = c.Completion(ctx, "", msgs, 12, chatX, nil); err != nil {
		return fmt.Errorf("demo: chat: %w", err)
	}
	served++
	row(i+1, "chat", f2, cfg.Defaults.JouleCeilingUJ, s)
	var streamed strings.Builder
	pieces := 0
	if s, err = c.Completion(ctx, "", msgs, 12, chatX, func(p string) { pieces++; streamed.WriteString(p) }); err != nil {
		return fmt.Errorf("demo: streamed chat: %w", err)
	}
	served++
	row(i+2, "chat (streamed)", f2, cfg.Defaults.JouleCeilingUJ, s)
	tw.Flush()
	fmt.Fprintf(stdout, "\nstreamed chat: %d pieces, %q; its receipt %s came as the last event\n", pieces, streamed.String(), s.Receipt.ID)

	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("demo: the daemon did not stop cleanly (log: %s): %w", logPath, err)
	}
	fmt.Fprintln(stdout, "daemon stopped cleanly: in-flight serves drained, log synced, engines stopped")
	trusted, err := steward.ParsePublicKey(head.Steward)
	if err != nil {
		return err
	}
	vr, err := steward.VerifyLog(ctx, cfg.ReceiptsDir(), steward.VerifyOptions{Trusted: trusted})
	if err != nil {
		return fmt.Errorf("demo: the log it just wrote does not verify: %w", err)
	}
	fmt.Fprintf(stdout, "served %d, refused %d; log verified: %d receipts, every signature and prev link checks, head %s\n",
		served, refused, vr.Records, vr.Head)
	return nil
}

// demoConfig is the demo's configuration: three reference backends, the
// GGUF engine on a synthesised model when its runner is installed, and the
// meter the spec names, or RAPL's package zone when it is readable, or
// none. It also returns a line saying how the serves are metered.
func demoConfig(ctx context.Context, dir, spec, hwmonRoot string, noGGUF bool, stdout io.Writer) (*config.Config, string, error) {
	cfg, err := config.Parse([]byte(fmt.Sprintf("[steward]\nstate_dir = %q\n[listen]\ntcp = [\"127.0.0.1:0\"]\n[metering]\non_meter_failure = \"estimate\"\n"+
		"[[backend]]\nname = \"ref-tiny\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 40\nwork = 8\n", dir)), "demo")
	if err != nil {
		return nil, "", err
	}
	cfg.Steward.KeyFile = ""
	backends := []config.Backend{cfg.Backends[0]}
	if !noGGUF {
		g, err := demoGGUF(dir, stdout)
		if err != nil {
			return nil, "", err
		}
		if g != nil {
			// Registered second: it is the F2 backend the router prefers
			// over ref-mid when F2 is enough.
			backends = append(backends, *g)
		}
	}
	backends = append(backends,
		config.Backend{Name: "ref-mid", Kind: "reference", Fidelity: 3, UJPerToken: 300, Work: 64},
		config.Backend{Name: "ref-large", Kind: "reference", Fidelity: 4, UJPerToken: 2500, Work: 512})
	cfg.Backends = backends
	note := "no hardware meter found or configured: every figure is an honest Estimator\n\n"
	switch {
	case spec != "":
		ms, err := metersFromSpec(spec, hwmonRoot)
		if err != nil {
			return nil, "", err
		}
		cfg.Meters = ms
		note = fmt.Sprintf("metering every engine call with %s\n\n", strings.Join(meterNames(spec), "+"))
	default:
		if s, err := rapl.Open("package-0", rapl.Config{}); err == nil {
			s.Close()
			cfg.Meters = []config.Meter{{Name: "rapl", Driver: "rapl", Zone: "package-0"}}
			note = "metering every engine call with RAPL package-0 (ModelBased: RAPL is the CPU's own energy model)\n\n"
		}
	}
	var names []string
	for _, m := range cfg.Meters {
		names = append(names, m.Name)
	}
	for i := range cfg.Backends {
		cfg.Backends[i].Meters = names
	}
	return cfg, note, nil
}

// meterNames are the sensors' names a spec gives, as receipts carry them.
func meterNames(spec string) []string {
	var out []string
	for _, one := range strings.Split(spec, "+") {
		name, _, _ := strings.Cut(one, "@")
		out = append(out, name)
	}
	return out
}
