package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadTokens reads a tokens file: one token a line as
//
//	<sha256 hex of the token> <name> <role>[,<role>...]
//
// '#' starts a comment; blank lines are skipped. Every bad line is
// reported as "path:line: ...", so a rotated file is fixed in one go.
func ReadTokens(path string) ([]Token, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	var toks []Token
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := sc.Text()
		if i := strings.IndexByte(s, '#'); i >= 0 {
			s = s[:i]
		}
		f := strings.Fields(s)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			errs = append(errs, fmt.Errorf("%s:%d: want \"<sha256> <name> <roles>\", got %d fields", path, line, len(f)))
			continue
		}
		d, err := ParseDigest(f[0])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %v (the token's digest, never the token itself)", path, line, err))
			continue
		}
		rs, err := ParseRoles(strings.Split(f[2], ","))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %v", path, line, err))
			continue
		}
		toks = append(toks, Token{Name: f[1], SHA256: d, Roles: rs})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return toks, nil
}

// ReadSecret reads a token from a file a client keeps it in: the first
// line, trimmed.
func ReadSecret(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok, _, _ := strings.Cut(string(data), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
