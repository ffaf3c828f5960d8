package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ServerFiles are the files of a TLS server's configuration.
type ServerFiles struct {
	Cert, Key string
	// ClientCA, when set, requires every client to present a certificate
	// issued by one of its CAs (mTLS).
	ClientCA string
	// ClientSAN, when set with ClientCA, also requires the client's
	// certificate to name it (a DNS name, or an IP address), as
	// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN does.
	ClientSAN string
}

// ServerConfig is a TLS server configuration whose certificate and client
// CAs are re-read when their files change. onError receives each failed
// reload.
func ServerConfig(f ServerFiles, onError func(error)) (*tls.Config, error) {
	pair, err := LoadPair(f.Cert, f.Key, onError)
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: pair.GetCertificate}
	if f.ClientCA == "" {
		if f.ClientSAN != "" {
			return nil, errors.New("a client SAN to check needs the client CA")
		}
		return base, nil
	}
	pool, err := LoadPool(f.ClientCA, onError)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Each handshake gets the CAs as they are now.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			c.ClientAuth = tls.RequireAndVerifyClientCert
			c.ClientCAs = pool.CertPool()
			if f.ClientSAN != "" {
				c.VerifyPeerCertificate = verifySAN(f.ClientSAN)
			}
			return c, nil
		},
	}, nil
}

// verifySAN checks that the verified client certificate names san.
func verifySAN(san string) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return errors.New("no verified client certificate")
		}
		if err := chains[0][0].VerifyHostname(san); err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		return nil
	}
}

// ClientFiles are the files of a TLS client's configuration.
type ClientFiles struct {
	// Cert and Key, when set, are the client's certificate.
	Cert, Key string
	// CA, when set, is the CAs that may sign the server's certificate,
	// instead of the system's, or beside them with WithSystemCAs.
	CA            string
	WithSystemCAs bool
	// SkipHostnameVerification checks the server's chain but not the
	// name in it, as envoy's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
	SkipHostnameVerification bool
	// ServerName is the name expected in the server's certificate; when
	// empty, the name the connection was made to (gRPC's authority, the
	// host of Redis's address).
	ServerName string
}

// ClientConfig is the TLS client configuration of the service's
// connections (to Redis, and to an xDS server): TLS 1.2 or later; the
// client's certificate, re-read at a handshake when its files changed
// (see LoadPair); and the server's chain verified at each handshake
// against the CAs of the moment, re-read when their file changed (see
// LoadPool), and its name against ServerName, unless
// SkipHostnameVerification. Certificates rotated in place are so used
// without a restart; one that no longer loads is refused, the previous
// one kept, and onError, if not nil, told once per change of the files.
func ClientConfig(f ClientFiles, onError func(error)) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.Cert != "" || f.Key != "" {
		pair, err := LoadPair(f.Cert, f.Key, onError)
		if err != nil {
			return nil, err
		}
		c.GetClientCertificate = pair.GetClientCertificate
	}
	roots := func() *x509.CertPool { return nil } // the system's
	if f.CA != "" {
		pool, err := loadPool(f.CA, f.WithSystemCAs, onError)
		if err != nil {
			return nil, err
		}
		roots = pool.CertPool
	}
	// The chain is verified here, against the roots of the moment, which
	// crypto/tls would take once, from RootCAs.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no server certificate")
		}
		opts := x509.VerifyOptions{Roots: roots(), Intermediates: x509.NewCertPool()}
		if !f.SkipHostnameVerification {
			opts.DNSName = cs.ServerName
		}
		for _, ic := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(ic)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("server certificate: %w", err)
		}
		return nil
	}
	return c, nil
}
