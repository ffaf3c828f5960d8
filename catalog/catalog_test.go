package catalog_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestAlgorithmsListEveryAlgorithm checks that every algorithm of the
// driver is described, sorted by name, and that each description is whole.
func TestAlgorithmsListEveryAlgorithm(t *testing.T) {
	var names []string
	for _, a := range catalog.All() {
		names = append(names, a.Name)
		if a.Policy == "" || a.Short == "" || a.Label == "" || a.Doc == "" || a.Remaining == "" || a.Summary == "" {
			t.Errorf("%s: incomplete: %+v", a.Name, a)
		}
		if a.Bursts() && a.Recovers == "" {
			t.Errorf("%s takes a burst but says not how it recovers", a.Name)
		}
		for _, p := range a.Params {
			if !strings.Contains(a.Summary, "{"+p.Name+"}") {
				t.Errorf("%s: its summary %q leaves out %s", a.Name, a.Summary, p.Name)
			}
			if p.Label == "" || p.Doc == "" || p.Default < p.Min || p.Kind != catalog.ParamWhole && p.Default == p.Min || p.Default > p.Max {
				t.Errorf("%s.%s: %+v", a.Name, p.Name, p)
			}
		}
		if got, ok := catalog.Lookup(a.Name); !ok || got.Name != a.Name {
			t.Errorf("Lookup(%q) = %v, %v", a.Name, got.Name, ok)
		}
	}
	if want := driver.Algorithms(); !slices.Equal(names, want) {
		t.Errorf("All() = %v; want the driver's %v", names, want)
	}
	if _, ok := catalog.Lookup("nope"); ok {
		t.Error("Lookup found an unknown algorithm")
	}
}

// TestAlgorithmDefaults checks that every algorithm's defaults make a
// valid policy.
func TestAlgorithmDefaults(t *testing.T) {
	for _, a := range catalog.All() {
		values := make([]float64, len(a.Params))
		for i, p := range a.Params {
			values[i] = p.Default
		}
		p, err := a.Build(values)
		if err == nil {
			_, err = ratekeeper.New(memstore.New(), p)
		}
		if err != nil {
			t.Errorf("%s defaults: %v", a.Name, err)
		}
	}
}

// TestAlgorithmPerPeriod checks that PerPeriod sets each Param from its
// Role: over a period of a second, the policy Build makes from n, 1 s and
// the burst.
func TestAlgorithmPerPeriod(t *testing.T) {
	const n, burst = 7, 12
	for _, a := range catalog.All() {
		values := make([]float64, len(a.Params))
		for i, p := range a.Params {
			switch p.Role {
			case catalog.RoleRate:
				values[i] = n
			case catalog.RolePeriod:
				values[i] = 1
			case catalog.RoleBurst:
				values[i] = burst
			}
		}
		want, err := a.Build(values)
		if got := a.PerPeriod(n, time.Second, burst); err != nil || got != want {
			t.Errorf("%s: PerPeriod(%d, 1s, %d) = %#v; want %#v (%v)", a.Name, n, burst, got, want, err)
		}
	}
}

// TestAlgorithmBuild checks Build's conversions: seconds to the
// nanosecond, whole numbers only where whole, and the error of a time too
// long for a Duration.
func TestAlgorithmBuild(t *testing.T) {
	gcra, _ := catalog.Lookup(driver.AlgorithmGCRA)
	for s, want := range map[float64]time.Duration{
		1:        time.Second,
		0.1:      100 * time.Millisecond,
		1.5:      1500 * time.Millisecond,
		0.000001: time.Microsecond,
		-2:       -2 * time.Second, // for New to reject
	} {
		p, err := gcra.Build([]float64{3, s, 4})
		if want := (ratekeeper.GCRA{Rate: 3, Period: want, Burst: 4}); err != nil || p != want {
			t.Errorf("Build(3, %v, 4) = %#v, %v; want %#v", s, p, err, want)
		}
	}
	for _, values := range [][]float64{{2.5, 1, 4}, {3, 1e12, 4}, {3, 1}} {
		_, err := gcra.Build(values)
		var pe *ratekeeper.PolicyError
		if !errors.As(err, &pe) || pe.Policy != "GCRA" {
			t.Errorf("Build(%v) = %v; want a *PolicyError", values, err)
		}
	}
}

// A configuration that names an algorithm, and n requests per period,
// makes its policy from the registry; the error of a policy out of
// bounds says which bound, and its value.
func ExampleLookup() {
	a, ok := catalog.Lookup("gcra")
	if !ok {
		return
	}
	fmt.Println(a.Label, "takes a burst:", a.Bursts())
	for _, p := range a.Params {
		fmt.Printf("  %s (%s), %v to %v, default %v\n", p.Name, p.Doc, p.Min, p.Max, p.Default)
	}
	p := a.PerPeriod(10, time.Second, 20)
	fmt.Printf("%#v\n", p)

	_, err := ratekeeper.New(memstore.New(), a.PerPeriod(10, 5*time.Microsecond, 1))
	var pe *ratekeeper.PolicyError
	if errors.As(err, &pe) {
		fmt.Println(pe.Field, pe.Bound, pe.Limit)
	}
	// Output:
	// GCRA takes a burst: true
	//   rate (requests per period), 1 to 1e+09, default 1
	//   period (seconds), 0 to 3.1536e+08, default 1
	//   burst (requests at once), 1 to 1e+09, default 10
	// ratekeeper.GCRA{Rate:10, Period:1000000000, Burst:20}
	// Rate BoundRate 5
}
