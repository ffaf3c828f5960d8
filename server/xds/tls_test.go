package xds_test

import (
	"bytes"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/server/internal/certs"
	"github.com/ratekeeper/ratekeeper/server/internal/certs/certstest"
	"github.com/ratekeeper/ratekeeper/server/xds"
)

// clientLeaf is the client certificate a handshake under tlsFn presents.
func clientLeaf(t *testing.T, tlsFn func() (*tls.Config, error)) []byte {
	t.Helper()
	cfg, err := tlsFn()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || len(c.Certificate) == 0 {
		t.Fatalf("no client certificate: %v", err)
	}
	return c.Certificate[0]
}

// TestTLSFilesOutOfDate checks that a client certificate expired or not
// yet valid is an error at start, and rotated in later is refused: the
// previous one is presented, and the refusal reported once.
func TestTLSFilesOutOfDate(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	now := time.Now()
	for _, tc := range []struct {
		name string
		leaf *certstest.Leaf
		want string
	}{
		{"expired", ca.IssueValid(t, now.Add(-48*time.Hour), now.Add(-time.Hour), "envoy"), "has expired"},
		{"not yet valid", ca.IssueValid(t, now.Add(time.Hour), now.Add(48*time.Hour), "envoy"), "is not valid yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bad := certstest.NewSecret(t, t.TempDir(), tc.leaf, ca)
			if _, err := xds.TLSFiles(bad.Cert(), bad.Key(), "", "", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("at start: %v, want an error saying it %s", err, tc.want)
			}
			good := ca.Issue(t, "envoy")
			secret := certstest.NewSecret(t, t.TempDir(), good, ca)
			var mu sync.Mutex
			var errs []error
			tlsFn, err := xds.TLSFiles(secret.Cert(), secret.Key(), "", "", func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			first := clientLeaf(t, tlsFn)
			secret.Update(t, tc.leaf, ca)
			for end := time.Now().Add(2*certs.CheckInterval + 200*time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if !bytes.Equal(clientLeaf(t, tlsFn), first) {
					t.Fatal("the client certificate out of its dates is presented")
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) || !strings.Contains(errs[0].Error(), secret.Cert()) {
				t.Errorf("reported %v; want one report naming %s and saying it %s", errs, secret.Cert(), tc.want)
			}
		})
	}
}
