package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/catalog"
)

// TestEveryAlgorithm checks that a rate_limit may choose each of
// ratekeeper's algorithms, whose policy is its PerPeriod of the limit,
// and takes a burst exactly when the algorithm does, its
// requests_per_unit when none is given.
func TestEveryAlgorithm(t *testing.T) {
	for _, a := range catalog.All() {
		for _, burst := range []int64{0, 20} {
			yaml := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: %s", a.Name)
			if burst != 0 {
				yaml += fmt.Sprintf(", burst: %d", burst)
			}
			c, errs := loadYAML(t, yaml+"}\n")
			if burst != 0 && !a.Bursts() {
				if len(errs) != 1 || !strings.Contains(errs[0], "rate_limit.burst: burst is the capacity of algorithm") {
					t.Errorf("%s with a burst: %q; want the error of a burst", a.Name, errs)
				}
				continue
			}
			if errs != nil {
				t.Errorf("%s, burst %d: %q", a.Name, burst, errs)
				continue
			}
			want := a.PerPeriod(10, time.Second, 10)
			if burst != 0 {
				want = a.PerPeriod(10, time.Second, burst)
			}
			if got := c.Lookup("d", []Entry{{"k", "v"}}).Limits[0].Policy; !reflect.DeepEqual(got, want) {
				t.Errorf("%s, burst %d: policy %#v; want %#v", a.Name, burst, got, want)
			}
		}
	}
}

// TestUnknownAlgorithmOneError: a mistyped algorithm with a burst gets
// one error, the algorithm's, and none about the burst, which may well be
// right for the algorithm meant.
func TestUnknownAlgorithmOneError(t *testing.T) {
	_, errs := loadYAML(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_buckt, burst: 20}\n")
	if len(errs) != 1 || !strings.Contains(errs[0], "unknown algorithm 'token_buckt'") {
		t.Errorf("errors %q, want one about the algorithm", errs)
	}
	// A burst on a known algorithm without one is still an error.
	_, errs = loadYAML(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window, burst: 20}\n")
	if len(errs) != 1 || !strings.Contains(errs[0], "burst is the capacity") {
		t.Errorf("errors %q, want one about the burst", errs)
	}
}
