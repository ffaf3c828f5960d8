package envoytest

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNetworkError(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want bool
	}{
		{`go: module lookup: Get "https://proxy.golang.org/x/@v/list": dial tcp: lookup proxy.golang.org: no such host`, true},
		{`Get "http://127.0.0.1:1/x/@v/v1.info": dial tcp 127.0.0.1:1: connect: connection refused`, true},
		{`net/http: TLS handshake timeout`, true},
		{`src/main.go:3:2: undefined: foo`, false},
		{`go: github.com/x@v1: invalid version: unknown revision v1`, false},
	} {
		if got := networkError([]byte(tc.out)); got != tc.want {
			t.Errorf("networkError(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if got := moduleOf(filepath.Join(root, "go.mod")); got != serverModule {
		t.Errorf("moduleRoot %s declares %q, want %q", root, got, serverModule)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "envoytest")); err != nil {
		t.Errorf("moduleRoot %s: %v", root, err)
	}
}

func TestFreePorts(t *testing.T) {
	ports := freePorts(t, 3)
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("freePorts = %v: want 3 distinct ports", ports)
		}
		seen[p] = true
	}
}
