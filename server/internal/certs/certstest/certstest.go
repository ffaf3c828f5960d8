// Package certstest makes certificate authorities and certificates for
// tests, written to PEM files the way Kubernetes mounts a TLS Secret.
package certstest

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

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate.
	PEM []byte
}

// serial numbers the certificates of a test binary.
var serial atomic.Int64

// newKey is a fresh key and a certificate template valid for a day.
func newKey(t testing.TB) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key, &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, tmpl := newKey(t)
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is an issued certificate and its key, in PEM.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Serial          *big.Int
	// NotBefore and NotAfter bound its validity.
	NotBefore, NotAfter time.Time
}

// Issue makes a certificate for both server and client use, naming names
// (DNS names, or IP addresses) with the first as its common name, valid
// from an hour ago for a day.
func (ca *CA) Issue(t testing.TB, names ...string) *Leaf {
	t.Helper()
	return ca.IssueValid(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), names...)
}

// IssueValid is Issue with a certificate valid from notBefore to
// notAfter: expired, or not valid yet, as a test needs.
func (ca *CA) IssueValid(t testing.TB, notBefore, notAfter time.Time, names ...string) *Leaf {
	t.Helper()
	key, tmpl := newKey(t)
	// A certificate holds whole seconds.
	tmpl.NotBefore, tmpl.NotAfter = notBefore.UTC().Truncate(time.Second), notAfter.UTC().Truncate(time.Second)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if len(names) > 0 {
		tmpl.Subject.CommonName = names[0]
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{
		CertPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
		Serial:    tmpl.SerialNumber,
		NotBefore: tmpl.NotBefore,
		NotAfter:  tmpl.NotAfter,
	}
}

// TLS is the leaf as a tls.Certificate.
func (l *Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Secret is a directory laid out as Kubernetes mounts a TLS Secret:
// tls.crt, tls.key and ca.crt are symlinks through ..data to a
// timestamped directory, and an update swaps ..data atomically.
type Secret struct {
	Dir string
}

// NewSecret writes leaf and ca into a new Secret directory under parent.
func NewSecret(t testing.TB, parent string, leaf *Leaf, ca *CA) *Secret {
	t.Helper()
	s := &Secret{Dir: parent}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	s.Update(t, leaf, ca)
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(parent, name)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Update writes a new version and swaps ..data to it, as the kubelet does.
func (s *Secret) Update(t testing.TB, leaf *Leaf, ca *CA) {
	t.Helper()
	version := filepath.Join(s.Dir, "..v"+time.Now().Format("2006_01_02_15_04_05.000000000"))
	if err := os.Mkdir(version, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(version, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(version), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// Cert, Key and CA are the paths of the Secret's files.
func (s *Secret) Cert() string { return filepath.Join(s.Dir, "tls.crt") }

// Key is the path of the Secret's key.
func (s *Secret) Key() string { return filepath.Join(s.Dir, "tls.key") }

// CA is the path of the Secret's CA certificate.
func (s *Secret) CA() string { return filepath.Join(s.Dir, "ca.crt") }
