package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/auth"
)

const authBackend = "[[backend]]\nname = \"r\"\nkind = \"reference\"\nfidelity = 1\nuj_per_token = 10\n"

func TestAuthProblems(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, doc string
		want      []want
	}{
		{"every interface in clear text", "[listen]\ntcp = [\"0.0.0.0:8477\"]\n" + authBackend, []want{
			{2, "listen.tcp[0]", `"0.0.0.0:8477" is reachable beyond loopback and has no TLS ([listen.tls] cert_file and key_file) and no authentication`},
		}},
		{"tls without authentication", "[listen]\ntcp = [\"127.0.0.1:1\", \"[::]:8477\"]\n[listen.tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"\n" + authBackend, []want{
			{2, "listen.tcp[1]", `"[::]:8477" is reachable beyond loopback and has no authentication`},
		}},
		{"a token without tls", "[listen]\ntcp = [\"10.0.0.7:8477\"]\n[[auth.token]]\nname = \"front\"\nsha256 = \"" + digest + "\"\nroles = [\"serve\"]\n" + authBackend, []want{
			{2, "listen.tcp[0]", `"10.0.0.7:8477" is reachable beyond loopback and has no TLS`},
		}},
		{"a host name is not loopback", "[listen]\ntcp = [\"board.local:8477\"]\n" + authBackend, []want{
			{2, "listen.tcp[0]", "reachable beyond loopback"},
		}},
		{"the opt-out must be said in full", "[listen]\ntcp = [\":8477\"]\n[auth]\ninsecure_public = \"yes\"\n" + authBackend, []want{
			{2, "listen.tcp[0]", "reachable beyond loopback"},
			{4, "auth.insecure_public", "the only accepted value is"},
		}},
		{"bad credentials", `[listen]
unix = "/run/meshd.sock"
[auth]
anonymous = ["read", "admin"]
[[auth.token]]
name = "a"
sha256 = "not hex"
roles = ["serve"]
[[auth.token]]
name = "a"
sha256 = "` + digest + `"
[[auth.cert]]
name = "c"
subject = "bench-01"
roles = ["read"]
[[auth.peer]]
name = "p"
roles = ["operate"]
` + authBackend, []want{
			{4, "auth.anonymous[1]", `unknown role "admin"`},
			{7, "auth.token[0].sha256", "want a SHA-256 digest"},
			{9, "auth.token[1].roles", "required: one or more of"},
			{10, "auth.token[1].name", `token "a" is already auth.token[0]`},
			{12, "auth.cert[0]", "client certificates need TLS"},
			{14, "auth.cert[0].subject", "client_ca_file, which is not set"},
			{16, "auth.peer[0]", "set exactly one of uid and gid"},
		}},
		{"a remote token in clear text", `[[backend]]
name = "far"
kind = "meshd"
url = "http://10.0.0.9:8477"
steward = "` + digest + `"
fidelity = 1
uj_per_token = 5
token_file = "/etc/meshd/far.token"
server_sha256 = "` + digest + `"
`, []want{
			{8, "backend[0].token_file", "clear text"},
			{9, "backend[0].server_sha256", "only used with an https:// url"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "bad.toml")
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("want problems, got %v", err)
			}
			checkProblems(t, ps, tc.want)
		})
	}
}

func TestAuthAccepted(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	d := auth.HashToken("s3cret")
	line := "# rotated\n" + strings.Repeat("0", 64) + " old serve\n"
	if err := os.WriteFile(tokens, []byte(line+hexOf(d)+" front serve,read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, doc   string
		anon, pAnon auth.Roles
		tokens      int
	}{
		{"loopback stays open", authBackend, auth.All, 0, 0},
		{"credentials close loopback", "[auth]\ntokens_file = \"" + tokens + "\"\n" + authBackend, 0, 0, 2},
		{"public with tls and tokens", "[listen]\ntcp = [\"0.0.0.0:8477\"]\n[listen.tls]\ncert_file = \"/c\"\nkey_file = \"/k\"\n[auth]\nanonymous = [\"read\"]\ntokens_file = \"" + tokens + "\"\n" + authBackend,
			auth.Roles(auth.Read), 0, 2},
		{"the opt-out", "[listen]\ntcp = [\"0.0.0.0:8477\"]\n[auth]\ninsecure_public = \"" + InsecurePublic + "\"\n" + authBackend, auth.All, auth.All, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc), "ok.toml")
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.AuthPolicy()
			if err != nil {
				t.Fatal(err)
			}
			if p.Anonymous != tc.anon || p.PublicAnonymous != tc.pAnon || len(p.Tokens) != tc.tokens {
				t.Fatalf("anonymous %v, public anonymous %v, %d tokens; want %v, %v, %d", p.Anonymous, p.PublicAnonymous, len(p.Tokens), tc.anon, tc.pAnon, tc.tokens)
			}
		})
	}
	// A bad tokens file line is named with its line.
	if err := os.WriteFile(tokens, []byte(line+"zz front serve\n"+hexOf(d)+" x admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte("[auth]\ntokens_file = \""+tokens+"\"\n"+authBackend), "ok.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.AuthPolicy()
	if err == nil || !strings.Contains(err.Error(), tokens+":3: want a SHA-256 digest") || !strings.Contains(err.Error(), tokens+`:4: unknown role "admin"`) {
		t.Fatalf("tokens file with bad lines: %v", err)
	}
}

func hexOf(d [32]byte) string {
	const h = "0123456789abcdef"
	b := make([]byte, 64)
	for i, x := range d {
		b[2*i], b[2*i+1] = h[x>>4], h[x&15]
	}
	return string(b)
}
