package main

// The subcommands that talk to a running meshd over its HTTP API (TCP or
// the unix socket): serve, receipts tail, verify -remote, backends and
// meters. Every receipt they show has been verified by the client package
// under the steward key; tail and verify -remote also check the chain's
// links, so what is printed is what the daemon signed, in order.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"meshd/agent/api/client"
	"meshd/auth"
	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/wire"
)

// addrEnv names the environment variable that, when set, replaces
// client.DefaultAddr as -addr's default.
const addrEnv = "MESHD_ADDR"

// remotePage is the page size of a chain walk: the daemon's maximum.
const remotePage = 1000

// streamMaxTokens is what -stream asks for when -max is not given: the
// client's Completion always sends max_tokens, so it cannot leave the
// number to the daemon as /v1/serve does; 16 is the daemon's built-in
// default (OpenAI's).
const streamMaxTokens = 16

// tokenEnv and tokenFileEnv name where a token comes from when
// -token-file is not given: the token itself, or a file holding it.
const (
	tokenEnv     = "MESHD_TOKEN"
	tokenFileEnv = "MESHD_TOKEN_FILE"
)

// remoteFlags are -addr and the credentials presented to the daemon.
type remoteFlags struct {
	addr, tokenFile, ca, pin, cert, key *string
}

// addrFlag registers -addr and the credential flags on fs.
func addrFlag(fs *flag.FlagSet) *remoteFlags {
	def := client.DefaultAddr
	if v := os.Getenv(addrEnv); v != "" {
		def = v
	}
	return &remoteFlags{
		addr:      fs.String("addr", def, "meshd's address: host:port, http://host:port, https://host:port, unix:/run/meshd/meshd.sock or a socket path (default from $"+addrEnv+" when set)"),
		tokenFile: fs.String("token-file", os.Getenv(tokenFileEnv), "file holding the bearer token to present (default $"+tokenFileEnv+"; $"+tokenEnv+" holds the token itself)"),
		ca:        fs.String("ca", "", "PEM CA that the daemon's certificate must chain to (https)"),
		pin:       fs.String("pin", "", "SHA-256 of the daemon's certificate, pinned instead of a CA (https)"),
		cert:      fs.String("cert", "", "client certificate (PEM) to present (https; with -key)"),
		key:       fs.String("key", "", "the client certificate's key (PEM)"),
	}
}

// dial returns a client for -addr presenting the credentials.
func (r *remoteFlags) dial() (*client.Client, error) { return r.dialAt(*r.addr) }

// dialAt returns a client for addr, naming the flag at fault.
func (r *remoteFlags) dialAt(addr string) (*client.Client, error) {
	cr := client.Credentials{Token: os.Getenv(tokenEnv),
		TLS: auth.ClientFiles{CAFile: *r.ca, ServerSHA256: *r.pin, CertFile: *r.cert, KeyFile: *r.key}}
	if *r.tokenFile != "" {
		tok, err := auth.ReadSecret(*r.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: -token-file: %v", errUsage, err)
		}
		cr.Token = tok
	}
	c, err := client.NewWith(addr, cr)
	if err != nil {
		return nil, fmt.Errorf("%w: -addr: %v", errUsage, err)
	}
	return c, nil
}

// isTerminal says whether w is a character device (a terminal): progress
// lines and screen redraws are for people, a pipe gets plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ---- serve ----

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := addrFlag(fs)
	floor := fs.Int("floor", -1, "fidelity floor 0..4 (default: the daemon's)")
	ceiling := fs.Uint64("ceiling", 0, "joule ceiling in µJ (0: the daemon's default)")
	maxTokens := fs.Uint("max", 0, "most tokens to generate (0: the daemon's default)")
	grantPath := fs.String("grant", "", "a grant file (binary or hex COSE envelope) to pay with")
	stream := fs.Bool("stream", false, "print the answer as it is generated (through /v1/completions)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl serve [-addr A] [-floor N] [-ceiling UJ] [-max N] [-grant FILE] [-stream] PROMPT...")
		fmt.Fprintln(stderr, "prints the answer on stdout and the verified receipt on stderr; a refusal exits 1 naming its reason")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	prompt := strings.Join(fs.Args(), " ")
	if prompt == "" {
		fs.Usage()
		return fmt.Errorf("%w: serve needs a prompt", errUsage)
	}
	if *floor > 4 {
		return fmt.Errorf("%w: -floor %d: want 0..4", errUsage, *floor)
	}
	if *maxTokens > 1<<31 {
		return fmt.Errorf("%w: -max %d: too many", errUsage, *maxTokens)
	}
	var fl *uint8
	if *floor >= 0 {
		v := uint8(*floor)
		fl = &v
	}
	var grantEnv []byte
	if *grantPath != "" {
		var err error
		if grantEnv, err = readEnvelope(*grantPath); err != nil {
			return fmt.Errorf("-grant: %w", err)
		}
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}

	var s *client.Served
	if *stream {
		mt := uint32(*maxTokens)
		if mt == 0 {
			mt = streamMaxTokens
		}
		wrote := false
		s, err = c.Completion(ctx, prompt, nil, mt, client.Extra{FidelityFloor: fl, JouleCeilingUJ: *ceiling, Grant: grantEnv},
			func(piece string) {
				wrote = true
				fmt.Fprint(stdout, piece)
			})
		if wrote {
			// End the partial answer's line even on failure, so the
			// error does not run on from it.
			fmt.Fprintln(stdout)
		}
	} else {
		s, err = c.Serve(ctx, client.ServeRequest{Prompt: prompt, MaxTokens: uint32(*maxTokens), FidelityFloor: fl,
			JouleCeilingUJ: *ceiling, Grant: grantEnv})
		if err == nil {
			fmt.Fprintln(stdout, s.Text)
		}
	}
	if err != nil {
		return client.Refusal("serve", err)
	}
	printServed(stderr, s)
	if s.SettlingError != "" {
		// The answer stands and its receipt is sealed; only the grant's
		// debit is pending, and the daemon settles it from the receipt.
		fmt.Fprintf(stderr, "warning: the grant ledger did not settle this serve yet: %s\n", s.SettlingError)
	}
	return nil
}

// servedFidelity is the backend's fidelity and the floor, as the receipt
// states them: the fidelity is the served candidate's in the route
// evidence (fidelity_met is only whether it met the floor, 0 or 1). A
// receipt without candidates says only whether the floor was met.
func servedFidelity(r *steward.Receipt) string {
	floor := wire.Fidelity(r.FidelityFloor)
	cs, err := r.Candidates()
	if err == nil {
		for _, c := range cs {
			if c.Backend == r.Backend {
				return fmt.Sprintf("%v, floor %v", c.Fidelity, floor)
			}
		}
	}
	if r.FidelityMet == 1 {
		return fmt.Sprintf("meets floor %v", floor)
	}
	return fmt.Sprintf("below floor %v", floor)
}

// printServed writes the receipt summary of one serve.
func printServed(w io.Writer, s *client.Served) {
	r := s.Receipt.Receipt
	fmt.Fprintln(w, "receipt")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  sequence\t%d\n", r.Sequence)
	fmt.Fprintf(tw, "  id\t%s\n", s.Receipt.ID)
	fmt.Fprintf(tw, "  backend\t%s (%s)\n", r.Backend, servedFidelity(r))
	fmt.Fprintf(tw, "  tokens\tin %d, out %d, accepted %d\n", r.TokensIn, r.TokensOut, r.TokensAccepted)
	fmt.Fprintf(tw, "  µJ/accepted token\t%s\n", optU64(r.UJPerAcceptedToken))
	fmt.Fprintf(tw, "  provenance\t%s (meter %s)\n", r.EnergyProvenance, r.MeterName())
	bound := "- (no meter bounds an estimate)"
	if r.ErrorUJ != nil {
		bound = fmt.Sprintf("± %d µJ", *r.ErrorUJ)
	}
	fmt.Fprintf(tw, "  error bound\t%s\n", bound)
	fmt.Fprintf(tw, "  route\t%s\n", r.Route)
	tw.Flush()
}

func optU64(p *uint64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatUint(*p, 10)
}

// ---- receipts tail ----

func cmdReceipts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && cli.IsHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: meshctl receipts tail [-addr A] [-f] [-n N] [-interval 1s]   (meshctl receipts tail -h: its flags)")
		return nil
	}
	if len(args) == 0 || args[0] != "tail" {
		fmt.Fprintln(stderr, "usage: meshctl receipts tail [-addr A] [-f] [-n N] [-interval 1s]")
		if len(args) == 0 {
			return fmt.Errorf("%w: receipts needs a subcommand (tail)", errUsage)
		}
		return fmt.Errorf("%w: unknown receipts subcommand %q (tail)", errUsage, args[0])
	}
	fs := flag.NewFlagSet("receipts tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := addrFlag(fs)
	follow := fs.Bool("f", false, "keep printing new receipts as they are sealed, until interrupted")
	n := fs.Int("n", 10, "how many of the newest receipts to print first")
	interval := fs.Duration("interval", time.Second, "with -f, how often to ask for new receipts")
	if err := fs.Parse(args[1:]); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: receipts tail takes no arguments", errUsage)
	}
	if *n < 0 || *interval <= 0 {
		return fmt.Errorf("%w: -n must be >= 0 and -interval positive", errUsage)
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}
	head, err := c.Head(ctx)
	if err != nil {
		return fmt.Errorf("reading the chain head: %w", err)
	}
	t := &tailer{c: c, w: stdout, after: int64(head.Receipts) - int64(*n) - 1}
	if t.after < -1 {
		t.after = -1
	}
	t.header()
	// The first -n: up to what the head counted, so a busy daemon does
	// not make the first screen longer than asked.
	for t.after+1 < int64(head.Receipts) {
		got, err := t.page(ctx, min(remotePage, int(int64(head.Receipts)-t.after-1)))
		if err != nil {
			return err
		}
		if got == 0 {
			break
		}
	}
	if !*follow {
		return nil
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		// Drain what is there before waiting again, so a burst is printed
		// at once rather than a page per tick.
		for {
			got, err := t.page(ctx, remotePage)
			if ctx.Err() != nil {
				return nil // Ctrl-C: the normal end of -f
			}
			if err != nil {
				return err
			}
			if got < remotePage {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tailer prints receipts in order, checking each new one's link to the
// one before it.
type tailer struct {
	c     *client.Client
	w     io.Writer
	after int64
	prev  *steward.Opened
}

const tailFormat = "%8s  %-23s  %-14s  %7s  %10s  %-10s  %8s\n"

func (t *tailer) header() {
	fmt.Fprintf(t.w, tailFormat, "SEQ", "SEALED", "BACKEND", "TOKENS", "µJ/ACC.TOK", "PROVENANCE", "± µJ")
}

// page fetches and prints up to limit receipts after t.after, returning
// how many came.
func (t *tailer) page(ctx context.Context, limit int) (int, error) {
	rs, next, err := t.c.Receipts(ctx, t.after, limit)
	if err != nil {
		return 0, fmt.Errorf("receipts after %d: %w", t.after, err)
	}
	for _, o := range rs {
		if t.prev != nil {
			if err := steward.CheckLink(t.prev, o); err != nil {
				return 0, fmt.Errorf("receipt %d does not follow receipt %d in the chain: %w", o.Receipt.Sequence, t.prev.Receipt.Sequence, err)
			}
		} else if want := uint64(t.after + 1); o.Receipt.Sequence != want {
			return 0, fmt.Errorf("asked for receipts from %d, got receipt %d first", want, o.Receipt.Sequence)
		}
		t.prev = o
		r := o.Receipt
		fmt.Fprintf(t.w, tailFormat, strconv.FormatUint(r.Sequence, 10), sealedAt(r), clip(r.Backend, 14),
			fmt.Sprintf("%d/%d", r.TokensAccepted, r.TokensOut), optU64(r.UJPerAcceptedToken), r.EnergyProvenance, optU64(r.ErrorUJ))
	}
	if len(rs) > 0 {
		t.after = next
	}
	return len(rs), nil
}

// sealedAt is when r was sealed, in local time, to the millisecond.
func sealedAt(r *steward.Receipt) string {
	if r.SealedUnixMs == nil {
		return "-"
	}
	return time.UnixMilli(int64(*r.SealedUnixMs)).Format("2006-01-02 15:04:05.000")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// ---- verify -remote ----

// cmdVerifyAny is `meshctl verify`: the local log verifier, or with
// -remote the chain of a running daemon.
func cmdVerifyAny(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break // flags end here; -remote is only a flag before them
		}
		switch strings.TrimLeft(a, "-") {
		case "remote", "remote=true", "remote=1":
			return cmdVerifyRemote(ctx, args, stdout, stderr)
		}
	}
	return cmdVerify(ctx, args, stdout, stderr)
}

// remoteVerifyFlags defines verify -remote's flags on fs: here, and in
// plain verify's usage, so `meshctl verify -h` lists them too.
func remoteVerifyFlags(fs *flag.FlagSet) (addr *remoteFlags, trust *string) {
	fs.Bool("remote", true, "verify the chain of a running meshd instead of a file")
	addr = addrFlag(fs)
	trust = fs.String("trust", "", "the steward key to verify under (64 hex); default: the key the daemon names, which proves only consistency")
	return addr, trust
}

func cmdVerifyRemote(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify -remote", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr, trust := remoteVerifyFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl verify -remote [-addr A] [-trust HEXKEY]")
		fmt.Fprintln(stderr, "exit status: 0 verified, 1 a receipt, link or the head does not check out (or meshd cannot be read), 2 usage")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("%w: verify -remote takes no path", errUsage)
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}
	head, err := c.Head(ctx)
	if err != nil {
		return fmt.Errorf("reading the chain head: %w", err)
	}
	if *trust != "" {
		k, err := steward.ParsePublicKey(*trust)
		if err != nil {
			return fmt.Errorf("%w: -trust: %v", errUsage, err)
		}
		c.Trust(k)
		fmt.Fprintf(stdout, "trusting steward %s (-trust)\n", *trust)
	} else {
		k, err := steward.ParsePublicKey(head.Steward)
		if err != nil {
			return damaged(fmt.Errorf("the chain head names steward %q: %w", head.Steward, err))
		}
		c.Trust(k)
		// Without a key known beforehand this proves the chain is whole
		// and consistent, not whose it is: say so.
		fmt.Fprintf(stdout, "trusting the key the daemon names: %s (pin it with -trust)\n", head.Steward)
	}
	rep, err := walkChain(ctx, c, head.Receipts, progressTo(stdout))
	if err != nil {
		return err
	}
	switch {
	case head.Receipts == 0:
		if head.Head != "" {
			return damaged(fmt.Errorf("the chain is empty but its head names %s", head.Head))
		}
	case rep.last.ID.String() != head.Head:
		return damaged(fmt.Errorf("sequence %d is %s, but /v1/chain/head names %s", rep.last.Receipt.Sequence, rep.last.ID, head.Head))
	case rep.last.Receipt.Sequence != head.Sequence:
		return damaged(fmt.Errorf("the chain ends at sequence %d, but /v1/chain/head says %d", rep.last.Receipt.Sequence, head.Sequence))
	}
	h := head.Head
	if h == "" {
		h = "(empty chain)"
	}
	fmt.Fprintf(stdout, "chain OK: %d receipts, every signature and link verified, head %s\n", rep.count, h)
	return nil
}

// damaged marks a verification failure with verify's exit status for it.
func damaged(err error) error { return &cli.ExitError{Code: exitDamaged, Err: err} }

type walked struct {
	count uint64
	last  *steward.Opened
}

// walkChain fetches receipts 0..count-1 page by page and checks each one's
// signature (in the client), sequence and link to the one before.
// Receipts sealed after the head was read are not the chain being checked
// and are left alone.
func walkChain(ctx context.Context, c *client.Client, count uint64, progress func(done, of uint64)) (*walked, error) {
	w := &walked{}
	after := int64(-1)
	for w.count < count {
		limit := int(min(uint64(remotePage), count-w.count))
		rs, next, err := c.Receipts(ctx, after, limit)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, damaged(locate(ctx, c, after, limit, err))
		}
		if len(rs) == 0 {
			return nil, damaged(fmt.Errorf("sequence %d: missing: the head counts %d receipts, the log gave %d", w.count, count, w.count))
		}
		for _, o := range rs {
			r := o.Receipt
			if r.Sequence != w.count {
				return nil, damaged(fmt.Errorf("sequence %d: expected here, got sequence %d", w.count, r.Sequence))
			}
			if w.last == nil {
				if r.Prev != nil {
					return nil, damaged(fmt.Errorf("sequence 0: the first receipt names a previous one (%s)", *r.Prev))
				}
			} else if err := steward.CheckLink(w.last, o); err != nil {
				return nil, damaged(fmt.Errorf("sequence %d does not follow sequence %d: %w", r.Sequence, w.last.Receipt.Sequence, err))
			}
			w.last = o
			w.count++
			if w.count == count {
				break
			}
		}
		after = next
		progress(w.count, count)
	}
	progress(count, 0)
	return w, nil
}

// locate finds which receipt of a page that failed to verify is at fault,
// by asking for the page's receipts one at a time: the client names no
// sequence when a signature fails, and an operator needs to know which.
func locate(ctx context.Context, c *client.Client, after int64, limit int, pageErr error) error {
	for i := range limit {
		seq := after + 1 + int64(i)
		rs, _, err := c.Receipts(ctx, seq-1, 1)
		if err != nil {
			return fmt.Errorf("sequence %d: %w", seq, err)
		}
		if len(rs) == 0 {
			break
		}
	}
	return fmt.Errorf("receipts after sequence %d: %w", after, pageErr)
}

// progressTo returns a progress callback: a line redrawn in place on a
// terminal, nothing on a pipe (where it would be noise in a log). A call
// with of == 0 ends it.
func progressTo(w io.Writer) func(done, of uint64) {
	if !isTerminal(w) {
		return func(uint64, uint64) {}
	}
	shown := false
	return func(done, of uint64) {
		if of == 0 {
			if shown {
				fmt.Fprint(w, "\r\033[K")
			}
			return
		}
		shown = true
		fmt.Fprintf(w, "\rverifying: %d/%d receipts (%d%%)", done, of, done*100/of)
	}
}

// ---- backends and meters ----

func cmdBackends(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := addrFlag(fs)
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: backends takes no arguments", errUsage)
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}
	rows, err := c.Backends(ctx)
	if err != nil {
		return fmt.Errorf("listing backends: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tFIDELITY\tCONFIGURED µJ/TOK\tROUTING µJ/TOK\tSOURCE\tSPAN\tSTATE\tRESTARTS")
	for _, r := range rows {
		fid := cell(r, "fidelity")
		if fid != "-" {
			fid = "F" + fid
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r, "name"), cell(r, "kind"), fid,
			cell(r, "configured_uj_per_token"), cell(r, "routing_uj_per_token"), cell(r, "cost_source"),
			cell(r, "span"), cell(r, "state"), cell(r, "restarts"))
	}
	return tw.Flush()
}

func cmdMeters(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := addrFlag(fs)
	watch := fs.Bool("watch", false, "refresh until interrupted")
	interval := fs.Duration("interval", time.Second, "with -watch, how often to refresh")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: meters takes no arguments", errUsage)
	}
	if *interval <= 0 {
		return fmt.Errorf("%w: -interval must be positive", errUsage)
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}
	term := isTerminal(stdout)
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for first := true; ; first = false {
		rows, err := c.Meters(ctx)
		if err != nil {
			if *watch && ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listing meters: %w", err)
		}
		switch {
		case *watch && term:
			// Redraw in place: home, clear, table.
			fmt.Fprint(stdout, "\033[H\033[2J")
			fmt.Fprintf(stdout, "meshd meters at %s (Ctrl-C to stop)\n\n", time.Now().Format("15:04:05"))
		case *watch:
			// A pipe gets one table after another, each stamped.
			if !first {
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "# %s\n", time.Now().Format(time.RFC3339))
		}
		if err := meterTable(stdout, rows); err != nil {
			return err
		}
		if !*watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func meterTable(w io.Writer, rows client.Table) error {
	sort.SliceStable(rows, func(i, j int) bool { return cell(rows[i], "name") < cell(rows[j], "name") })
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "METER\tDRIVER\tKIND\tPROVENANCE\tLIVE W\tHEALTHY\tREADINGS\tINVALID\tSTALLS")
	for _, r := range rows {
		watts := "-"
		if uw, ok := r["power_uw"].(float64); ok {
			watts = strconv.FormatFloat(uw/1e6, 'f', 3, 64)
		}
		healthy := cell(r, "healthy")
		if h, ok := r["health"].(string); ok && h != "" {
			healthy += " (" + h + ")"
		}
		// Newer daemons call it best_provenance: the best a window of
		// this meter can be sealed as.
		prov := cell(r, "best_provenance")
		if prov == "-" {
			prov = cell(r, "provenance")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(r, "name"), cell(r, "driver"), cell(r, "kind"),
			prov, watts, healthy, cell(r, "readings"), cell(r, "invalid"), cell(r, "stalls"))
	}
	return tw.Flush()
}

// cell formats one field of a table row as the daemon sent it: JSON
// numbers in full (no exponent), lists joined, absent as "-".
func cell(r map[string]any, key string) string {
	switch v := r[key].(type) {
	case nil:
		return "-"
	case string:
		if v == "" {
			return "-"
		}
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = fmt.Sprint(x)
		}
		return strings.Join(s, "+")
	default:
		return fmt.Sprint(v)
	}
}
