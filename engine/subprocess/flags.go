//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// helpTimeout bounds the --help probe; a runner that cannot print its usage
// in this long is not one to manage.
const helpTimeout = 30 * time.Second

// readHelp runs "runner --help" and returns what it printed. A non-zero exit
// is tolerated when there is output: some flag parsers exit 2 after usage.
func readHelp(ctx context.Context, runner string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, helpTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, runner, "--help")
	cmd.Env = childEnviron(env)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return "", fmt.Errorf("runner %s --help: %w", runner, ctx.Err())
	}
	if out.Len() == 0 {
		if err == nil {
			err = fmt.Errorf("printed nothing")
		}
		return "", fmt.Errorf("runner %s --help: %w", runner, err)
	}
	return out.String(), nil
}

// helpText is a runner's usage text, queried for the flags it lists.
type helpText string

// has reports whether the usage lists the flag, spelled with one dash or
// two (Go's flag package prints one, llama.cpp two).
func (h helpText) has(flag string) bool {
	name := strings.TrimLeft(flag, "-")
	re := regexp.MustCompile(`(?m)(^|[\s,])--?` + regexp.QuoteMeta(name) + `([\s,=]|$)`)
	return re.MatchString(string(h))
}

// buildArgs assembles the runner's command line except --port, which is
// chosen per start.
func buildArgs(c Config, help helpText) ([]string, error) {
	args := []string{"-m", c.Model, "--host", "127.0.0.1"}
	need := func(flag string, vals ...string) error {
		if !help.has(flag) {
			return fmt.Errorf("runner %s does not list %s, which the configuration needs", c.Runner, flag)
		}
		args = append(args, flag)
		args = append(args, vals...)
		return nil
	}
	if c.ContextSize > 0 {
		if err := need("-c", strconv.Itoa(c.ContextSize)); err != nil {
			return nil, err
		}
	}
	if c.Threads > 0 {
		if err := need("-t", strconv.Itoa(c.Threads)); err != nil {
			return nil, err
		}
	}
	// One slot: serves run one at a time, which is what one metered
	// window per serve assumes (recent llama-server builds default to 4).
	if help.has("-np") {
		args = append(args, "-np", "1")
	}
	if c.Embedding {
		// llama-server spells it --embedding (and --embeddings); mesh-gguf
		// takes --embedding.
		flag := "--embedding"
		if !help.has(flag) && help.has("--embeddings") {
			flag = "--embeddings"
		}
		if err := need(flag); err != nil {
			return nil, err
		}
	}
	if c.NoWarmup {
		if err := need("--no-warmup"); err != nil {
			return nil, err
		}
	}
	if c.DraftModel != "" {
		if err := need("-md", c.DraftModel); err != nil {
			return nil, err
		}
		if help.has("--spec-type") && strings.Contains(string(help), "draft-simple") {
			args = append(args, "--spec-type", "draft-simple")
		}
		// Each setting by the first spelling the runner lists, newest
		// first.
		for _, d := range []struct {
			n     int
			what  string
			flags []string
		}{
			{c.DraftMax, "draft-length", []string{"--spec-draft-n-max", "--draft-max", "--draft"}},
			{c.DraftMin, "draft-minimum", []string{"--spec-draft-n-min", "--draft-min", "--draft-n-min"}},
		} {
			if d.n <= 0 {
				continue
			}
			flag := ""
			for _, f := range d.flags {
				if help.has(f) {
					flag = f
					break
				}
			}
			if flag == "" {
				return nil, fmt.Errorf("runner %s lists no %s flag (%s)", c.Runner, d.what, strings.Join(d.flags, ", "))
			}
			args = append(args, flag, strconv.Itoa(d.n))
		}
	}
	if c.CacheTypeK != "" {
		// Both halves explicitly, so the child runs with what the recipe
		// names whatever its own default.
		if err := need("--cache-type-k", c.CacheTypeK); err != nil {
			return nil, err
		}
		if err := need("--cache-type-v", c.CacheTypeV); err != nil {
			return nil, err
		}
	}
	for _, a := range c.Adapters {
		var err error
		if a.Scale == 1 {
			err = need("--lora", a.Path)
		} else {
			err = need("--lora-scaled", a.Path, strconv.FormatFloat(a.Scale, 'g', -1, 64))
		}
		if err != nil {
			return nil, err
		}
	}
	return append(args, c.ExtraArgs...), nil
}
