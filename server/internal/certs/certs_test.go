package certs_test

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/server/internal/certs"
	"github.com/ratekeeper/ratekeeper/server/internal/certs/certstest"
)

// serve runs a TLS echo of one byte on loopback with config.
func serve(t *testing.T, config *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", config)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					c.Write(b)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial makes one round trip, returning the serial number of the server's
// certificate.
func dial(addr string, config *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, config)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{1}); err != nil {
		return "", err
	}
	// TLS 1.3 reports a refused client certificate at the first read.
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestRotatedCertificateServedWithoutRestart(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	first := ca.Issue(t, "127.0.0.1")
	secret := certstest.NewSecret(t, t.TempDir(), first, ca)
	var errs []error
	var mu sync.Mutex
	config, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key()}, func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, config)
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if got, err := dial(addr, client); err != nil || got != first.Serial.String() {
		t.Fatalf("first certificate: serial %s, %v; want %s", got, err, first.Serial)
	}
	second := ca.Issue(t, "127.0.0.1")
	secret.Update(t, second, ca)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := dial(addr, client)
		if err == nil && got == second.Serial.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificate not served within 5 s: serial %s, %v; want %s", got, err, second.Serial)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(errs) != 0 {
		t.Errorf("reload errors: %v", errs)
	}
}

func TestBrokenRotationKeepsThePreviousCertificate(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	first := ca.Issue(t, "127.0.0.1")
	secret := certstest.NewSecret(t, t.TempDir(), first, ca)
	errc := make(chan error, 10)
	config, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key()}, func(err error) {
		select {
		case errc <- err:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, config)
	// A key that does not match the certificate.
	other := ca.Issue(t, "127.0.0.1")
	secret.Update(t, &certstest.Leaf{CertPEM: other.CertPEM, KeyPEM: first.KeyPEM}, ca)
	time.Sleep(certs.CheckInterval + 100*time.Millisecond)
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if got, err := dial(addr, client); err != nil || got != first.Serial.String() {
		t.Fatalf("after a broken update: serial %s, %v; want the previous %s", got, err, first.Serial)
	}
	select {
	case err := <-errc:
		if !strings.Contains(err.Error(), "tls.crt") {
			t.Errorf("reload error %q does not name the file", err)
		}
	case <-time.After(time.Second):
		t.Error("a failed reload was not reported")
	}
}

// TestOutOfDateRotationKeepsThePreviousCertificate rotates in a
// certificate that has expired, and one not valid yet: handshakes go on
// with the previous one, the refusal is reported once, naming the file
// and the dates, and the one not valid yet is served once it is valid.
func TestOutOfDateRotationKeepsThePreviousCertificate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Duration // from now
		state               string
	}{
		{"expired", -48 * time.Hour, -time.Hour, "has expired"},
		{"not yet valid", 4 * time.Second, 24 * time.Hour, "is not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ca := certstest.NewCA(t, "ca")
			first := ca.Issue(t, "127.0.0.1")
			secret := certstest.NewSecret(t, t.TempDir(), first, ca)
			var mu sync.Mutex
			var errs []error
			config, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key()}, func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, config)
			now := time.Now()
			next := ca.IssueValid(t, now.Add(tc.notBefore), now.Add(tc.notAfter), "127.0.0.1")
			secret.Update(t, next, ca)
			// Over two checks of the files, every fresh handshake gets the
			// previous certificate.
			client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
			for end := time.Now().Add(2*certs.CheckInterval + 200*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if got, err := dial(addr, client); err != nil || got != first.Serial.String() {
					t.Fatalf("after the rotation: serial %s, %v; want the previous %s", got, err, first.Serial)
				}
			}
			mu.Lock()
			reported := append([]error(nil), errs...)
			mu.Unlock()
			if len(reported) != 1 {
				t.Fatalf("%d reports of one refused change, want 1: %v", len(reported), reported)
			}
			msg := reported[0].Error()
			for _, want := range []string{secret.Cert(), tc.state, next.NotBefore.Format(time.RFC3339), next.NotAfter.Format(time.RFC3339)} {
				if !strings.Contains(msg, want) {
					t.Errorf("report %q does not say %q", msg, want)
				}
			}
			if ve, ok := errors.AsType[*certs.ValidityError](reported[0]); !ok || ve.File != secret.Cert() {
				t.Errorf("report %v: not a *certs.ValidityError naming %s", reported[0], secret.Cert())
			}
			if tc.notBefore < 0 {
				return
			}
			// Valid now: served from the next look at the files.
			deadline := next.NotBefore.Add(certs.CheckInterval + 3*time.Second)
			for {
				got, err := dial(addr, client)
				if err == nil && got == next.Serial.String() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the certificate valid from %s not served by %s: serial %s, %v", next.NotBefore, deadline, got, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// TestOutOfDateAtLoad: a pair expired or not yet valid is an error at
// start, saying why.
func TestOutOfDateAtLoad(t *testing.T) {
	t.Parallel()
	ca := certstest.NewCA(t, "ca")
	now := time.Now()
	for _, tc := range []struct {
		leaf *certstest.Leaf
		want string
	}{
		{ca.IssueValid(t, now.Add(-48*time.Hour), now.Add(-time.Hour), "x"), "has expired"},
		{ca.IssueValid(t, now.Add(time.Hour), now.Add(48*time.Hour), "x"), "is not valid yet"},
	} {
		secret := certstest.NewSecret(t, t.TempDir(), tc.leaf, ca)
		if _, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key()}, nil); err == nil ||
			!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.leaf.NotAfter.Format(time.RFC3339)) {
			t.Errorf("server: %v; want it to say %q and the dates", err, tc.want)
		}
		if _, err := certs.ClientConfig(certs.ClientFiles{Cert: secret.Cert(), Key: secret.Key()}, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("client: %v; want it to say %q", err, tc.want)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	stranger := certstest.NewCA(t, "stranger")
	dir := t.TempDir()
	secret := certstest.NewSecret(t, dir+"/server", ca.Issue(t, "127.0.0.1"), ca)
	envoy := ca.Issue(t, "envoy")
	other := ca.Issue(t, "someone-else")
	for _, tc := range []struct {
		name   string
		san    string
		client *certstest.Leaf
		ca     *certstest.CA
		ok     bool
	}{
		{"no client certificate", "", nil, nil, false},
		{"a certificate of another CA", "", stranger.Issue(t, "envoy"), nil, false},
		{"a certificate of the CA", "", envoy, nil, true},
		{"the SAN asked for", "envoy", envoy, nil, true},
		{"another SAN", "envoy", other, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key(), ClientCA: secret.CA(), ClientSAN: tc.san}, nil)
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, config)
			client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
			if tc.client != nil {
				client.Certificates = []tls.Certificate{tc.client.TLS(t)}
			}
			_, err = dial(addr, client)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.ServerConfig(certs.ServerFiles{Cert: dir + "/none.crt", Key: dir + "/none.key"}, nil); err == nil || !strings.Contains(err.Error(), "none.crt") {
		t.Errorf("missing files: %v", err)
	}
	ca := certstest.NewCA(t, "ca")
	secret := certstest.NewSecret(t, dir+"/s", ca.Issue(t, "x"), ca)
	if _, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key(), ClientCA: secret.Key()}, nil); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a key as CA: %v", err)
	}
	if _, err := certs.ServerConfig(certs.ServerFiles{Cert: secret.Cert(), Key: secret.Key(), ClientSAN: "envoy"}, nil); err == nil {
		t.Error("a SAN without a CA: accepted")
	}
}
