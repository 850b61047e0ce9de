package main

// meshctl corpus: the RAG service contract from the operator's and the
// caller's side. hash, keygen, sign, verify (from a file) and verify-hit
// work on files alone; describe, query and verify -corpus ask a running
// meshd, in CBOR as the contract speaks it.
//
// What each command prints says what it checked and what it did not: a
// corpus counts as signed by P only when the caller called P itself (the
// contract's check 1, which no file and no address can show) and checks 2
// to 5 hold (rag.VerifyCorpus); signed_by is a display label; and a hit
// that verifies has text matching its provenance, which is not corpus
// membership.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"

	"meshd/agent/api/client"
	"meshd/agent/fleet"
	"meshd/cmd/internal/cli"
	"meshd/rag"
	"meshd/rag/binding"
	"meshd/steward"
)

// Limits on the files the corpus commands read.
const (
	// maxDescriptionFile fits a description of thousands of repos and a
	// base64 pq_hybrid signature (about 10 KiB).
	maxDescriptionFile = 16 << 20
	// maxCorpusKeyFile fits a pq_hybrid seed in hex (32 bytes and a DER
	// RSA-4096 private key: under 5 KiB).
	maxCorpusKeyFile = 64 << 10
	// maxHitFile fits a saved query answer of 100 hits of large chunks.
	maxHitFile = 64 << 20
)

// queryContentLines is how many lines of each hit's content query prints.
const queryContentLines = 3

// corpusCommand is one meshctl corpus subcommand.
type corpusCommand struct {
	name, synopsis, summary string
	run                     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// corpusCommands are meshctl corpus's subcommands, in usage order.
func corpusCommands() []corpusCommand {
	return []corpusCommand{
		{"hash", "DESCRIPTION.json", "print the corpus hash of a description (model, dim, repos)", cmdCorpusHash},
		{"keygen", "[-profile P] -o KEYFILE", "write a new operator key's hex seed (0600, never overwritten); print its node id", cmdCorpusKeygen},
		{"sign", "-key KEYFILE [-profile P] DESCRIPTION.json", "print the description signed: corpus_hash recomputed, signature, signed_by", cmdCorpusSign},
		{"verify", "-provider NODEID [-profile P] [-require-signed] (DESCRIPTION.json | [-addr A] -corpus ORG/NAME)", "the contract's checks 2-5 on a description: signed by P, unsigned, or the refusal", cmdCorpusVerify},
		{"describe", "[-addr A] -corpus ORG/NAME", "a running meshd's describe_corpus, its corpus hash recomputed", cmdCorpusDescribe},
		{"query", "([-addr A] | -nats [-url U] [-corpus-hash H]) -corpus ORG/NAME [-steward KEY] [-k N] [-json] [-floor N] [-ceiling UJ] [-grant FILE] TEXT...", "answer_query: the reply bound to its provider, hits checked against their provenance, the receipt verified", cmdCorpusQuery},
		{"discover", "[-url U] [-corpus ORG/NAME] [-wait D] [-want N]", "the providers that announce corpora on NATS (their announcements: hints, not evidence)", cmdCorpusDiscover},
		{"verify-hit", "HIT.json", "check a saved hit's text against its provenance (not corpus membership)", cmdCorpusVerifyHit},
	}
}

func corpusUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: meshctl corpus <command> [flags] [args]")
	for _, c := range corpusCommands() {
		fmt.Fprintf(w, "  %s %s\n      %s\n", c.name, c.synopsis, c.summary)
	}
	fmt.Fprintln(w, "profiles (-profile): pq_pure (default), pq_hybrid; -addr defaults to $"+addrEnv+" or "+client.DefaultAddr)
}

// cmdCorpus dispatches meshctl corpus's subcommands.
func cmdCorpus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "help" || args[0] == "--help" {
		corpusUsage(stderr)
		if len(args) == 0 {
			return fmt.Errorf("%w: corpus needs a command", errUsage)
		}
		return nil
	}
	for _, c := range corpusCommands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	corpusUsage(stderr)
	return fmt.Errorf("%w: unknown corpus command %q", errUsage, args[0])
}

// newCorpusFlags is a flag set for "corpus NAME" whose usage prints the
// command's synopsis.
func newCorpusFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("corpus "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		for _, c := range corpusCommands() {
			if c.name == name {
				fmt.Fprintf(stderr, "usage: meshctl corpus %s %s\n%s\n", c.name, c.synopsis, c.summary)
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

// parseInterspersed parses flags given before or after the positional
// arguments (DESCRIPTION.json -provider P as well as the other way round)
// and returns the positional ones. "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, flagError(err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// corpusProfileFlag registers -profile.
func corpusProfileFlag(fs *flag.FlagSet) *string {
	return fs.String("profile", rag.ProfilePQPure, "crypto profile: pq_pure or pq_hybrid (the realm's)")
}

// checkCorpusProfile refuses an unknown profile as a usage error.
func checkCorpusProfile(p string) error {
	if rag.Alg(p) == "" {
		return fmt.Errorf("%w: -profile %q: want %s or %s", errUsage, p, rag.ProfilePQPure, rag.ProfilePQHybrid)
	}
	return nil
}

// ---- descriptions ----

// readDescription reads a description file (JSON, or the CBOR wire form)
// with rag.ParseDescription. With allowNoHash, a JSON description without
// corpus_hash (the contract's vector has none) is read as if it had an
// empty one; every other rule of ParseDescription (duplicate keys, types,
// a 40-hex commit, ...) still applies. hadHash says whether the file named
// a corpus_hash.
func readDescription(path string, allowNoHash bool) (d rag.Description, hadHash bool, err error) {
	data, err := cli.ReadFileLimit(path, maxDescriptionFile)
	if err != nil {
		return rag.Description{}, false, err
	}
	d, err = rag.ParseDescription(data)
	if err == nil {
		return d, true, nil
	}
	if allowNoHash {
		if patched, ok := withEmptyHash(data); ok {
			d, err = rag.ParseDescription(patched)
			if err == nil {
				return d, false, nil
			}
		}
	}
	return rag.Description{}, false, descriptionRefused(path, err)
}

// withEmptyHash is data, a JSON object without corpus_hash, with an empty
// one added. It is only attempted on JSON rag's own parser accepts
// (rag.Canonical: no duplicate keys, valid UTF-8, RFC 8259), so re-encoding
// with encoding/json (json.Number keeps every number literal as written)
// changes nothing else ParseDescription judges.
func withEmptyHash(data []byte) ([]byte, bool) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, false
	}
	if _, err := rag.Canonical(data); err != nil {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, false
	}
	if _, has := m["corpus_hash"]; has {
		return nil, false
	}
	m["corpus_hash"] = ""
	out, err := json.Marshal(m)
	return out, err == nil
}

// refusalText is a *rag.Refusal's reason (with the signed object's reason
// for a signature refusal, as the contract writes {signature, Reason}) and
// its detail.
func refusalText(err error) (reason, detail string, ok bool) {
	var r *rag.Refusal
	if !errors.As(err, &r) {
		return "", "", false
	}
	reason = r.Reason()
	if inner := r.SignatureReason(); inner != "" {
		reason += " (" + inner + ")"
	}
	if errs := r.Unwrap(); len(errs) > 1 {
		detail = errs[1].Error()
	}
	return reason, detail, true
}

// descriptionRefused names a file's refusal by its contract reason.
func descriptionRefused(path string, err error) error {
	reason, detail, ok := refusalText(err)
	if !ok {
		return fmt.Errorf("%s: %w", path, err)
	}
	msg := path + ": " + reason
	if detail != "" {
		msg += ": " + detail
	}
	return &refusedError{msg: msg, err: err}
}

// refusedError says what was refused once, rather than again in the
// wrapped error's own words.
type refusedError struct {
	msg string
	err error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.err }

// descriptionJSON is a description as sign prints it: only what the hash
// and the signature cover, then the hash, the signature and the label.
type descriptionJSON struct {
	Model      string     `json:"model"`
	Dim        int        `json:"dim"`
	Repos      []repoJSON `json:"repos"`
	CorpusHash string     `json:"corpus_hash"`
	Signature  string     `json:"signature,omitempty"`
	SignedBy   string     `json:"signed_by,omitempty"`
}

type repoJSON struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
}

func toDescriptionJSON(d rag.Description) descriptionJSON {
	out := descriptionJSON{Model: d.Model, Dim: d.Dim, Repos: []repoJSON{}, CorpusHash: d.CorpusHash, SignedBy: d.SignedBy}
	for _, r := range d.Repos {
		out.Repos = append(out.Repos, repoJSON{ID: r.ID, URL: r.URL, Branch: r.Branch, Commit: r.Commit})
	}
	if d.Signature != nil {
		out.Signature = base64.StdEncoding.EncodeToString(d.Signature)
	}
	return out
}

// writeCorpusJSON prints v indented, without HTML escaping (a URL stays as
// written).
func writeCorpusJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// extraKeys lists a map's keys in order.
func extraKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// displayText makes text from a provider or a file safe to print: control
// characters (which could move a terminal's cursor, retitle its window or
// hide what follows) and bidirectional overrides (which could reorder what
// is shown) are printed escaped, as Go quotes them; everything else as it
// is. A tab stays a tab.
func displayText(s string) string {
	if !strings.ContainsFunc(s, unsafeForDisplay) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafeForDisplay(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func unsafeForDisplay(r rune) bool {
	return r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r))
}

// ---- hash ----

func cmdCorpusHash(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("hash", stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: corpus hash takes one description file", errUsage)
	}
	d, hadHash, err := readDescription(pos[0], true)
	if err != nil {
		return err
	}
	h := d.Hash()
	fmt.Fprintln(stdout, h)
	if hadHash && d.CorpusHash != h {
		fmt.Fprintf(stderr, "note: %s claims corpus_hash %q; its model, dim and repos hash to %s (verify would refuse it: %s)\n",
			pos[0], d.CorpusHash, h, rag.ReasonCorpusHashMismatch)
	}
	return nil
}

// ---- keygen ----

func cmdCorpusKeygen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("keygen", stderr)
	profile := corpusProfileFlag(fs)
	out := fs.String("o", "", "key file to write (required; refuses to overwrite)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: corpus keygen takes only flags (-o FILE), got %q", errUsage, pos)
	}
	if *out == "" {
		fs.Usage()
		return fmt.Errorf("%w: corpus keygen needs -o KEYFILE", errUsage)
	}
	if err := checkCorpusProfile(*profile); err != nil {
		return err
	}
	if _, err := os.Lstat(*out); err == nil {
		// Said before the work (an RSA-4096 half takes seconds); the link
		// in writeNewKeyFile is what guarantees it.
		return fmt.Errorf("write key %s: refusing to overwrite an existing file", *out)
	}
	k, err := rag.GenerateKey(*profile)
	if err != nil {
		return err
	}
	if err := writeNewKeyFile(*out, []byte(hex.EncodeToString(k.Seed())+"\n")); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%s key, hex seed, mode 0600): name it as a [[corpus]] signing_key with signing_profile = %q\n",
		*out, *profile, *profile)
	fmt.Fprintln(stderr, "its node id, on stdout, is what a signed description's signed_by names and what callers pass to verify -provider")
	fmt.Fprintln(stdout, k.NodeID())
	return nil
}

// writeNewKeyFile writes data to a new file at path, mode 0600, never
// replacing an existing one: a temporary file is written and synced, then
// linked into place (link, unlike rename, fails on an existing name), so
// the path holds either nothing or the whole key.
func writeNewKeyFile(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*") // O_EXCL, 0600
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("write key %s: remove temporary %s: %w", path, tmp, rmErr)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write key %s: refusing to overwrite an existing file", path)
		}
		return fmt.Errorf("write key %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write key %s: sync directory %s: %w", path, dir, err)
	}
	return nil
}

// readCorpusKey loads an operator key file (the hex seed keygen writes, as
// the node's signing_key reads it).
func readCorpusKey(path, profile string, stderr io.Writer) (*rag.PrivateKey, error) {
	data, err := cli.ReadFileLimit(path, maxCorpusKeyFile)
	if err != nil {
		return nil, fmt.Errorf("-key: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(stderr, "warning: key file %s is readable or writable by others (mode %04o): anyone who reads it can sign as this operator\n",
			path, st.Mode().Perm())
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("-key %s: want the key's hex seed (as meshctl corpus keygen writes it): %w", path, err)
	}
	k, err := rag.NewKeyFromSeed(profile, seed)
	if err != nil {
		hint := ""
		switch {
		case profile == rag.ProfilePQPure && len(seed) > 32:
			hint = " (a longer seed is a pq_hybrid key: give -profile pq_hybrid)"
		case profile == rag.ProfilePQHybrid && len(seed) == 32:
			hint = " (a 32-byte seed is a pq_pure key: give -profile pq_pure)"
		}
		return nil, fmt.Errorf("-key %s: %w%s", path, err, hint)
	}
	return k, nil
}

// ---- sign ----

func cmdCorpusSign(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("sign", stderr)
	keyPath := fs.String("key", "", "the operator's key file (hex seed; required)")
	profile := corpusProfileFlag(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *keyPath == "" {
		fs.Usage()
		return fmt.Errorf("%w: corpus sign needs -key KEYFILE and one description file", errUsage)
	}
	if err := checkCorpusProfile(*profile); err != nil {
		return err
	}
	k, err := readCorpusKey(*keyPath, *profile, stderr)
	if err != nil {
		return err
	}
	d, hadHash, err := readDescription(pos[0], true)
	if err != nil {
		return err
	}
	// The hash is recomputed, never taken from the file: a signature over
	// a claimed hash would vouch for whatever the claim names.
	h := d.Hash()
	if hadHash && d.CorpusHash != h {
		fmt.Fprintf(stderr, "note: %s claimed corpus_hash %q; signed its recomputed hash %s instead\n", pos[0], d.CorpusHash, h)
	}
	if len(d.Extra) > 0 {
		fmt.Fprintf(stderr, "note: left out %s: keys no hash or signature covers\n", strings.Join(extraKeys(d.Extra), ", "))
	}
	switch {
	case d.Signature != nil:
		fmt.Fprintf(stderr, "note: replaced the signature the file carried (signed_by %q)\n", d.SignedBy)
	case d.SignedBy != "":
		fmt.Fprintf(stderr, "note: replaced signed_by %q, which the file carried without a signature\n", d.SignedBy)
	}
	obj, err := rag.Sign(*profile, k, h)
	if err != nil {
		return err
	}
	signed := rag.Description{Model: d.Model, Dim: d.Dim, Repos: d.Repos, CorpusHash: h, Signature: obj, SignedBy: k.NodeID()}
	// What a caller will run, before anything is printed.
	if res, err := rag.VerifyCorpus(signed, k.NodeID(), *profile); err != nil || res != rag.SignedBy(k.NodeID()) {
		return fmt.Errorf("the signed description does not verify as signed by %s: %v (%v)", k.NodeID(), err, res)
	}
	if err := writeCorpusJSON(stdout, toDescriptionJSON(signed)); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "signed corpus_hash %s as %s (%s). signed_by is a display label: a caller checks the signature with\n"+
		"  meshctl corpus verify -provider %s -profile %s ...\n", h, k.NodeID(), *profile, k.NodeID(), *profile)
	return nil
}

// ---- verify ----

func cmdCorpusVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("verify", stderr)
	provider := fs.String("provider", "", "the node id (64 hex) of the provider P you called; required")
	profile := corpusProfileFlag(fs)
	requireSigned := fs.Bool("require-signed", false, "refuse an unsigned corpus (exit 1)")
	addr := addrFlag(fs)
	ref := fs.String("corpus", "", "ORG/NAME: fetch the description from a running meshd (describe_corpus) instead of a file")
	pin := stewardPinFlag(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	addrGiven := false
	fs.Visit(func(f *flag.Flag) { addrGiven = addrGiven || f.Name == "addr" })
	switch {
	case *ref == "" && len(pos) != 1, *ref != "" && len(pos) != 0:
		fs.Usage()
		return fmt.Errorf("%w: corpus verify takes one description file, or -corpus ORG/NAME", errUsage)
	case *ref == "" && addrGiven:
		return fmt.Errorf("%w: -addr needs -corpus ORG/NAME (the description is read from the file otherwise)", errUsage)
	case *ref == "" && *pin != "":
		return fmt.Errorf("%w: -steward needs -corpus ORG/NAME (a file carries no reply to bind)", errUsage)
	}
	p := strings.ToLower(*provider)
	if len(p) != 64 {
		return fmt.Errorf("%w: -provider %q: want the 64-hex node id of the provider you called", errUsage, *provider)
	}
	if _, err := hex.DecodeString(p); err != nil {
		return fmt.Errorf("%w: -provider %q: want the 64-hex node id of the provider you called", errUsage, *provider)
	}
	if err := checkCorpusProfile(*profile); err != nil {
		return err
	}

	var d rag.Description
	var source, check1, check1Checked string
	if *ref == "" {
		source = pos[0]
		if d, _, err = readDescription(source, false); err != nil {
			if reason, _, ok := refusalText(err); ok {
				fmt.Fprintln(stdout, "refused: "+reason)
			}
			return err
		}
		check1 = fmt.Sprintf("It was read from the file %s: nothing says who served it, and anyone can copy a\n"+
			"    signed description. It counts as signed by P only if you got it from P yourself\n"+
			"    (macula:call/6 with #{provider => P}, P taken from macula:providers/3).", source)
	} else {
		org, name, err := client.CorpusRef(*ref)
		if err != nil {
			return fmt.Errorf("%w: -corpus: %v", errUsage, err)
		}
		c, err := addr.dial()
		if err != nil {
			return err
		}
		source = fmt.Sprintf("%s/%s at %s", org, name, *addr.addr)
		pinned, err := pinSteward(c, *pin)
		if err != nil {
			return err
		}
		var bound client.Binding
		d, bound, err = c.Describe(ctx, org, name)
		if err != nil {
			if reason, _, ok := refusalText(err); ok {
				fmt.Fprintln(stdout, "refused: "+reason)
				return descriptionRefused(source, err)
			}
			return client.Refusal(client.ProcDescribeCorpus, err)
		}
		if bound.Err != nil {
			reason := string(binding.ReasonOf(bound.Err))
			fmt.Fprintln(stdout, "refused: "+reason)
			return fmt.Errorf("%s: the reply is not bound to steward %x: %w", source, []byte(bound.Key), bound.Err)
		}
		if pinned {
			check1Checked = fmt.Sprintf("the reply is signed by steward %x, the key you pinned (-steward), over the request\n"+
				"    meshctl sent: it came from that node. That node's operator key is P only as far as checks 2-5 show.", []byte(bound.Key))
		} else {
			check1 = fmt.Sprintf("It was fetched from the meshd at %s, an address you gave: the reply is signed by\n"+
				"    steward %x, the key that address named itself, so meshctl cannot tell that the node\n"+
				"    answering there is the one you meant. Pin its key with -steward for check 1.", *addr.addr, []byte(bound.Key))
		}
	}

	res, err := rag.VerifyCorpus(d, p, *profile)
	if err != nil {
		fmt.Fprintln(stdout, "refused: "+corpusReason(err))
		return descriptionRefused(source, err)
	}
	w := stdout
	h := d.CorpusHash
	if !res.Signed() {
		fmt.Fprintln(w, "unsigned")
		fmt.Fprintf(w, "  checked (the contract's check 2): model, dim and repos hash to the described corpus_hash %s\n", h)
		fmt.Fprintln(w, "  no signature: no operator vouches for this corpus")
		if d.SignedBy != "" {
			fmt.Fprintf(w, "  signed_by %q is present without a signature: a display label, ignored\n", d.SignedBy)
		}
		if *requireSigned {
			return fmt.Errorf("%s: unsigned, and -require-signed asks for a signature by %s", source, p)
		}
		return nil
	}
	fmt.Fprintf(w, "signed by %s\n", res.Signer())
	fmt.Fprintf(w, "  checked (the contract's checks 2-5, profile %s):\n", *profile)
	fmt.Fprintf(w, "    2. model, dim and repos hash to the described corpus_hash %s\n", h)
	fmt.Fprintf(w, "    3. the signature verifies under %q and %s (alg %s)\n", rag.Label, *profile, rag.Alg(*profile))
	fmt.Fprintln(w, "    4. the key it verified with derives node id P, the -provider you gave")
	fmt.Fprintln(w, "    5. it signs that recomputed corpus_hash")
	fmt.Fprintln(w, "  covered: model, dim and each repo's id, url, branch and commit; nothing else, and not when it was signed")
	switch {
	case d.SignedBy == "":
		fmt.Fprintln(w, "  signed_by: absent (a display label; never read)")
	case strings.EqualFold(d.SignedBy, p):
		fmt.Fprintln(w, "  signed_by: names P, but it is a display label and was not read; the key decided")
	default:
		fmt.Fprintf(w, "  signed_by: names %q, not P: a display label, never evidence, and not read; the key decided\n", d.SignedBy)
	}
	if len(d.Extra) > 0 {
		fmt.Fprintf(w, "  not vouched for: %s\n", displayText(strings.Join(extraKeys(d.Extra), ", ")))
	}
	if check1Checked != "" {
		fmt.Fprintf(w, "  checked (check 1): %s\n", check1Checked)
	} else {
		fmt.Fprintf(w, "  not checked (check 1, the caller's): that P itself served this description.\n    %s\n", check1)
	}
	return nil
}

// corpusReason is a refusal's contract reason, or the error itself.
func corpusReason(err error) string {
	if reason, _, ok := refusalText(err); ok {
		return reason
	}
	return err.Error()
}

// stewardPinFlag is -steward: the provider's steward key, pinned.
func stewardPinFlag(fs *flag.FlagSet) *string {
	return fs.String("steward", "", "the provider's steward key (64 hex), pinned: every reply must be signed by it over the request meshctl sent (the contract's check 1); default: the key the address names at /v1/chain/head")
}

// pinSteward pins -steward on c; it reports whether a key was pinned.
func pinSteward(c *client.Client, key string) (bool, error) {
	if key == "" {
		return false, nil
	}
	k, err := steward.ParsePublicKey(key)
	if err != nil {
		return false, fmt.Errorf("%w: -steward %q: %v", errUsage, key, err)
	}
	c.Trust(k)
	return true, nil
}

// bindingText says what a reply's binding shows (check 1), and the
// problem when it is not bound.
func bindingText(b client.Binding, pinned bool, source string) (text, problem string) {
	if b.Err != nil {
		return fmt.Sprintf("NOT BOUND to steward %x: %s", []byte(b.Key), binding.ReasonOf(b.Err)),
			fmt.Sprintf("the reply is not bound to steward %x (%s): %v", []byte(b.Key), binding.ReasonOf(b.Err), b.Err)
	}
	if pinned {
		return fmt.Sprintf("checked (check 1): signed by steward %x, the key you pinned (-steward), over the request meshctl sent and the reply it got", []byte(b.Key)), ""
	}
	return fmt.Sprintf("signed by steward %x over the request meshctl sent and the reply it got; that key is the one\n"+
		"    %s named itself: pin the provider's key with -steward for check 1", []byte(b.Key), source), ""
}

// addrSource is how a reply's key is described when it came from -addr.
func addrSource(addr string) string {
	return fmt.Sprintf("the meshd at %s, an address you gave,", addr)
}

// natsProvider connects to NATS, discovers the providers of corpus and
// chooses the first to answer among those whose steward key is pin (when
// pinned) and that announce hash (when given).
func natsProvider(ctx context.Context, conn *fleet.ConnOptions, corpus, pin, hash string, wait time.Duration) (*nats.Conn, client.Provider, error) {
	var pinKey []byte
	if pin != "" {
		k, err := client.ParseStewardHex(pin)
		if err != nil {
			return nil, client.Provider{}, fmt.Errorf("%w: -steward %q: %v", errUsage, pin, err)
		}
		pinKey = k
	}
	nc, err := fleet.Dial(ctx, *conn, slog.New(slog.DiscardHandler), 100*time.Millisecond, time.Second)
	if err != nil {
		return nil, client.Provider{}, err
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	found, err := client.Discover(dctx, nc, func(p client.Provider) bool {
		return p.Org+"/"+p.Name == corpus && (pinKey == nil || bytes.Equal(p.Steward, pinKey)) && (hash == "" || p.CorpusHash == hash)
	}, 1)
	if err != nil {
		nc.Close()
		return nil, client.Provider{}, err
	}
	if len(found) == 1 {
		return nc, found[0], nil
	}
	nc.Close()
	what := fmt.Sprintf("no provider of %s answered on NATS within %v", corpus, wait)
	if pin != "" {
		what += " with steward " + pin
	}
	if hash != "" {
		what += " announcing corpus hash " + hash
	}
	return nil, client.Provider{}, errors.New(what)
}

// ---- discover ----

func cmdCorpusDiscover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("discover", stderr)
	conn := connFlags(fs)
	ref := fs.String("corpus", "", "ORG/NAME: only providers of this corpus")
	wait := fs.Duration("wait", 2*time.Second, "how long to wait for providers to answer")
	want := fs.Int("want", 0, "stop once this many providers answered (0: wait the whole -wait)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *want < 0 {
		fs.Usage()
		return fmt.Errorf("%w: corpus discover takes flags only", errUsage)
	}
	if *ref != "" {
		if _, _, err := client.CorpusRef(*ref); err != nil {
			return fmt.Errorf("%w: -corpus: %v", errUsage, err)
		}
	}
	conn.Password = os.Getenv("NATS_PASSWORD")
	nc, err := fleet.Dial(ctx, *conn, slog.New(slog.DiscardHandler), 100*time.Millisecond, time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	dctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	var match func(client.Provider) bool
	if *ref != "" {
		match = client.ForCorpus(*ref)
	}
	found, err := client.Discover(dctx, nc, match, *want)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "steward\tcorpus\tcorpus_hash (announced)\tmodel\tdim")
	for _, p := range found {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%d\n", p.StewardID(), displayText(p.Org), displayText(p.Name), displayText(p.CorpusHash), displayText(p.Model), p.Dim)
	}
	tw.Flush()
	fmt.Fprintf(stderr, "%d provider(s). An announcement is a hint: query one with corpus query -nats -steward KEY, which checks\n"+
		"that each reply is signed by that key and that the corpus hash recomputes.\n", len(found))
	if len(found) == 0 {
		return fmt.Errorf("no provider answered within %v", *wait)
	}
	return nil
}

// ---- describe ----

func cmdCorpusDescribe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("describe", stderr)
	addr := addrFlag(fs)
	ref := fs.String("corpus", "", "ORG/NAME of the corpus (required)")
	pin := stewardPinFlag(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *ref == "" {
		fs.Usage()
		return fmt.Errorf("%w: corpus describe takes -corpus ORG/NAME and no arguments", errUsage)
	}
	org, name, err := client.CorpusRef(*ref)
	if err != nil {
		return fmt.Errorf("%w: -corpus: %v", errUsage, err)
	}
	c, err := addr.dial()
	if err != nil {
		return err
	}
	pinned, err := pinSteward(c, *pin)
	if err != nil {
		return err
	}
	d, bound, err := c.Describe(ctx, org, name)
	if err != nil {
		if _, _, ok := refusalText(err); ok {
			return descriptionRefused(fmt.Sprintf("%s/%s at %s", org, name, *addr.addr), err)
		}
		return client.Refusal(client.ProcDescribeCorpus, err)
	}
	bindText, _ := bindingText(bound, pinned, addrSource(*addr.addr))
	recomputed := d.Hash()
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "corpus\t%s/%s at %s\n", org, name, *addr.addr)
	fmt.Fprintf(tw, "model\t%s\n", displayText(d.Model))
	fmt.Fprintf(tw, "dim\t%d\n", d.Dim)
	fmt.Fprintf(tw, "repos\t%d\n", len(d.Repos))
	for _, r := range d.Repos {
		fmt.Fprintf(tw, "  %s\t%s  branch %s  commit %s\n", displayText(r.ID), displayText(r.URL), displayText(r.Branch), r.Commit)
	}
	fmt.Fprintf(tw, "corpus_hash\t%s\n", displayText(d.CorpusHash))
	match := recomputed == d.CorpusHash
	if match {
		fmt.Fprintf(tw, "\tmatches: recomputed from model, dim and repos\n")
	} else {
		fmt.Fprintf(tw, "\tDOES NOT MATCH: model, dim and repos hash to %s\n", recomputed)
	}
	if d.Signature == nil {
		fmt.Fprintf(tw, "signature\tnone: unsigned\n")
	} else {
		fmt.Fprintf(tw, "signature\t%d bytes, not checked here: meshctl corpus verify -provider P -addr %s -corpus %s/%s\n",
			len(d.Signature), *addr.addr, org, name)
		fmt.Fprintf(tw, "signed_by\t%q (a display label, never evidence)\n", d.SignedBy)
	}
	if len(d.Extra) > 0 {
		fmt.Fprintf(tw, "other keys\t%s (not vouched for)\n", displayText(strings.Join(extraKeys(d.Extra), ", ")))
	}
	fmt.Fprintf(tw, "reply\t%s\n", bindText)
	tw.Flush()
	var errs []error
	if bound.Err != nil {
		errs = append(errs, fmt.Errorf("%s/%s at %s: the reply is not bound to steward %x: %w", org, name, *addr.addr, []byte(bound.Key), bound.Err))
	}
	if !match {
		errs = append(errs, fmt.Errorf("%w: %s/%s at %s claims corpus_hash %s, its model, dim and repos hash to %s",
			rag.ErrCorpusHashMismatch, org, name, *addr.addr, d.CorpusHash, recomputed))
	}
	return errors.Join(errs...)
}

// ---- query ----

func cmdCorpusQuery(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("query", stderr)
	addr := addrFlag(fs)
	ref := fs.String("corpus", "", "ORG/NAME of the corpus (required)")
	k := fs.Int("k", 0, "how many hits (top_k, 1..100; default the contract's 10)")
	asJSON := fs.Bool("json", false, "print the answer as JSON (hits in the daemon's shape, which verify-hit reads) instead of text")
	floor := fs.Int("floor", -1, "fidelity floor 0..4 (default: the daemon's)")
	ceiling := fs.Uint64("ceiling", 0, "joule ceiling in µJ (0: the daemon's default)")
	grantPath := fs.String("grant", "", "a grant file (binary or hex COSE envelope) to pay with")
	pin := stewardPinFlag(fs)
	viaNATS := fs.Bool("nats", false, "find the corpus's providers on NATS (see corpus discover) and query one, instead of -addr")
	conn := connFlags(fs)
	wantHash := fs.String("corpus-hash", "", "with -nats: only a provider announcing this corpus hash (the answer's hash is then checked against it)")
	wait := fs.Duration("wait", 2*time.Second, "with -nats: how long to wait for providers to answer the discovery")
	// The query text may hold words starting with '-': flags come first.
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	text := strings.Join(fs.Args(), " ")
	if text == "" || *ref == "" {
		fs.Usage()
		return fmt.Errorf("%w: corpus query needs -corpus ORG/NAME and a query text", errUsage)
	}
	if *k != 0 && (*k < 1 || *k > 100) {
		return fmt.Errorf("%w: -k %d: want 1..100", errUsage, *k)
	}
	if *floor > 4 {
		return fmt.Errorf("%w: -floor %d: want 0..4", errUsage, *floor)
	}
	if !*viaNATS && *wantHash != "" {
		return fmt.Errorf("%w: -corpus-hash needs -nats (over -addr the corpus is the one that address serves)", errUsage)
	}
	org, name, err := client.CorpusRef(*ref)
	if err != nil {
		return fmt.Errorf("%w: -corpus: %v", errUsage, err)
	}
	q := client.Query{Text: &text, TopK: *k, JouleCeilingUJ: *ceiling}
	if *floor >= 0 {
		v := uint8(*floor)
		q.FidelityFloor = &v
	}
	if *grantPath != "" {
		if q.Grant, err = readEnvelope(*grantPath); err != nil {
			return fmt.Errorf("-grant: %w", err)
		}
	}
	var c *client.Client
	var pinned bool
	where, source := *addr.addr, addrSource(*addr.addr)
	if *viaNATS {
		conn.Password = os.Getenv("NATS_PASSWORD")
		nc, p, err := natsProvider(ctx, conn, org+"/"+name, *pin, *wantHash, *wait)
		if err != nil {
			return err
		}
		defer nc.Close()
		c = client.NewRAGOverNATS(nc, p)
		where = fmt.Sprintf("provider %s on NATS (%s)", p.StewardID(), p.Subject)
		source = "the provider's own announcement on NATS"
		fmt.Fprintf(stderr, "corpus %s/%s: querying %s\n", org, name, where)
		pinned = *pin != ""
	} else {
		if c, err = addr.dial(); err != nil {
			return err
		}
		if pinned, err = pinSteward(c, *pin); err != nil {
			return err
		}
	}
	d, dBound, err := c.Describe(ctx, org, name)
	if err != nil {
		if _, _, ok := refusalText(err); ok {
			return descriptionRefused(fmt.Sprintf("%s/%s at %s", org, name, where), err)
		}
		return client.Refusal(client.ProcDescribeCorpus, err)
	}
	a, err := c.Answer(ctx, org, name, q)
	if err != nil {
		return client.Refusal(client.ProcAnswerQuery, err)
	}

	// Every check; a failure is printed where it belongs and counted.
	var problems []string
	bindText, bindProblem := bindingText(a.Binding, pinned, source)
	if bindProblem != "" {
		problems = append(problems, "answer_query: "+bindProblem)
	}
	if _, p := bindingText(dBound, pinned, source); p != "" {
		problems = append(problems, "describe_corpus: "+p)
	}
	if *wantHash != "" && d.CorpusHash != *wantHash {
		problems = append(problems, fmt.Sprintf("describe_corpus gives corpus_hash %s, -corpus-hash asks for %s", d.CorpusHash, *wantHash))
	}
	recomputed := d.Hash()
	if recomputed != d.CorpusHash {
		problems = append(problems, fmt.Sprintf("describe_corpus claims corpus_hash %s, its model, dim and repos hash to %s (%s)",
			d.CorpusHash, recomputed, rag.ReasonCorpusHashMismatch))
	}
	if a.CorpusHash != d.CorpusHash {
		problems = append(problems, fmt.Sprintf("the answer names corpus_hash %q, describe_corpus gives %s", a.CorpusHash, d.CorpusHash))
	}
	hitProblems := make([]string, len(a.Hits))
	described := map[string]bool{}
	for _, r := range d.Repos {
		described[r.ID] = true
	}
	for i, h := range a.Hits {
		if err := rag.VerifyHit(h); err != nil {
			hitProblems[i] = hitReason(err) + ": " + err.Error()
		} else if h.Provenance.Kind == rag.KindCorpus && !described[h.Provenance.RepoID] {
			hitProblems[i] = fmt.Sprintf("repo_id %q is not one of the described repos", h.Provenance.RepoID)
		}
		if hitProblems[i] != "" {
			problems = append(problems, fmt.Sprintf("hit %d (%s): %s", i+1, h.ChunkID, hitProblems[i]))
		}
	}
	r := a.Receipt.Receipt
	recipeNames := strings.HasPrefix(r.Recipe, "rag/v1:corpus="+d.CorpusHash+":")
	if !recipeNames {
		problems = append(problems, fmt.Sprintf("the receipt's recipe %q does not name corpus_hash %s", r.Recipe, d.CorpusHash))
	}

	if *asJSON {
		hits := make([]any, len(a.Hits))
		for i, h := range a.Hits {
			hits[i] = client.WireHit(h)
		}
		if err := writeCorpusJSON(stdout, map[string]any{
			"corpus": org + "/" + name, "corpus_hash": a.CorpusHash, "hits": hits,
			"receipt": map[string]any{"id": a.Receipt.ID.String(), "sequence": r.Sequence,
				"envelope": base64.StdEncoding.EncodeToString(a.Envelope)},
		}); err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(stderr, "problem: "+p)
		}
	} else {
		w := stdout
		fmt.Fprintf(w, "corpus %s/%s  corpus_hash %s\n", org, name, displayText(a.CorpusHash))
		if a.CorpusHash == d.CorpusHash && recomputed == d.CorpusHash {
			fmt.Fprintln(w, "  the answer names describe_corpus's hash, which its model, dim and repos hash to")
		}
		for i, h := range a.Hits {
			pv := h.Provenance
			where := pv.Path
			if pv.StartLine != 0 {
				where += fmt.Sprintf(":%d-%d", pv.StartLine, pv.EndLine)
			}
			if pv.Commit != "" {
				where += " @" + pv.Commit
			}
			score := "-"
			if h.Score != nil {
				score = fmt.Sprintf("%.4f", *h.Score)
			}
			fmt.Fprintf(w, "%d. %s  %s\n", i+1, score, displayText(where))
			check := "content matches its content_sha256"
			if hitProblems[i] != "" {
				check = "DOES NOT VERIFY: " + hitProblems[i]
			}
			fmt.Fprintf(w, "   chunk %s  %s\n", displayText(h.ChunkID), displayText(check))
			printHitContent(w, h.Content)
		}
		ok := 0
		for _, p := range hitProblems {
			if p == "" {
				ok++
			}
		}
		fmt.Fprintf(w, "%d of %d hits verify (their text matches their provenance; that is not corpus membership:\n"+
			"  path and commit are the provider's word)\n", ok, len(a.Hits))
	}
	printRAGReceipt(stderr, a, recipeNames)
	fmt.Fprintf(stderr, "reply: %s\n", bindText)
	if len(problems) > 0 {
		if !*asJSON {
			for _, p := range problems {
				fmt.Fprintln(stderr, "problem: "+p)
			}
		}
		return fmt.Errorf("corpus query %s/%s: %d problem(s): %s", org, name, len(problems), problems[0])
	}
	return nil
}

// printHitContent prints the first lines of a hit's text, indented.
func printHitContent(w io.Writer, content string) {
	lines := strings.Split(strings.TrimRight(content, "\n"), "\n")
	for i, l := range lines {
		if i == queryContentLines {
			fmt.Fprintf(w, "   | … (%d more lines)\n", len(lines)-i)
			break
		}
		fmt.Fprintf(w, "   | %s\n", displayText(l))
	}
}

// hitReason is VerifyHit's refusal under the contract's name, or the
// error itself when the hit is not even the contract's shape.
func hitReason(err error) string {
	switch {
	case errors.Is(err, rag.ErrContentMismatch):
		return "content_mismatch"
	case errors.Is(err, rag.ErrMalformedHit):
		return "malformed_provenance"
	}
	return err.Error()
}

// printRAGReceipt writes the summary of an answer's verified receipt.
func printRAGReceipt(w io.Writer, a *client.Answer, recipeNamesCorpus bool) {
	r := a.Receipt.Receipt
	fmt.Fprintln(w, "receipt (verified under the steward key)")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  sequence\t%d\n", r.Sequence)
	fmt.Fprintf(tw, "  id\t%s\n", a.Receipt.ID)
	fmt.Fprintf(tw, "  backend\t%s (%s)\n", r.Backend, servedFidelity(r))
	names := "names the corpus hash"
	if !recipeNamesCorpus {
		names = "DOES NOT name the corpus hash"
	}
	fmt.Fprintf(tw, "  recipe\t%s (%s)\n", displayText(r.Recipe), names)
	fmt.Fprintf(tw, "  tokens\tin %d, out %d (hits), accepted %d\n", r.TokensIn, r.TokensOut, r.TokensAccepted)
	fmt.Fprintf(tw, "  µJ\testimated %d, measured %s, per accepted token %s\n", r.EstimatedUJ, optU64(r.MeasuredUJ), optU64(r.UJPerAcceptedToken))
	fmt.Fprintf(tw, "  provenance\t%s (meter %s)\n", r.EnergyProvenance, r.MeterName())
	fmt.Fprintf(tw, "  route\t%s\n", displayText(r.Route))
	tw.Flush()
}

// ---- verify-hit ----

func cmdCorpusVerifyHit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCorpusFlags("verify-hit", stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("%w: corpus verify-hit takes one hit file", errUsage)
	}
	path := pos[0]
	data, err := cli.ReadFileLimit(path, maxHitFile)
	if err != nil {
		return err
	}
	// rag's parser first: duplicate keys ("content" twice, one of them
	// hashed) and anything not plain JSON are refused, not resolved.
	if _, err := rag.Canonical(data); err != nil {
		return fmt.Errorf("%s: not a hit in JSON: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%s: not a hit in JSON: %w", path, err)
	}
	// One hit, a list of hits, or a saved answer ({"hits": [...]}).
	var raw []any
	switch x := v.(type) {
	case map[string]any:
		if hs, ok := x["hits"].([]any); ok {
			raw = hs
		} else {
			raw = []any{x}
		}
	case []any:
		raw = x
	default:
		return fmt.Errorf("%s: want a hit (a JSON object), a list of hits or a saved answer", path)
	}
	if len(raw) == 0 {
		return fmt.Errorf("%s: holds no hits", path)
	}
	failed := 0
	var first error
	for i, rh := range raw {
		label := fmt.Sprintf("hit %d", i+1)
		if len(raw) == 1 {
			label = "hit"
		}
		m, ok := rh.(map[string]any)
		if !ok {
			failed++
			fmt.Fprintf(stdout, "%s: refused: not a JSON object\n", label)
			first = keepFirst(first, fmt.Errorf("%s: %s is not a JSON object", path, label))
			continue
		}
		h, err := client.ParseHit(m)
		if err == nil {
			err = rag.VerifyHit(h)
		}
		if h.ChunkID != "" {
			label += " " + h.ChunkID
		}
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "%s: refused: %s\n", displayText(label), displayText(hitReason(err)))
			first = keepFirst(first, fmt.Errorf("%s: %s: %w", path, label, err))
			continue
		}
		pv := h.Provenance
		fmt.Fprintf(stdout, "%s: ok: its content hashes to content_sha256 %s (%s %s", displayText(label), pv.ContentSHA256, pv.Kind, displayText(pv.Path))
		if pv.Commit != "" {
			fmt.Fprintf(stdout, " @%s", pv.Commit)
		}
		fmt.Fprintln(stdout, ")")
	}
	if failed < len(raw) {
		fmt.Fprintln(stdout, "ok is not corpus membership: it does not check that repo_id is one of the described repos,\n"+
			"that the path lies inside it, or that the commit is the pinned one (only that the text is what the provenance hashes)")
	}
	if failed > 0 {
		if len(raw) > 1 {
			return fmt.Errorf("%d of %d hits refused; the first: %w", failed, len(raw), first)
		}
		return first
	}
	return nil
}

// keepFirst keeps the first error.
func keepFirst(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
