package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// ServerName is the DNS name in the server certificate of a PKI (with
// the IP address 127.0.0.1).
const ServerName = "xds.ratekeeper.test"

// PKI is a certificate authority made for one test, and the certificates
// it signed, written as PEM files in a temporary directory.
type PKI struct {
	// CA is the file of the authority's certificate.
	CA string
	// ServerCert and ServerKey are a server's certificate (for
	// ServerName and 127.0.0.1) and key.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client's certificate and key.
	ClientCert, ClientKey string

	pool *x509.CertPool
}

// NewPKI makes a PKI, its files removed when t ends.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caDER := issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "ratekeeper test CA"},
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.CA = writePEM(t, dir, "ca.crt", "CERTIFICATE", caDER)
	sKey, sDER := issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServerName},
		DNSNames:    []string{ServerName},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	p.ServerCert = writePEM(t, dir, "server.crt", "CERTIFICATE", sDER)
	p.ServerKey = writeKey(t, dir, "server.key", sKey)
	cKey, cDER := issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "envoy-ratelimit"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	p.ClientCert = writePEM(t, dir, "client.crt", "CERTIFICATE", cDER)
	p.ClientKey = writeKey(t, dir, "client.key", cKey)
	return p
}

// ServerTLS is the TLS configuration of a server that requires client
// certificates signed by the PKI's authority.
func (p *PKI) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    p.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

var serial atomic.Int64

// issue makes a key and a certificate for tmpl, signed by parent's key
// (self-signed when parent is nil).
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func writeKey(t testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "PRIVATE KEY", der)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
