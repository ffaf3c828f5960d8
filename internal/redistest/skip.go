package redistest

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// skipped counts the tests of this test binary that skipped for want of
// Redis, for Run to report.
var skipped atomic.Int64

// Skip skips t because a Redis it needs is missing, and counts it for Run.
// Under CI=true it fails t instead: there, a skipped Redis test is a
// set-up error, not a pass.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(reason + " (CI is set, so a Redis test that cannot run fails)")
	}
	skipped.Add(1)
	t.Skip(reason)
}

// Run runs the tests of m and then, when some of them skipped for want of
// Redis, prints one line saying how many and how to run them. A package
// whose tests use this package calls it from its TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }
func Run(m *testing.M) int {
	code := m.Run()
	if n := skipped.Load(); n > 0 {
		tests := "tests"
		if n == 1 {
			tests = "test"
		}
		fmt.Fprintf(noticeWriter(), "%s: %d %s skipped for want of Redis; run `make test`, which starts one, to run them\n",
			packagePath(), n, tests)
	}
	return code
}

// packagePath returns the import path of the package under test.
func packagePath() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		return strings.TrimSuffix(bi.Path, ".test")
	}
	return os.Args[0]
}

// noticeWriter returns where a line reaches whoever runs the tests. go test
// shows a passing package's output only with -v, so the line goes to the
// standard error of the go command, the test binary's parent, when that is
// a terminal or a pipe; a regular file is left alone, since a second writer
// at its end would be overwritten by the go command's own writes.
func noticeWriter() *os.File {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return os.Stderr
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&(os.ModeCharDevice|os.ModeNamedPipe) == 0 {
		f.Close()
		return os.Stderr
	}
	return f
}
