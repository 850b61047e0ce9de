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

// ServerFiles name a TLS server's certificate, key and (optionally) the
// CA whose client certificates it verifies.
type ServerFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

type serverState struct {
	cert *tls.Certificate
	cas  *x509.CertPool
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
	st := &serverState{cert: &cert}
	if f.ClientCAFile != "" {
		if st.cas, err = readPool(f.ClientCAFile); err != nil {
			return fmt.Errorf("client CA: %w", err)
		}
	}
	s.st.Store(st)
	return nil
}

// Config is the listener's tls.Config. A client certificate is asked for
// and never required: one that matches no mapping simply adds no role,
// so a caller with a token (or the roles of an anonymous caller) is not
// refused at the handshake. With a client CA, a certificate given must
// chain to it; without one, any certificate is accepted at the handshake
// (its possession proven by the handshake itself) and counts only where
// its fingerprint is pinned.
func (s *ServerTLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := s.st.Load()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
				Certificates: []tls.Certificate{*st.cert}, ClientAuth: tls.RequestClientCert}
			if st.cas != nil {
				c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, st.cas
			}
			return c, nil
		},
	}
}

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
