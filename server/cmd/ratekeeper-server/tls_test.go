package main

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ratekeeper/ratekeeper/server/internal/certs/certstest"
)

// dial is a new connection to addr with creds, a context of 5 s for its
// calls, and the function that ends both.
func dial(t *testing.T, addr string, creds credentials.TransportCredentials) (*grpc.ClientConn, context.Context, func()) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	return conn, ctx, func() { cancel(); conn.Close() }
}

// askTLS makes one ShouldRateLimit call over a new TLS connection to
// addr, and returns the serial number of the server's certificate.
func askTLS(t *testing.T, addr string, config *tls.Config) (string, error) {
	t.Helper()
	conn, ctx, done := dial(t, addr, credentials.NewTLS(config))
	defer done()
	var p peer.Peer
	_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "web",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}},
	}, grpc.Peer(&p))
	if err != nil {
		return "", err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("not TLS: %T", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.String(), nil
}

// askQuotaTLS opens a rate limit quota stream over a new TLS connection to
// addr and waits for its first answer.
func askQuotaTLS(t *testing.T, addr string, config *tls.Config) error {
	t.Helper()
	conn, ctx, done := dial(t, addr, credentials.NewTLS(config))
	defer done()
	return quotaRoundTrip(ctx, conn)
}

// tlsConfigFile writes oneConfig for the TLS tests.
func tlsConfigFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "web.yaml")
	writeFile(t, path, oneConfig)
	return path
}

// TestGRPCTLSFromEnv starts the service with Envoy Gateway's TLS
// variables: gRPC is TLS only, GRPC_SERVER_TLS_CA_CERT asks for no client
// certificate (envoy reads no such variable), and a certificate rotated
// as Kubernetes rotates a Secret is served without a restart.
func TestGRPCTLSFromEnv(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	first := ca.Issue(t, "127.0.0.1")
	secret := certstest.NewSecret(t, filepath.Join(t.TempDir(), "certs"), first, ca)
	s := startEnv(t, envOf(map[string]string{
		"GRPC_SERVER_USE_TLS":     "true",
		"GRPC_SERVER_TLS_CERT":    secret.Cert(),
		"GRPC_SERVER_TLS_KEY":     secret.Key(),
		"GRPC_SERVER_TLS_CA_CERT": secret.CA(),
	}), "-config", tlsConfigFile(t))
	if _, err := s.ask(t, "web", "user", "u"); err == nil {
		t.Error("a plaintext client was answered")
	}
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	if got, err := askTLS(t, s.grpc, client); err != nil || got != first.Serial.String() {
		t.Fatalf("TLS without a client certificate: serial %s, %v; want %s", got, err, first.Serial)
	}
	second := ca.Issue(t, "127.0.0.1")
	secret.Update(t, second, ca)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := askTLS(t, s.grpc, client)
		if err == nil && got == second.Serial.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificate not served within 5 s: serial %s, %v; want %s", got, err, second.Serial)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.log.String(), "variable=GRPC_SERVER_TLS_CA_CERT") {
		t.Errorf("GRPC_SERVER_TLS_CA_CERT not logged as ignored:\n%s", s.log.String())
	}
}

// TestGRPCMutualTLS checks mTLS through envoy's variables and through the
// flags: a client without a certificate, with one of another CA, or with
// one that does not name the SAN asked for, is refused.
func TestGRPCMutualTLS(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	secret := certstest.NewSecret(t, filepath.Join(t.TempDir(), "certs"), ca.Issue(t, "127.0.0.1"), ca)
	stranger := certstest.NewCA(t, "stranger")
	for _, mode := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"environment", map[string]string{
			"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": secret.Cert(), "GRPC_SERVER_TLS_KEY": secret.Key(),
			"GRPC_CLIENT_TLS_CACERT": secret.CA(), "GRPC_CLIENT_TLS_SAN": "envoy",
		}, nil},
		{"flags", nil, []string{"-grpc-tls-cert", secret.Cert(), "-grpc-tls-key", secret.Key(),
			"-grpc-tls-client-ca", secret.CA(), "-grpc-tls-client-san", "envoy"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := startEnv(t, envOf(mode.env), append([]string{"-config", tlsConfigFile(t)}, mode.args...)...)
			for _, tc := range []struct {
				name   string
				client *certstest.Leaf
				ok     bool
			}{
				{"no client certificate", nil, false},
				{"another CA's certificate", stranger.Issue(t, "envoy"), false},
				{"a certificate without the SAN", ca.Issue(t, "someone-else"), false},
				{"a certificate with the SAN", ca.Issue(t, "envoy"), true},
			} {
				config := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
				if tc.client != nil {
					config.Certificates = []tls.Certificate{tc.client.TLS(t)}
				}
				_, err := askTLS(t, s.grpc, config)
				if tc.ok != (err == nil) {
					t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
				}
				if err := askQuotaTLS(t, s.grpc, config); tc.ok != (err == nil) {
					t.Errorf("%s, the quota service: %v, want ok=%v", tc.name, err, tc.ok)
				}
			}
			if _, err := s.ask(t, "web", "user", "u"); err == nil {
				t.Error("a plaintext client was answered")
			}
		})
	}
}

func TestGRPCTLSSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, nil, "without GRPC_SERVER_TLS_CERT"},
		{nil, []string{"-grpc-tls-cert", "a.crt"}, "both a certificate and its key"},
		{nil, []string{"-grpc-tls-client-ca", "ca.crt"}, "needs gRPC TLS"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/none/tls.crt", "GRPC_SERVER_TLS_KEY": "/none/tls.key"}, []string{"-config", "testdata"}, "/none/tls.crt"},
	} {
		var log syncBuffer
		code := run(t.Context(), append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-force-start"}, tc.args...), envOf(tc.env), &log, &log)
		if code == 0 || !strings.Contains(log.String(), tc.want) {
			t.Errorf("%v %v: exit %d, output %q; want it to say %q", tc.env, tc.args, code, log.String(), tc.want)
		}
	}
}

// TestGRPCTLSOutOfDateCertificate rotates in a certificate that has
// expired, and one not valid yet, under a running server: fresh TLS
// calls go on with the previous certificate, and one log line says why,
// naming the file and the dates. At start, such a certificate is an
// error.
func TestGRPCTLSOutOfDateCertificate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		notBefore, notAfter time.Duration // from now
		reason, startErr    string
	}{
		{"expired", -48 * time.Hour, -time.Hour, "reason=expired", "has expired"},
		{"not-yet-valid", time.Hour, 48 * time.Hour, `reason="not valid yet"`, "is not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := certstest.NewCA(t, "ca")
			first := ca.Issue(t, "127.0.0.1")
			secret := certstest.NewSecret(t, filepath.Join(t.TempDir(), "certs"), first, ca)
			env := envOf(map[string]string{
				"GRPC_SERVER_USE_TLS":  "true",
				"GRPC_SERVER_TLS_CERT": secret.Cert(),
				"GRPC_SERVER_TLS_KEY":  secret.Key(),
			})
			s := startEnv(t, env, "-config", tlsConfigFile(t))
			client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
			now := time.Now()
			next := ca.IssueValid(t, now.Add(tc.notBefore), now.Add(tc.notAfter), "127.0.0.1")
			secret.Update(t, next, ca)
			calls := 0
			for end := time.Now().Add(2200 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
				if got, err := askTLS(t, s.grpc, client); err != nil || got != first.Serial.String() {
					t.Fatalf("call %d after the rotation: serial %s, %v; want the previous %s", calls, got, err, first.Serial)
				}
				calls++
			}
			var lines []string
			for l := range strings.Lines(s.log.String()) {
				if strings.Contains(l, "certificate not reloaded") {
					lines = append(lines, l)
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d log lines for one refused rotation, want 1:\n%s", len(lines), s.log.String())
			}
			for _, want := range []string{tc.reason, "file=" + secret.Cert(),
				"not_before=" + next.NotBefore.Format(time.RFC3339), "not_after=" + next.NotAfter.Format(time.RFC3339)} {
				if !strings.Contains(lines[0], want) {
					t.Errorf("log line %q does not say %q", lines[0], want)
				}
			}
			t.Logf("%d fresh TLS calls over 2.2 s after the rotation, all with the previous certificate", calls)

			// At start, the same certificate is an error.
			var log syncBuffer
			code := run(t.Context(), []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-config", tlsConfigFile(t)}, env, &log, &log)
			if code == 0 || !strings.Contains(log.String(), tc.startErr) || !strings.Contains(log.String(), secret.Cert()) {
				t.Errorf("started with the certificate: exit %d, output %q; want an error saying it %s", code, log.String(), tc.startErr)
			}
		})
	}
}
