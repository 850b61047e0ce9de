package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"meshd/auth"
)

// InsecurePublic is the only value auth.insecure_public accepts: a TCP
// listener beyond loopback without TLS and authentication is refused
// unless the file says this, word for word.
const InsecurePublic = "I understand that anyone who can reach this port can serve, read the chain and make the steward sign"

// Auth is the [auth] table: who may do what (PROFILE §16).
type Auth struct {
	// Anonymous are the roles of a caller without credentials on a
	// loopback TCP listener and the unix socket. Default: every role
	// when no credential is configured (a fresh install stays easy),
	// none as soon as one is.
	Anonymous []string `toml:"anonymous"`
	// TokensFile holds "<sha256> <name> <roles>" lines (auth.ReadTokens);
	// reread on SIGHUP.
	TokensFile string `toml:"tokens_file,omitempty"`
	// Tokens are [[auth.token]] tables; Certs [[auth.cert]]; Peers
	// [[auth.peer]].
	Tokens []AuthToken `toml:"token,omitempty"`
	Certs  []AuthCert  `toml:"cert,omitempty"`
	Peers  []AuthPeer  `toml:"peer,omitempty"`
	// InsecurePublic, set to the InsecurePublic sentence, lets a listener
	// beyond loopback run without TLS or authentication: anonymous
	// callers there then get Anonymous.
	InsecurePublic string `toml:"insecure_public,omitempty"`
}

// AuthToken is a bearer token by its SHA-256 (never the token itself).
type AuthToken struct {
	Name   string   `toml:"name,omitempty"`
	SHA256 string   `toml:"sha256,omitempty"`
	Roles  []string `toml:"roles,omitempty"`
}

// AuthCert maps a TLS client certificate: by sha256 (of the leaf's DER)
// or by subject (CN or DNS SAN, when it chains to listen.tls.client_ca_file).
type AuthCert struct {
	Name    string   `toml:"name,omitempty"`
	SHA256  string   `toml:"sha256,omitempty"`
	Subject string   `toml:"subject,omitempty"`
	Roles   []string `toml:"roles,omitempty"`
}

// AuthPeer maps a unix-socket peer by uid or gid.
type AuthPeer struct {
	Name  string   `toml:"name,omitempty"`
	UID   *uint32  `toml:"uid,omitempty"`
	GID   *uint32  `toml:"gid,omitempty"`
	Roles []string `toml:"roles,omitempty"`
}

// ListenTLS is [listen.tls]: when set, every TCP listener speaks TLS.
// The files are reread on SIGHUP.
type ListenTLS struct {
	CertFile     string `toml:"cert_file,omitempty"`
	KeyFile      string `toml:"key_file,omitempty"`
	ClientCAFile string `toml:"client_ca_file,omitempty"`
}

// Enabled reports whether TLS is configured.
func (t ListenTLS) Enabled() bool { return t.CertFile != "" }

// Files are the server's TLS files.
func (t ListenTLS) Files() auth.ServerFiles {
	return auth.ServerFiles{CertFile: t.CertFile, KeyFile: t.KeyFile}
}

// credentials reports whether any credential is configured.
func (a Auth) credentials() bool {
	return a.TokensFile != "" || len(a.Tokens) > 0 || len(a.Certs) > 0 || len(a.Peers) > 0
}

// tokenAuth reports whether a remote caller could authenticate: a token
// or a client certificate (a unix peer cannot reach TCP).
func (a Auth) tokenAuth() bool {
	return a.TokensFile != "" || len(a.Tokens) > 0 || len(a.Certs) > 0
}

// Policy builds what the daemon enforces, reading the tokens file. The
// daemon calls it at start and on SIGHUP; Parse has checked the rest.
func (c *Config) AuthPolicy() (*auth.Policy, error) {
	a := c.Auth
	p := &auth.Policy{}
	var errs []error
	var err error
	if p.Anonymous, err = auth.ParseRoles(a.Anonymous); err != nil {
		errs = append(errs, fmt.Errorf("auth.anonymous: %w", err))
	}
	if a.InsecurePublic == InsecurePublic {
		p.PublicAnonymous = p.Anonymous
	}
	for i, t := range a.Tokens {
		d, err1 := auth.ParseDigest(t.SHA256)
		rs, err2 := auth.ParseRoles(t.Roles)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("auth.token[%d]: %w", i, err))
			continue
		}
		p.Tokens = append(p.Tokens, auth.Token{Name: t.Name, SHA256: d, Roles: rs})
	}
	if a.TokensFile != "" {
		toks, err := auth.ReadTokens(a.TokensFile)
		if err != nil {
			errs = append(errs, err)
		}
		p.Tokens = append(p.Tokens, toks...)
	}
	for i, ce := range a.Certs {
		rs, err := auth.ParseRoles(ce.Roles)
		m := auth.Cert{Name: ce.Name, Subject: ce.Subject, Roles: rs}
		if ce.SHA256 != "" {
			d, err1 := auth.ParseDigest(ce.SHA256)
			m.SHA256 = &d
			err = errors.Join(err, err1)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("auth.cert[%d]: %w", i, err))
			continue
		}
		p.Certs = append(p.Certs, m)
	}
	if f := c.Listen.TLS.ClientCAFile; f != "" {
		if p.ClientCAs, err = auth.ReadPool(f); err != nil {
			errs = append(errs, fmt.Errorf("listen.tls.client_ca_file: %w", err))
		}
	}
	for i, pe := range a.Peers {
		rs, err := auth.ParseRoles(pe.Roles)
		if err != nil {
			errs = append(errs, fmt.Errorf("auth.peer[%d]: %w", i, err))
			continue
		}
		p.Peers = append(p.Peers, auth.Peer{Name: pe.Name, UID: pe.UID, GID: pe.GID, Roles: rs})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// auth applies [auth]'s defaults and checks it, [listen.tls], and that
// no listener beyond loopback runs in clear text or unauthenticated.
func (v *checker) auth() {
	a := &v.c.Auth
	if !v.ix.has("auth.anonymous") {
		a.Anonymous = []string{}
		if !a.credentials() {
			a.Anonymous = auth.RoleNames()
		}
	}
	v.roles("auth.anonymous", a.Anonymous)
	if v.ix.has("auth.tokens_file") && a.TokensFile == "" {
		v.problem("auth.tokens_file", "must not be empty (omit it for no tokens file)")
	}
	names := map[string]string{}
	named := func(key, kind, name string) {
		if name == "" {
			v.problem(key+".name", "required: it names the caller in the log and in refusals")
			return
		}
		if prev, dup := names[kind+name]; dup {
			v.problem(key+".name", "%s %q is already %s", kind, name, prev)
		}
		names[kind+name] = key
	}
	for i, t := range a.Tokens {
		k := fmt.Sprintf("auth.token[%d]", i)
		named(k, "token", t.Name)
		if _, err := auth.ParseDigest(t.SHA256); err != nil {
			v.problem(k+".sha256", "%v of the token (`meshctl token` prints one); never the token itself", err)
		}
		v.rolesRequired(k+".roles", t.Roles)
	}
	tl := v.c.Listen.TLS
	for i, ce := range a.Certs {
		k := fmt.Sprintf("auth.cert[%d]", i)
		named(k, "cert", ce.Name)
		switch {
		case (ce.SHA256 == "") == (ce.Subject == ""):
			v.problem(k, "set exactly one of sha256 (the certificate's fingerprint) and subject (its CN or DNS name)")
		case ce.SHA256 != "":
			if _, err := auth.ParseDigest(ce.SHA256); err != nil {
				v.problem(k+".sha256", "%v (of the certificate's DER: openssl x509 -noout -fingerprint -sha256)", err)
			}
		case tl.ClientCAFile == "":
			v.problem(k+".subject", "a subject is only trusted when the certificate chains to listen.tls.client_ca_file, which is not set")
		}
		v.rolesRequired(k+".roles", ce.Roles)
	}
	if len(a.Certs) > 0 && !tl.Enabled() {
		v.problem("auth.cert[0]", "client certificates need TLS: set [listen.tls] cert_file and key_file")
	}
	for i, pe := range a.Peers {
		k := fmt.Sprintf("auth.peer[%d]", i)
		named(k, "peer", pe.Name)
		if (pe.UID == nil) == (pe.GID == nil) {
			v.problem(k, "set exactly one of uid and gid")
		}
		v.rolesRequired(k+".roles", pe.Roles)
	}
	if len(a.Peers) > 0 && v.c.Listen.Unix == "" {
		v.problem("auth.peer[0]", "peers are recognised on the unix socket, and listen.unix is not set")
	}
	if tl.Enabled() || v.ix.has("listen.tls") {
		if tl.CertFile == "" || tl.KeyFile == "" {
			v.problem("listen.tls", "cert_file and key_file go together")
		}
	}
	insecure := false
	if v.ix.has("auth.insecure_public") {
		if a.InsecurePublic != InsecurePublic {
			v.problem("auth.insecure_public", "the only accepted value is %q", InsecurePublic)
		} else {
			insecure = true
		}
	}
	for i, addr := range v.c.Listen.TCP {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || auth.IsLoopbackHost(host) || insecure {
			continue
		}
		var missing []string
		if !tl.Enabled() {
			missing = append(missing, "TLS ([listen.tls] cert_file and key_file)")
		}
		if !a.tokenAuth() {
			missing = append(missing, "authentication ([[auth.token]], auth.tokens_file or [[auth.cert]])")
		}
		if len(missing) > 0 {
			v.problem(fmt.Sprintf("listen.tcp[%d]", i), "%q is reachable beyond loopback and has no %s: anyone who reaches it could serve and make the steward sign; bind 127.0.0.1, or configure them (or set auth.insecure_public)",
				addr, strings.Join(missing, " and no "))
		}
	}
}

// roles checks a list of role names.
func (v *checker) roles(key string, rs []string) {
	for j, r := range rs {
		if _, err := auth.ParseRoles([]string{r}); err != nil {
			v.problem(fmt.Sprintf("%s[%d]", key, j), "%v", err)
		}
	}
}

func (v *checker) rolesRequired(key string, rs []string) {
	if len(rs) == 0 {
		v.problem(key, "required: one or more of %s", quoteList(auth.RoleNames()))
		return
	}
	v.roles(key, rs)
}

// remoteAuth checks how a kind = "meshd" backend authenticates to its
// node and pins it.
func (v *checker) remoteAuth(p string, b Backend) {
	u, err := url.Parse(b.URL)
	if err != nil {
		return // reported with the url
	}
	has := func(k string) bool { return v.ix.has(p + k) }
	if (b.CertFile == "") != (b.KeyFile == "") {
		v.problem(p+"cert_file", "cert_file and key_file go together")
	}
	for _, k := range []string{"ca_file", "server_sha256", "cert_file", "key_file"} {
		if has(k) && u.Scheme != "https" {
			v.problem(p+k, "only used with an https:// url")
		}
	}
	if b.ServerSHA256 != "" {
		if _, err := auth.ParseDigest(b.ServerSHA256); err != nil {
			v.problem(p+"server_sha256", "%v (of the node's certificate's DER)", err)
		}
	}
	if b.TokenFile != "" && u.Scheme == "http" && !auth.IsLoopbackHost(u.Hostname()) {
		v.problem(p+"token_file", "the token would cross the network in clear text: use an https:// url")
	}
}

// RemoteFiles are a kind = "meshd" backend's TLS files.
func (b Backend) RemoteFiles() auth.ClientFiles {
	return auth.ClientFiles{CAFile: b.CAFile, ServerSHA256: b.ServerSHA256, CertFile: b.CertFile, KeyFile: b.KeyFile}
}
