package main

// `meshd demo-fleet`: a fleet on one machine. An in-process NATS server
// with JetStream, three meshd nodes publishing their receipts to it, and a
// front door that forwards serves to them (backends of kind "meshd",
// PROFILE §19). It serves through the front door, stops a node to show the
// front door passing it over, waits for every publisher, verifies every
// chain from the stream with agent/fleet (the code of `meshctl fleet
// verify`), and has meshctl write and verify the signed fleet report
// (PROFILE §21).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/api/client"
	"meshd/agent/fleet"
	"meshd/steward"
)

// fleetNodeSpec is one board of the demo: a reference backend at its
// fidelity and configured µJ/token.
type fleetNodeSpec struct {
	name     string
	fidelity int
	ujPerTok uint64
}

// demoFleetNodes differ in fidelity, so that a request's floor decides
// which node the front door picks, and in µJ/token, so that the fleet
// report's figures differ board by board.
var demoFleetNodes = []fleetNodeSpec{{"node-a", 1, 40}, {"node-b", 2, 60}, {"node-c", 3, 90}}

// demoWait bounds every wait of the demo: a start, a publisher catching
// up, a stop.
const demoWait = 30 * time.Second

// fleetNode is one in-process `meshd serve`.
type fleetNode struct {
	name    string
	dir     string
	d       *daemon
	client  *client.Client
	steward string
	stop    context.CancelFunc
	done    chan error
	stopped bool
}

// startFleetNode writes config under dir/name and runs the daemon on it.
func startFleetNode(ctx context.Context, dir, name, config string) (*fleetNode, error) {
	n := &fleetNode{name: name, dir: filepath.Join(dir, name), done: make(chan error, 1)}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(n.dir, "meshd.toml")
	header := "# Written by `meshd demo-fleet`; run the same node with: meshd serve -config " + path + "\n"
	if err := os.WriteFile(path, []byte(header+fmt.Sprintf("[steward]\nstate_dir = %q\n", n.dir)+config), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(n.dir, "meshd.log"))
	if err != nil {
		return nil, err
	}
	started := make(chan *daemon, 1)
	sh := serveHooks{getenv: func(string) string { return "" }, started: func(d *daemon) { started <- d }}
	nctx, stop := context.WithCancel(ctx)
	n.stop = stop
	go func() {
		defer logFile.Close()
		n.done <- runServeWith(nctx, []string{"-config", path}, logFile, sh)
	}()
	select {
	case n.d = <-started:
	case err := <-n.done:
		stop()
		n.stopped = true
		return nil, fmt.Errorf("demo-fleet: %s did not start (log: %s): %w", name, logFile.Name(), err)
	case <-time.After(demoWait):
		n.shutdown()
		return nil, fmt.Errorf("demo-fleet: %s did not start within %v (log: %s)", name, demoWait, logFile.Name())
	}
	if n.client, err = client.New(n.d.addrs[0].String()); err != nil {
		n.shutdown()
		return nil, err
	}
	h, err := n.client.Head(ctx)
	if err != nil {
		n.shutdown()
		return nil, fmt.Errorf("demo-fleet: %s: %w", name, err)
	}
	n.steward = h.Steward
	return n, nil
}

func (n *fleetNode) url() string { return "http://" + n.d.addrs[0].String() }

// shutdown stops the daemon as SIGTERM would (drain, sync, stop the
// publisher) and returns how it stopped.
func (n *fleetNode) shutdown() error {
	if n.stopped {
		return nil
	}
	n.stopped = true
	n.stop()
	select {
	case err := <-n.done:
		if err != nil {
			return fmt.Errorf("demo-fleet: %s did not stop cleanly: %w", n.name, err)
		}
		return nil
	case <-time.After(demoWait):
		return fmt.Errorf("demo-fleet: %s did not stop within %v", n.name, demoWait)
	}
}

// caughtUp waits until the node's publisher has every durable receipt
// in the stream and a checkpoint of all of them published.
func (n *fleetNode) caughtUp(ctx context.Context) (fleet.Status, error) {
	p := n.d.node.Publisher()
	if p == nil {
		return fleet.Status{}, fmt.Errorf("demo-fleet: %s runs no fleet publisher", n.name)
	}
	deadline := time.Now().Add(demoWait)
	for {
		st := p.Status()
		if st.Connected && st.Next == st.Durable && st.Checkpoint == st.Durable {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("demo-fleet: %s's publisher did not catch up within %v: %d of %d receipts acknowledged, checkpoint %d",
				n.name, demoWait, st.Next, st.Durable, st.Checkpoint)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func runDemoFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the NATS store, each node's state and the fleet report (default: a new temporary directory)")
	meshctlPath := fs.String("meshctl", "", "the meshctl binary that writes and verifies the fleet report (default: the one next to meshd, else on PATH)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshd demo-fleet [-dir DIR] [-meshctl PATH]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: demo-fleet takes only flags, got %q", errUsage, fs.Args())
	}
	mc, err := findMeshctl(*meshctlPath)
	if err != nil {
		return err
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "meshd-demo-fleet-"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The fleet's NATS server, JetStream on file storage.
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: filepath.Join(*dir, "nats"), NoLog: true, NoSigs: true})
	if err != nil {
		return fmt.Errorf("demo-fleet: nats server: %w", err)
	}
	go ns.Start()
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(demoWait) {
		return errors.New("demo-fleet: the nats server did not start")
	}
	natsURL := ns.ClientURL()
	fmt.Fprintf(stdout, "meshd demo-fleet: in %s\nnats-server with JetStream (file storage in %s) on %s\n\n", *dir, filepath.Join(*dir, "nats"), natsURL)
	// checkpoint_every = 1 makes each publisher publish a checkpoint after
	// every batch, so the report can anchor every receipt of the demo
	// (a real fleet keeps the default of 1000).
	fleetTOML := fmt.Sprintf("[fleet]\nurl = %q\ncheckpoint_every = 1\n", natsURL)
	listen := "[listen]\ntcp = [\"127.0.0.1:0\"]\n[metering]\non_meter_failure = \"estimate\"\n"

	var all []*fleetNode
	defer func() {
		for _, n := range all {
			n.shutdown()
		}
	}()
	nodes := map[string]*fleetNode{}
	names := map[string]string{} // steward → node name, for the tables
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tAPI\tsteward\tbackend\tfidelity\tµJ/token")
	for _, s := range demoFleetNodes {
		n, err := startFleetNode(ctx, *dir, s.name, listen+fleetTOML+fmt.Sprintf(
			"[[backend]]\nname = \"ref\"\nkind = \"reference\"\nfidelity = %d\nuj_per_token = %d\nwork = 8\n", s.fidelity, s.ujPerTok))
		if err != nil {
			return err
		}
		all = append(all, n)
		nodes[s.name], names[n.steward] = n, s.name
		fmt.Fprintf(tw, "%s\t%s\t%s\tref (reference)\tF%d\t%d\n", s.name, n.url(), n.steward, s.fidelity, s.ujPerTok)
	}
	// The front door's backends are the nodes, each pinned to the steward
	// key its /v1/chain/head named: a receipt under any other key fails.
	var backends strings.Builder
	for _, s := range demoFleetNodes {
		n := nodes[s.name]
		fmt.Fprintf(&backends, "[[backend]]\nname = %q\nkind = \"meshd\"\nurl = %q\nsteward = %q\nfidelity = %d\nuj_per_token = %d\ntimeout = \"10s\"\n",
			s.name, n.url(), n.steward, s.fidelity, s.ujPerTok)
	}
	front, err := startFleetNode(ctx, *dir, "front-door", listen+fleetTOML+backends.String())
	if err != nil {
		return err
	}
	all = append(all, front)
	names[front.steward] = "front-door"
	fmt.Fprintf(tw, "front-door\t%s\t%s\tnode-a, node-b, node-c (kind meshd)\t\t\n", front.url(), front.steward)
	tw.Flush()
	fmt.Fprintln(stdout, "every node publishes its receipts to the stream (agent/fleet publisher; cursor in its state dir)")

	// Serves through the front door: the floor picks the node.
	fmt.Fprintln(stdout, "\nserving through the front door:")
	tw = tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tfloor\tanswered by\tfront-door receipt\tupstream receipt (x_upstream_receipt)\tupstream is\tµJ/acc tok\tprovenance")
	serve := func(i int, floor uint8) (*client.Served, error) {
		s, err := front.client.Serve(ctx, client.ServeRequest{Prompt: fmt.Sprintf("fleet question %d at F%d", i, floor), MaxTokens: 16,
			FidelityFloor: &floor, JouleCeilingUJ: 1_000_000})
		if err != nil {
			return nil, err
		}
		r := s.Receipt.Receipt
		up := nodes[s.Backend]
		if r.UpstreamReceipt == nil || r.UpstreamSteward == nil || up == nil {
			return nil, fmt.Errorf("demo-fleet: serve %d: the front door's receipt names no upstream receipt", i)
		}
		// The node's chain head is the receipt it sealed for this serve
		// (one serve at a time): the front door's receipt must name it.
		h, err := up.client.Head(ctx)
		if err != nil {
			return nil, err
		}
		if *r.UpstreamSteward != up.steward || *r.UpstreamReceipt != h.Head {
			return nil, fmt.Errorf("demo-fleet: serve %d: the front door's receipt names %s by %s, %s's head is %s by %s",
				i, *r.UpstreamReceipt, *r.UpstreamSteward, up.name, h.Head, up.steward)
		}
		per := "-"
		if r.UJPerAcceptedToken != nil {
			per = fmt.Sprint(*r.UJPerAcceptedToken)
		}
		fmt.Fprintf(tw, "%d\tF%d\t%s\tseq %d\t%s…\t%s's receipt %d (its chain head)\t%s\t%s\n", i, floor, s.Backend, r.Sequence,
			(*r.UpstreamReceipt)[:16], up.name, h.Sequence, per, r.EnergyProvenance)
		return s, nil
	}
	floors := []uint8{1, 1, 2, 2, 3, 1}
	for i, f := range floors {
		if _, err := serve(i, f); err != nil {
			return err
		}
	}
	tw.Flush()

	// Stop node-a once its receipts are all in the stream; the front door
	// then passes it over.
	a := nodes["node-a"]
	st, err := a.caughtUp(ctx)
	if err != nil {
		return err
	}
	if err := a.shutdown(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nnode-a stopped (all %d of its receipts acknowledged by the stream, checkpoint of %d published)\n", st.Next, st.Checkpoint)
	fallback := false
	for try := 0; try < 3 && !fallback; try++ {
		floor := uint8(1)
		s, err := front.client.Serve(ctx, client.ServeRequest{Prompt: fmt.Sprintf("an F1 question while node-a is down (%d)", try),
			MaxTokens: 16, FidelityFloor: &floor, JouleCeilingUJ: 1_000_000})
		if err != nil {
			fmt.Fprintf(stdout, "F1 serve: failed at the front door, nothing sealed: %v\n", err)
			continue
		}
		fmt.Fprintf(stdout, "F1 serve: answered by %s; route: %s\n", s.Backend, s.Receipt.Receipt.Route)
		fallback = s.Backend != "node-a"
	}
	if !fallback {
		return errors.New("demo-fleet: the front door did not fall back from the stopped node-a")
	}
	table, err := front.client.Backends(ctx)
	if err != nil {
		return err
	}
	for _, row := range table {
		if row["name"] == "node-a" {
			fmt.Fprintf(stdout, "front door's backend node-a: %v\n", row["state"])
		}
	}
	fmt.Fprintln(stdout, "fallback: node-a passed over, node-b (the next cheapest that meets F1) answered")

	// Every running publisher caught up: the stream holds every receipt.
	fmt.Fprintln(stdout, "\nwaiting for every publisher to catch up:")
	for _, n := range all {
		if n.stopped {
			continue
		}
		st, err := n.caughtUp(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "  %s: %d receipts acknowledged, checkpoint of %d published\n", n.name, st.Next, st.Checkpoint)
	}

	// The fleet verifier, in process: the code of `meshctl fleet verify`.
	trustPath := filepath.Join(*dir, "fleet.trust")
	var trust strings.Builder
	var ids []string
	for _, n := range all {
		fmt.Fprintf(&trust, "%s # %s\n", n.steward, n.name)
		ids = append(ids, n.steward)
	}
	if err := os.WriteFile(trustPath, []byte(trust.String()), 0o644); err != nil {
		return err
	}
	rep, err := verifyFleetStream(ctx, natsURL, ids)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nfleet verify (agent/fleet verifier through a durable pull consumer, trust list "+trustPath+"):")
	tw = tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "node\tsteward\tverified\thead\tcheckpoint\tproblems")
	for _, s := range rep.Stewards {
		head := "-"
		if s.Count > 0 {
			head = fmt.Sprintf("seq %d %s", s.Count-1, s.Head)
		}
		first := "none"
		if p, ok := s.First(); ok {
			first = p.String()
		}
		fmt.Fprintf(tw, "%s\t%s…\t%d\t%s\t%d\t%s\n", names[s.Steward], s.Steward[:16], s.Count, head, s.Checkpoint, first)
	}
	tw.Flush()
	if !rep.OK() || len(rep.Stewards) != len(all) {
		return fmt.Errorf("demo-fleet: fleet verify found %d problem(s) over %d stewards", rep.ProblemCount(), len(rep.Stewards))
	}
	fmt.Fprintf(stdout, "fleet verify: every chain verified (%d stewards, %d messages)\n", len(rep.Stewards), rep.Messages)

	// The signed fleet report, by meshctl, and its verification.
	opPath := filepath.Join(*dir, "operator.key")
	op, err := operatorKey(opPath)
	if err != nil {
		return err
	}
	reportPath := filepath.Join(*dir, "fleet-report.json")
	var legend []string
	for _, n := range all {
		legend = append(legend, n.name+" "+n.steward[:12])
	}
	fmt.Fprintf(stdout, "\nmeshctl names boards by steward: %s\n", strings.Join(legend, ", "))
	fmt.Fprintf(stdout, "$ meshctl fleet report -key %s -trust %s -o %s\n", opPath, trustPath, reportPath)
	if err := runMeshctl(ctx, stdout, mc, "fleet", "report", "-url", natsURL, "-key", opPath, "-trust", trustPath, "-o", reportPath); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n$ meshctl bench verify -trust %s %s\n", op.ID(), reportPath)
	if err := runMeshctl(ctx, stdout, mc, "bench", "verify", "-trust", op.ID(), reportPath); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "fleet report verified: signed by the operator, every receipt under its own steward")
	fmt.Fprintf(stdout, "\n$ meshctl bench compare %s\n", reportPath)
	if err := runMeshctl(ctx, stdout, mc, "bench", "compare", reportPath); err != nil {
		return err
	}

	// Stop the front door first, so no serve is forwarded to a node that
	// is stopping.
	var errs []error
	for i := len(all) - 1; i >= 0; i-- {
		if err := all[i].shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\nevery node stopped cleanly: in-flight serves drained, logs synced, publishers stopped; nats-server stopping")
	return nil
}

// verifyFleetStream runs agent/fleet's verifier over the whole stream
// through a durable pull consumer, as `meshctl fleet verify -trust` does.
func verifyFleetStream(ctx context.Context, url string, trusted []string) (fleet.Report, error) {
	nc, err := fleet.Dial(ctx, fleet.ConnOptions{URL: url, Name: "meshd demo-fleet verify"}, nil, 100*time.Millisecond, time.Second)
	if err != nil {
		return fleet.Report{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fleet.Report{}, fmt.Errorf("jetstream: %w", err)
	}
	v := fleet.NewVerifier(fleet.VerifierConfig{Trusted: trusted})
	if err := fleet.Consume(ctx, js, v, fleet.ConsumeConfig{Durable: "meshd-demo-fleet"}); err != nil {
		return fleet.Report{}, fmt.Errorf("demo-fleet: fleet verify: %w", err)
	}
	return v.Report(), nil
}

// operatorKey loads the operator's key file, or writes a new one: the key
// that signs the fleet report (a steward key file, as meshctl keygen
// writes).
func operatorKey(path string) (*steward.Key, error) {
	if _, err := os.Stat(path); err == nil {
		return steward.LoadKeyFile(path)
	}
	k, err := steward.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	if err := steward.WriteKeyFile(path, k); err != nil {
		return nil, err
	}
	return k, nil
}

// findMeshctl is the meshctl that writes the report: the one named, else
// the one next to this meshd (make build puts both in bin/), else on PATH.
func findMeshctl(named string) (string, error) {
	if named != "" {
		if _, err := os.Stat(named); err != nil {
			return "", fmt.Errorf("%w: -meshctl: %v", errUsage, err)
		}
		return named, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "meshctl")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("meshctl")
	if err != nil {
		return "", errors.New("demo-fleet: no meshctl next to meshd or on PATH to write the fleet report (make build builds both; -meshctl names one)")
	}
	return p, nil
}

// runMeshctl runs meshctl with args and prints its output indented.
func runMeshctl(ctx context.Context, stdout io.Writer, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, demoWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Fprintln(stdout, "  "+line)
	}
	if err != nil {
		return fmt.Errorf("demo-fleet: meshctl %s: %w", args[0]+" "+args[1], err)
	}
	return nil
}
