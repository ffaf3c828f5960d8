package drivertest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/driver/drivertest"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// brokenEnv names, in a child process of TestBrokenStoresFail, the store
// TestBrokenStoreChild runs the suite on.
const brokenEnv = "DRIVERTEST_BROKEN_STORE"

// TestBrokenStoresFail: the suite fails a store that forgets a key's
// state between calls, and one that decides one request wrongly, and
// passes the store they break. Each runs in a child process, whose
// failure the suite reports as a test's would, with -short if this run
// has it.
func TestBrokenStoresFail(t *testing.T) {
	for _, tc := range []struct {
		store string
		fails []string // subtests that must fail; none: the run passes
	}{
		{"memstore", nil},
		{"plain", nil}, // no optional interface: their tests skip
		{"forgetful", []string{"TokenBucketScenarios", "AllScenario", "RandomEquivalence"}},
		{"one-wrong", []string{"TokenBucketScenarios", "GCRAScenarios", "RandomEquivalence"}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel() // each in a process of its own
			args := []string{"-test.run=^TestBrokenStoreChild$", "-test.count=1", "-test.v"}
			if testing.Short() {
				// The child runs the suite as this run does: under
				// -short, from one seed.
				args = append(args, "-test.short")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.store)
			out, err := cmd.CombinedOutput()
			if tc.fails == nil {
				if err != nil {
					t.Fatalf("the suite fails a %s store: %v\n%s", tc.store, err, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("the suite passes a %s store:\n%s", tc.store, out)
			}
			for _, name := range tc.fails {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenStoreChild/"+name+" ") {
					t.Errorf("the suite does not fail %s on a %s store:\n%s", name, tc.store, out)
				}
			}
		})
	}
}

// TestBrokenStoreChild runs the suite on the store brokenEnv names, in a
// child process of TestBrokenStoresFail; it skips otherwise.
func TestBrokenStoreChild(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("run by TestBrokenStoresFail")
	}
	drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
		s := memstore.New(memstore.WithClock(now), memstore.WithSweepInterval(0))
		t.Cleanup(func() { s.Close() })
		switch kind {
		case "forgetful":
			return forgetful{s}
		case "one-wrong":
			return &oneWrong{Store: s}
		case "plain":
			return plain{s}
		}
		return s
	})
}

// plain hides every optional interface of the store it holds.
type plain struct{ ratekeeper.Store }

// forgetful forgets a key's state before every decision.
type forgetful struct{ ratekeeper.Store }

func (s forgetful) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	if err := s.Store.Reset(ctx, key, spec); err != nil {
		return driver.Decision{}, err
	}
	return s.Store.Decide(ctx, key, spec, n)
}

// oneWrong reports one millionth of a token too many in its third
// decision.
type oneWrong struct {
	ratekeeper.Store
	calls atomic.Int64
}

func (s *oneWrong) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	d, err := s.Store.Decide(ctx, key, spec, n)
	if s.calls.Add(1) == 3 {
		d.Remaining++
		if d.Parts != nil {
			d.Parts[d.Binding].Remaining++
		}
	}
	return d, err
}
