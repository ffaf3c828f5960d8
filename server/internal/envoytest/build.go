package envoytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/prebuilt"
)

// buildTimeout bounds one build: envoy's service takes from 40 s (its
// modules downloaded) to several minutes (nothing cached, on a busy
// machine).
const buildTimeout = 15 * time.Minute

// buildTime returns how long a build may take: buildTimeout, or less if
// the test binary's -timeout comes first, leaving time to report the
// failure rather than panic.
func buildTime(t testing.TB) time.Duration {
	d := buildTimeout
	if tt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := tt.Deadline(); ok {
			d = min(d, time.Until(deadline)-30*time.Second)
		}
	}
	return max(d, time.Second)
}

var (
	envoyOnce sync.Once
	envoyPath string
	envoyErr  error
	// envoySkip: envoyErr means the module proxy could not be reached.
	envoySkip bool
)

// Binary returns the path of envoyproxy/ratelimit's service at
// EnvoyVersion, building it on first use with `go install` into a
// directory under the user's cache directory, keyed by version, so that
// later runs reuse it. EnvBinary overrides it. It skips t when the module
// proxy cannot be reached (failing it under CI=true), and fails t when the
// build fails otherwise.
func Binary(t testing.TB) string {
	t.Helper()
	envoyOnce.Do(func() { envoyPath, envoySkip, envoyErr = buildEnvoy(buildTime(t)) })
	if envoyErr != nil {
		if envoySkip {
			skip(t, "envoyproxy/ratelimit cannot be built, the module proxy is unreachable: "+envoyErr.Error())
		}
		t.Fatalf("building envoyproxy/ratelimit: %v", envoyErr)
	}
	return envoyPath
}

// buildEnvoy returns the cached binary or builds it. unreachable says
// that err came from the network.
func buildEnvoy(timeout time.Duration) (path string, unreachable bool, err error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", false, fmt.Errorf("%s: %w", EnvBinary, err)
		}
		return p, false, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "ratekeeper", "envoy-ratelimit", EnvoyVersion)
	path = filepath.Join(dir, "service_cmd")
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, false, nil
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", false, fmt.Errorf("no go command to build it with: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	// Build into a directory of our own, then rename: a concurrent build
	// by another test binary never sees a half-written file.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "install", EnvoyModule+"/src/service_cmd@"+EnvoyVersion)
	// Outside any module or workspace, so that this module's requirements
	// do not bear on envoy's.
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOBIN="+filepath.Join(tmp, "bin"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := fmt.Errorf("go install %s/src/service_cmd@%s: %w\n%s", EnvoyModule, EnvoyVersion, err, out)
		return "", networkError(out), msg
	}
	if err := os.Rename(filepath.Join(tmp, "bin", "service_cmd"), path); err != nil {
		return "", false, err
	}
	return path, false, nil
}

// networkError reports whether the go command's output says the module
// proxy (or the network) could not be reached, rather than that the build
// failed.
func networkError(out []byte) bool {
	for _, s := range []string{
		"dial tcp", "no such host", "connection refused", "network is unreachable",
		"i/o timeout", "TLS handshake timeout", "proxyconnect", "server misbehaving",
		"connection reset", "temporary failure in name resolution",
	} {
		if bytes.Contains(bytes.ToLower(out), []byte(strings.ToLower(s))) {
			return true
		}
	}
	return false
}

// serverModule is the import path of this module, whose root holds
// cmd/ratekeeper-server.
const serverModule = "github.com/ratekeeper/ratekeeper/server"

var (
	serverOnce sync.Once
	serverPath string
	serverErr  error
	// serverMissing: the module has no cmd/ratekeeper-server yet.
	serverMissing bool
	// serverDir holds the binary; Run removes it.
	serverDir atomic.Pointer[string]
)

// HasRatekeeper reports whether this module has cmd/ratekeeper-server,
// so that a test can run its envoy half alone while the server is not
// written yet. It is true as soon as the directory exists, whether or not
// the command builds.
func HasRatekeeper(t testing.TB) bool {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.Stat(filepath.Join(root, "cmd", "ratekeeper-server"))
	return !errors.Is(err, os.ErrNotExist)
}

// serverBinary returns ratekeeper-server built from this module's source,
// once per test binary unless make test built it for the whole run, with
// the race detector when this test binary has it. It skips t only while the command's directory does not exist.
func serverBinary(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() { serverPath, serverMissing, serverErr = buildServer(buildTime(t)) })
	if serverMissing {
		skipped.Add(1)
		t.Skip("ratekeeper-server is not written yet: " + serverErr.Error())
	}
	if serverErr != nil {
		t.Fatalf("building ratekeeper-server: %v", serverErr)
	}
	return serverPath
}

// ServerBinary returns ratekeeper-server built from this module's source,
// as serverBinary does (Run removes it if it built it), for tests that
// start it their own way.
func ServerBinary(t testing.TB) string {
	t.Helper()
	return serverBinary(t)
}

// buildServer returns the ratekeeper-server that make test built for
// this run (prebuilt.ServerEnv, or prebuilt.ServerRaceEnv for a test
// binary with the race detector: see internal/prebuilt), or else builds
// cmd/ratekeeper-server into a temporary directory. missing says that the
// command's directory does not exist.
func buildServer(timeout time.Duration) (path string, missing bool, err error) {
	if p, _, err := prebuilt.Server(raceEnabled()); p != "" || err != nil {
		return p, false, err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", false, err
	}
	src := filepath.Join(root, "cmd", "ratekeeper-server")
	if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
		return "", true, fmt.Errorf("%s does not exist", src)
	}
	dir, err := os.MkdirTemp("", "ratekeeper-server-")
	if err != nil {
		return "", false, err
	}
	serverDir.Store(&dir)
	path = filepath.Join(dir, "ratekeeper-server")
	args := []string{"build", "-o", path}
	if raceEnabled() {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/ratekeeper-server")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return path, false, nil
}

// moduleRoot finds this module's root: the nearest directory above the
// working directory (the package under test) whose go.mod declares it.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if moduleOf(filepath.Join(dir, "go.mod")) == serverModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", serverModule)
		}
		dir = parent
	}
}

// moduleOf returns the module path a go.mod declares, or "".
func moduleOf(gomod string) string {
	f, err := os.Open(gomod)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// raceEnabled reports whether this test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}
