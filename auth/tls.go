package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// ServerFiles name a TLS server's certificate and key.
type ServerFiles struct {
	CertFile, KeyFile string
}

type serverState struct {
	cert *tls.Certificate
}

// ServerTLS is a TLS server configuration whose certificate, key and
// client CA are reread by Reload (on SIGHUP) without a restart: each
// handshake takes the files in force.
type ServerTLS struct {
	st atomic.Pointer[serverState]
}

// NewServerTLS loads f.
func NewServerTLS(f ServerFiles) (*ServerTLS, error) {
	s := &ServerTLS{}
	if err := s.Reload(f); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload rereads f; on error the files in force stay.
func (s *ServerTLS) Reload(f ServerFiles) error {
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	s.st.Store(&serverState{cert: &cert})
	return nil
}

// Config is the listener's tls.Config. A client certificate is asked for
// and never required, and not judged at the handshake (which proves only
// that the client holds its key): Identify maps it to roles by its
// pinned fingerprint or, when it chains to the policy's client CA, by
// its subject. One that maps to nothing adds no role, so a caller with a
// token is not refused for the certificate its browser or library sent.
// No CA names are sent in the request, so a client offers its
// certificate whoever issued it.
func (s *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := s.st.Load()
			return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*st.cert}, ClientAuth: tls.RequestClientCert}, nil
		},
	}
}

// ReadPool reads PEM certificates into a pool.
func ReadPool(path string) (*x509.CertPool, error) { return readPool(path) }

func readPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// ClientFiles say how a client trusts a server and proves itself: CAFile
// (verify the server's chain and name against it) or ServerSHA256 (pin
// the server's leaf certificate by the SHA-256 of its DER, for a
// self-signed node), and an optional client certificate.
type ClientFiles struct {
	CAFile, ServerSHA256 string
	CertFile, KeyFile    string
}

// Empty reports whether f configures nothing (the system roots, no
// client certificate).
func (f ClientFiles) Empty() bool { return f == ClientFiles{} }

// ClientTLS builds the client's tls.Config from f.
func ClientTLS(f ClientFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pool, err := readPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("server CA: %w", err)
		}
		c.RootCAs = pool
	}
	if f.ServerSHA256 != "" {
		pin, err := ParseDigest(f.ServerSHA256)
		if err != nil {
			return nil, fmt.Errorf("server certificate pin: %w", err)
		}
		if f.CAFile == "" {
			// The pin is the whole trust: the chain and name are not
			// checked, the leaf must be exactly the pinned one.
			c.InsecureSkipVerify = true
		}
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			fp := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if subtle.ConstantTimeCompare(fp[:], pin[:]) != 1 {
				return fmt.Errorf("the server's certificate (sha256 %x) is not the pinned one", fp)
			}
			return nil
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("a client certificate needs both its certificate and its key")
	}
	if f.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Fingerprint is the SHA-256 of a certificate's DER, as pins hold it.
func Fingerprint(der []byte) [32]byte { return sha256.Sum256(der) }
