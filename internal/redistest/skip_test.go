package redistest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelperSkipped is run by TestSkipReport in a child process, without a
// test Redis; it does nothing otherwise.
func TestHelperSkipped(t *testing.T) {
	if os.Getenv("REDISTEST_HELPER") == "" {
		return
	}
	Addr(t)
}

// TestMain reports this package's own skips, like every package whose
// tests use it.
func TestMain(m *testing.M) { os.Exit(Run(m)) }

// runHelper runs TestHelperSkipped in a child process without a test Redis
// and with the given CI value, and returns its whole output and whether it
// passed. The child runs under sh, so that the line Run writes to its
// parent's standard error is in the output too.
func runHelper(t *testing.T, ci string) (string, bool) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `"$0" "$@"; exit $?`, os.Args[0], "-test.run=^TestHelperSkipped$", "-test.count=1")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvAddr+"=") && !strings.HasPrefix(kv, "CI=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "REDISTEST_HELPER=1", "CI="+ci)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), err == nil
}

func TestSkipReport(t *testing.T) {
	out, passed := runHelper(t, "")
	if !passed {
		t.Fatalf("without Redis and outside CI, the test failed:\n%s", out)
	}
	want := "github.com/ratekeeper/ratekeeper/internal/redistest: 1 test skipped for want of Redis; run `make test`"
	if !strings.Contains(out, want) {
		t.Errorf("the output lacks %q:\n%s", want, out)
	}
}

func TestSkipFailsUnderCI(t *testing.T) {
	out, passed := runHelper(t, "true")
	if passed {
		t.Fatalf("without Redis and with CI=true, the test passed:\n%s", out)
	}
	if !strings.Contains(out, "no test Redis") || strings.Contains(out, "skipped for want of Redis") {
		t.Errorf("want a failure naming the missing Redis, and no skip line:\n%s", out)
	}
}

// TestEveryRedisPackageReports checks that every package whose tests can
// skip for want of Redis reports it, by calling Run from its TestMain.
func TestEveryRedisPackageReports(t *testing.T) {
	uses := regexp.MustCompile(`redistest\.(Addr|Client|ClusterAddrs|ClusterClient|StartServer|StartServerWith|StartCluster|StartOneNodeCluster|StartSentinel|Skip)\(`)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string][2]bool{} // dir: uses redistest, calls Run
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		seen := dirs[dir]
		seen[0] = seen[0] || uses.Match(src)
		seen[1] = seen[1] || bytes.Contains(src, []byte("redistest.Run(m)"))
		dirs[dir] = seen
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, seen := range dirs {
		if seen[0] && !seen[1] {
			rel, _ := filepath.Rel(root, dir)
			t.Errorf("%s: its tests skip for want of Redis, but no TestMain calls redistest.Run(m) to say so", rel)
		}
	}
}
