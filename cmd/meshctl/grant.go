package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/wire"
)

// cmdGrant issues and inspects JCP grants (PROFILE.md §14).
func cmdGrant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const use = "grant issue|show|verify [flags] (see meshctl grant <sub> -h)"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, use)
	}
	if cli.IsHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: meshctl "+use)
		return nil
	}
	now := time.Now()
	switch args[0] {
	case "issue":
		return grantIssue(args[1:], now, stdout, stderr)
	case "show":
		return grantShow(args[1:], stdout, stderr)
	case "verify":
		return grantVerify(args[1:], now, stdout, stderr)
	}
	return fmt.Errorf("%w: unknown grant subcommand %q; %s", errUsage, args[0], use)
}

func grantIssue(args []string, now time.Time, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("grant issue", flag.ContinueOnError)
	flags.SetOutput(stderr)
	keyPath := flags.String("key", "", "issuer key file (written by meshctl keygen)")
	var audience keyList
	flags.Var(&audience, "audience", "steward id (64 hex) that may honour the grant (repeatable; at least one); each keeps its own ledger and may spend the whole budget")
	holder := flags.String("holder", "", "who the grant is for (recorded, not authenticated)")
	resource := flags.String("resource", "", `request id (64 hex) the grant covers, or "*" for any request`)
	budget := flags.Uint64("budget", 0, "joule budget in µJ")
	action := flags.String("action", grant.ActionInfer, "permitted action")
	notBefore := flags.String("not-before", "now", "start of validity: RFC 3339, a duration from now (-5m, 1h), or now")
	expires := flags.String("expires", "", "end of validity (exclusive): RFC 3339 or a duration from now (24h)")
	out := flags.String("o", "", "file to write the grant envelope to (refuses to overwrite)")
	if err := flags.Parse(args); err != nil {
		return flagError(err)
	}
	switch {
	case flags.NArg() != 0:
		return fmt.Errorf("%w: grant issue takes only flags, got %q", errUsage, flags.Args())
	case *keyPath == "" || len(audience) == 0 || *holder == "" || *resource == "" || *budget == 0 || *expires == "" || *out == "":
		return fmt.Errorf("%w: grant issue needs -key, -audience, -holder, -resource, -budget (> 0), -expires and -o", errUsage)
	}
	k, err := steward.LoadKeyFile(*keyPath)
	if err != nil {
		return err
	}
	g := grant.Grant{Audience: audience, Holder: *holder, Action: *action, BudgetUJ: *budget}
	if *resource == grant.AnyResource {
		g.AnyRequest = true
	} else if g.Request, err = wire.ParseContentID(*resource); err != nil {
		return fmt.Errorf("%w: -resource: %v", errUsage, err)
	}
	if g.NotBefore, err = parseWhen(*notBefore, now); err != nil {
		return fmt.Errorf("%w: -not-before: %v", errUsage, err)
	}
	if g.Expires, err = parseWhen(*expires, now); err != nil {
		return fmt.Errorf("%w: -expires: %v", errUsage, err)
	}
	s, err := grant.Issue(k, g, rand.Reader)
	if err != nil {
		return err
	}
	if err := writeNew(*out, s.Envelope); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\ngrant_id %s\n", *out, s.ID)
	printGrant(stdout, &s.Grant)
	return nil
}

func grantShow(args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("grant show", flag.ContinueOnError)
	flags.SetOutput(stderr)
	if err := flags.Parse(args); err != nil {
		return flagError(err)
	}
	if flags.NArg() != 1 {
		return fmt.Errorf("%w: grant show <file>", errUsage)
	}
	env, err := readEnvelope(flags.Arg(0))
	if err != nil {
		return err
	}
	u, err := grant.Inspect(env)
	if err != nil {
		return fmt.Errorf("%s: %w", flags.Arg(0), err)
	}
	fmt.Fprintf(stdout, "grant_id %s\n", u.ID)
	printGrant(stdout, &u.Grant)
	fmt.Fprintln(stdout, "signature  valid for the issuer key above, which is NOT trusted by this command: anyone can sign with a key of their own;\n"+
		"           `grant verify -issuer KEY -steward ID` says whether a steward trusting KEY would honour it")
	return nil
}

func grantVerify(args []string, now time.Time, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("grant verify", flag.ContinueOnError)
	flags.SetOutput(stderr)
	var issuers keyList
	flags.Var(&issuers, "issuer", "trusted issuer public key, 64 hex (repeatable; at least one)")
	self := flags.String("steward", "", "steward id (64 hex) that would honour the grant: it must be in the grant's audience")
	request := flags.String("request", "", "request id (64 hex) the grant must cover for infer")
	at := flags.String("at", "now", "judge validity at this time: RFC 3339, a duration from now, or now")
	if err := flags.Parse(args); err != nil {
		return flagError(err)
	}
	if flags.NArg() != 1 || len(issuers) == 0 {
		return fmt.Errorf("%w: grant verify -issuer KEY [-issuer KEY]... [-steward ID] [-request ID] [-at TIME] <file>", errUsage)
	}
	when, err := parseWhen(*at, now)
	if err != nil {
		return fmt.Errorf("%w: -at: %v", errUsage, err)
	}
	var stewardID ed25519.PublicKey
	if *self != "" {
		if stewardID, err = steward.ParsePublicKey(*self); err != nil {
			return fmt.Errorf("%w: -steward: %v", errUsage, err)
		}
	}
	env, err := readEnvelope(flags.Arg(0))
	if err != nil {
		return err
	}
	s, err := grant.Open(env, func(pub ed25519.PublicKey) error {
		for _, k := range issuers {
			if k.Equal(pub) {
				return nil
			}
		}
		return fmt.Errorf("%w: %x", grant.ErrUnknownIssuer, []byte(pub))
	})
	if err != nil {
		return fmt.Errorf("%s: %w", flags.Arg(0), err)
	}
	// The same order as a steward's checks (PROFILE.md §14): audience
	// before the clock.
	where := "the stewards of its audience (no -steward given, so not checked)"
	if stewardID != nil {
		if err := s.Addresses(stewardID); err != nil {
			return fmt.Errorf("%s: grant %s: %w", flags.Arg(0), s.ID, err)
		}
		where = "steward " + hex.EncodeToString(stewardID)
	}
	if err := s.ValidAt(when); err != nil {
		return fmt.Errorf("%s: grant %s: %w", flags.Arg(0), s.ID, err)
	}
	scope := "any request"
	if *request != "" {
		id, err := wire.ParseContentID(*request)
		if err != nil {
			return fmt.Errorf("%w: -request: %v", errUsage, err)
		}
		if err := s.Permits(grant.ActionInfer, id); err != nil {
			return fmt.Errorf("%s: grant %s: %w", flags.Arg(0), s.ID, err)
		}
		scope = "request " + id.String()
	} else if s.Action != grant.ActionInfer {
		return fmt.Errorf("%s: grant %s: %w: grant permits %q, a serve needs %q", flags.Arg(0), s.ID, grant.ErrWrongAction, s.Action, grant.ActionInfer)
	}
	fmt.Fprintf(stdout, "grant OK: %s permits infer on %s by %s at %s, budget %d µJ (remaining budget is the steward's ledger's to say)\n",
		s.ID, scope, where, when.UTC().Format(time.RFC3339), s.BudgetUJ)
	return nil
}

func printGrant(w io.Writer, g *grant.Grant) {
	fmt.Fprintf(w, "issuer     %x\n", []byte(g.Issuer))
	for i, k := range g.Audience {
		label := "audience"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "%-10s %x\n", label, []byte(k))
	}
	fmt.Fprintf(w, "holder     %q\naction     %s\nresource   %s\nbudget_uj  %d\nnot_before %s\nexpires    %s\nnonce      %x\n",
		g.Holder, g.Action, g.Resource(), g.BudgetUJ,
		g.NotBefore.UTC().Format(time.RFC3339Nano), g.Expires.UTC().Format(time.RFC3339Nano), g.Nonce[:])
}

// parseWhen reads an absolute RFC 3339 time, a signed Go duration from
// now, or "now".
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time, a duration (24h, -5m) nor now", s)
	}
	return now.Add(d), nil
}

// maxGrantFile bounds a grant file: the largest envelope, as hex, with
// room for the whitespace around it.
const maxGrantFile = 2*grant.MaxEnvelope + 256

// readEnvelope reads a grant file, binary or hex.
func readEnvelope(path string) ([]byte, error) {
	b, err := cli.ReadFileLimit(path, maxGrantFile)
	if err != nil {
		return nil, err
	}
	if h, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(h) > 0 {
		return h, nil
	}
	return b, nil
}

func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write %s: refusing to overwrite an existing file", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// keyList collects a repeated flag of public keys (issuers, stewards).
type keyList []ed25519.PublicKey

func (l *keyList) String() string {
	s := make([]string, len(*l))
	for i, k := range *l {
		s[i] = hex.EncodeToString(k)
	}
	return strings.Join(s, ",")
}

func (l *keyList) Set(v string) error {
	k, err := steward.ParsePublicKey(v)
	if err != nil {
		return err
	}
	*l = append(*l, k)
	return nil
}
