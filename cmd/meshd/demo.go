package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"meshd/agent"
	"meshd/engine"
	"meshd/shunt"
	"meshd/steward"
	"meshd/wire"
)

type demoRequest struct {
	prompt  string
	max     uint32
	floor   wire.Fidelity
	ceiling uint64
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runDemoWith(ctx, args, stdout, stderr, meterHooks{})
}

// runDemoWith is runDemo with hooks on its meter, so that a test can drive
// the sensor step by step; the zero hooks change nothing.
func runDemoWith(ctx context.Context, args []string, stdout, stderr io.Writer, hooks meterHooks) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the key, receipt log and demo model (default: a new temporary directory)")
	meterSpec := fs.String("meter", "", "meter the engines with a power sensor (see `meshd demo -h`); default none: Estimator figures")
	hwmonRoot := fs.String("hwmon-root", "", "sysfs hwmon root for hwmon: meters (default /sys/class/hwmon)")
	noGGUF := fs.Bool("no-gguf", false, "serve with the reference engines only (skip the GGUF engine subprocess)")
	shared := fs.Bool("shared-meter", false, "let serves overlap on the meter's span, each charged its apportioned share (ModelBased); default: one metered serve at a time")
	requireMeter := fs.Bool("require-meter", false, "refuse serves while the meter is not measuring, rather than seal Estimator receipts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshd demo [flags]")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, meterUsage)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "meshd-demo-")
		if err != nil {
			return err
		}
		*dir = d
	}
	keyPath := filepath.Join(*dir, "steward.key")
	logPath := filepath.Join(*dir, "receipts")
	key, err := steward.LoadKeyFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		if key, err = steward.GenerateKey(rand.Reader); err == nil {
			err = steward.WriteKeyFile(keyPath, key)
		}
	}
	if err != nil {
		return err
	}
	log, rep, err := steward.OpenLog(ctx, logPath, steward.LogOptions{Key: key})
	if err != nil {
		return err
	}
	defer log.Close()
	if rep.TornBytes > 0 {
		fmt.Fprintf(stdout, "recovered: cut a torn final frame of %d bytes\n", rep.TornBytes)
	}
	st := steward.New(key, log, steward.Options{})

	var meter agent.Meter
	if *meterSpec != "" {
		policy := shunt.Exclusive
		if *shared {
			policy = shunt.Shared
		}
		sp, closeMeters, err := openSpan(ctx, *meterSpec, *hwmonRoot, policy, hooks)
		if err != nil {
			return err
		}
		defer closeMeters()
		meter = hooks.wrapMeter(agent.FromSpan(sp))
	}
	var backends []engine.Backend
	for _, c := range []engine.ReferenceConfig{
		{Name: "ref-tiny", Fidelity: wire.F1, UJPerToken: 40, Work: 8},
		{Name: "ref-mid", Fidelity: wire.F3, UJPerToken: 300, Work: 64},
		{Name: "ref-large", Fidelity: wire.F4, UJPerToken: 2500, Work: 512},
	} {
		b, err := engine.NewReference(c)
		if err != nil {
			return err
		}
		backends = append(backends, b)
	}
	if !*noGGUF {
		g, err := startDemoGGUF(ctx, *dir, stdout)
		if err != nil {
			return err
		}
		if g != nil {
			defer g.Stop(context.WithoutCancel(ctx))
			// Registered second: it is the F2 backend the router prefers
			// over ref-mid when F2 is enough.
			backends = append(backends[:1], append([]engine.Backend{g}, backends[1:]...)...)
		}
	}
	ag, err := agent.New(agent.Config{Backends: backends, Steward: st, Meter: meter, RequireMeter: *requireMeter, Logger: hooks.logger})
	if err != nil {
		return err
	}

	fmt.Fprintf(stdout, "meshd demo: steward %s\nlog %s\n", key.ID(), logPath)
	if meter == nil {
		fmt.Fprint(stdout, "no hardware meter configured: every figure is an honest Estimator\n\n")
	} else {
		fmt.Fprintf(stdout, "metering every engine call with %s\n\n", meter.Name())
	}
	reqs := []demoRequest{
		{"what is a joule", 16, wire.F0, 10_000},
		{"summarise the shunt datasheet in one line", 32, wire.F2, 50_000},
		{"prove the receipt chain is tamper evident", 48, wire.F3, 500_000},
		{"an F2 answer from a real model", 24, wire.F2, 100_000},
		{"the same question, but F2 with a tight ceiling", 64, wire.F2, 5_000},
		{"a frontier answer, paid in full", 16, wire.F4, 200_000},
		{"a frontier answer on a shoestring", 64, wire.F4, 5_000},
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tfloor\tceiling µJ\tbackend\ttokens in/out/acc\tµJ/accepted token\tprovenance\tserve/window ms\t± µJ\troute")
	served, refused := 0, 0
	for i, r := range reqs {
		req := wire.ServeRequest{
			PromptHash:     wire.ContentOf([]byte(r.prompt)),
			PromptTokens:   uint32(len(r.prompt)/4 + 1),
			MaxTokens:      r.max,
			FidelityFloor:  r.floor,
			JouleCeilingUJ: r.ceiling,
		}
		resp, err := ag.Serve(ctx, req, []byte(r.prompt))
		if errors.Is(err, agent.ErrNoRoute) {
			refused++
			fmt.Fprintf(tw, "%d\t%v\t%d\t-\t-\t-\t-\t-\t-\trefused: %s\n", i, r.floor, r.ceiling, noRouteReason(err))
			continue
		}
		if err != nil {
			return err
		}
		served++
		rc := resp.Sealed.Receipt
		per := "-"
		if rc.UJPerAcceptedToken != nil {
			per = fmt.Sprint(*rc.UJPerAcceptedToken)
		}
		bound := "-" // an Estimator figure is a bound in itself, not a measurement
		if rc.ErrorUJ != nil {
			bound = fmt.Sprint(*rc.ErrorUJ)
		}
		serve := float64(*rc.WindowNs)
		if rc.ServeNs != nil {
			serve = float64(*rc.ServeNs)
		}
		fmt.Fprintf(tw, "%d\t%v\t%d\t%s\t%d/%d/%d\t%s\t%s\t%.2f/%.2f\t%s\t%s\n", i, r.floor, r.ceiling, rc.Backend,
			rc.TokensIn, rc.TokensOut, rc.TokensAccepted, per, rc.EnergyProvenance, serve/1e6, float64(*rc.WindowNs)/1e6, bound, rc.Route)
	}
	tw.Flush()
	if err := log.Close(); err != nil {
		return err
	}
	vr, err := steward.VerifyLog(ctx, logPath, steward.VerifyOptions{Trusted: key.Public()})
	if err != nil {
		return fmt.Errorf("demo: the log it just wrote does not verify: %w", err)
	}
	fmt.Fprintf(stdout, "\nserved %d, refused %d; log verified: %d receipts, every signature and prev link checks, head %s\n",
		served, refused, vr.Records, vr.Head)
	return nil
}

func noRouteReason(err error) string {
	var se *agent.ServeError
	if errors.As(err, &se) {
		return se.Decision.Justification
	}
	return err.Error()
}
