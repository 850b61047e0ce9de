package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnOptions say how to reach and authenticate to the NATS servers. The
// secrets in it (Password, and any password in URL) are never logged: see
// LogValue and the redacting logger every connection logs through.
type ConnOptions struct {
	// URL is one server URL or several separated by commas
	// (nats://host:4222, tls://host:4222).
	URL string
	// Creds is a JWT user credentials file (decentralised auth).
	Creds string
	// NKeySeedFile is a file holding a user NKey seed.
	NKeySeedFile string
	// User and Password authenticate with a plain user; Password is a
	// secret.
	User     string
	Password string
	// CAFile verifies the server's certificate; CertFile and KeyFile are
	// the client's certificate and key for mutual TLS.
	CAFile   string
	CertFile string
	KeyFile  string
	// Name is the connection's name as the server's monitoring shows it.
	Name string
}

// LogValue keeps the password out of any log line that includes the
// options: only whether one is set is shown.
func (o ConnOptions) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", RedactURL(o.URL)),
		slog.String("user", o.User),
		slog.Bool("password", o.Password != ""),
		slog.String("creds", o.Creds),
		slog.String("nkey_seed_file", o.NKeySeedFile),
		slog.String("ca", o.CAFile),
		slog.String("cert", o.CertFile),
	)
}

// String redacts like LogValue, so that fmt's %v and %+v cannot print the
// password either.
func (o ConnOptions) String() string {
	pw := ""
	if o.Password != "" {
		pw = " password=[redacted]"
	}
	return fmt.Sprintf("nats %s user=%q%s creds=%q nkey=%q ca=%q cert=%q",
		RedactURL(o.URL), o.User, pw, o.Creds, o.NKeySeedFile, o.CAFile, o.CertFile)
}

// GoString covers %#v, which would otherwise print every field.
func (o ConnOptions) GoString() string { return o.String() }

// secrets lists the strings no log line may contain.
func (o ConnOptions) secrets() []string {
	var s []string
	if o.Password != "" {
		s = append(s, o.Password)
	}
	for _, u := range strings.Split(o.URL, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			if pw, ok := p.User.Password(); ok && pw != "" {
				s = append(s, pw)
			} else if tok := p.User.Username(); tok != "" && !ok {
				// nats://token@host: the user part alone is a token.
				s = append(s, tok)
			}
		}
	}
	return s
}

// RedactURL returns a server URL list with any user information replaced,
// so that it can be logged.
func RedactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, u := range parts {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			// Unparseable: it may still hold a secret, so show nothing of it.
			parts[i] = "[unparseable url]"
			continue
		}
		if p.User != nil {
			p.User = url.User("redacted")
		}
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// options turns o into nats options, plus reconnect behaviour: reconnect
// forever with a jittered exponential backoff between min and max, and fail
// publishes at once while disconnected (no reconnect buffer) so that the
// caller's cursor, not a hidden buffer, decides what is resent.
func (o ConnOptions) options(log *slog.Logger, min, max time.Duration) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectBufSize(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return backoffDelay(attempts, min, max) }),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("fleet: connected", "server", RedactURL(nc.ConnectedUrlRedacted()), "server_id", nc.ConnectedServerId())
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("fleet: connected", "server", RedactURL(nc.ConnectedUrlRedacted()), "server_id", nc.ConnectedServerId(), "reconnected", true)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("fleet: disconnected", "err", err)
			} else {
				log.Info("fleet: disconnected")
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Warn("fleet: connection error", "err", err)
		}),
	}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed file %s: %w", o.NKeySeedFile, err)
		}
		opts = append(opts, opt)
	}
	if o.User != "" || o.Password != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, fmt.Errorf("nats client TLS needs both a certificate and a key file (have cert %q, key %q)", o.CertFile, o.KeyFile)
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	return opts, nil
}

// Dial connects to the servers in o. With RetryOnFailedConnect it returns
// at once even when no server answers yet and keeps trying in the
// background; it fails only on options that can never work. Logging goes
// through a logger that scrubs o's secrets.
func Dial(ctx context.Context, o ConnOptions, log *slog.Logger, min, max time.Duration) (*nats.Conn, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, fmt.Errorf("nats: no server URL")
	}
	log = Scrub(log, o.secrets()...)
	opts, err := o.options(log, min, max)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		// The nats error may quote the URL; it is scrubbed like a log line.
		return nil, fmt.Errorf("nats connect %s: %s", RedactURL(o.URL), scrub(err.Error(), o.secrets()))
	}
	return nc, nil
}

// backoffDelay is the wait before retry number attempt (from 1): doubling
// from min up to max, with up to a quarter of jitter so that a thousand
// boards cut off together do not return together.
func backoffDelay(attempt int, min, max time.Duration) time.Duration {
	if min <= 0 {
		min = 100 * time.Millisecond
	}
	if max < min {
		max = min
	}
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = minDur(d, max)
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
