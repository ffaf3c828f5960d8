package ratekeeper_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func TestAllSpec(t *testing.T) {
	second := ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}
	day := ratekeeper.FixedWindow{Limit: 1000, Window: 24 * time.Hour}
	hour := ratekeeper.Named("hour", ratekeeper.SlidingWindowCounter{Limit: 5, Window: time.Hour})
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.All(ratekeeper.All(second, day), hour))
	if err != nil {
		t.Fatal(err)
	}
	spec := lim.Spec()
	var names []string
	for _, p := range spec.Policies() {
		names = append(names, p.Name())
	}
	if got := strings.Join(names, ","); got != "gcra,fixed_window,hour" {
		t.Errorf("parts %s, want the nested All flattened, named by algorithm unless Named", got)
	}
	if spec.MaxCost() != 5 || lim.Name() != "all" || spec.Limit() != 0 {
		t.Errorf("MaxCost %d, Name %q, Limit %d; want the smallest MaxCost (5), \"all\" and no Limit", spec.MaxCost(), lim.Name(), spec.Limit())
	}
	if _, err := driver.Validate(spec.Spec()); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if l, err := ratekeeper.New(memstore.New(), ratekeeper.All(second, day), ratekeeper.WithName("api")); err != nil || l.Name() != "api" {
		t.Errorf("WithName on an All: %v, %v", l, err)
	}
}

func TestAllInvalid(t *testing.T) {
	fw := ratekeeper.FixedWindow{Limit: 10, Window: time.Second}
	tooMany := make([]ratekeeper.Policy, driver.MaxParts+1)
	for i := range tooMany {
		tooMany[i] = ratekeeper.Named(strings.Repeat("p", i+1), fw)
	}
	tests := []struct {
		name   string
		policy ratekeeper.Policy
		opts   []ratekeeper.Option
		says   string
	}{
		{"no policies", ratekeeper.All(), nil, "1 to 8 policies"},
		{"too many", ratekeeper.All(tooMany...), nil, "not 9"},
		{"nil policy", ratekeeper.All(fw, nil), nil, "nil"},
		{"same names", ratekeeper.All(fw, ratekeeper.FixedWindow{Limit: 100, Window: time.Minute}), nil, "ratekeeper.Named"},
		{"same given names", ratekeeper.All(ratekeeper.Named("a", fw), ratekeeper.Named("a", ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1})), nil, `named "a"`},
		{"invalid part", ratekeeper.All(fw, ratekeeper.GCRA{Rate: 0, Period: time.Second, Burst: 1}), nil, "GCRA"},
		{"empty name", ratekeeper.Named("", fw), nil, "name is empty"},
		{"long name", ratekeeper.Named(strings.Repeat("x", ratekeeper.MaxNameLen+1), fw), nil, "longer than 64"},
		{"control character", ratekeeper.Named("a\nb", fw), nil, "unprintable"},
		{"invalid UTF-8", ratekeeper.Named("a\xffb", fw), nil, "UTF-8"},
		{"Named nil", ratekeeper.Named("x", nil), nil, "nil Policy"},
		{"WithName unprintable", fw, []ratekeeper.Option{ratekeeper.WithName("a\tb")}, "unprintable"},
	}
	for _, tt := range tests {
		_, err := ratekeeper.New(memstore.New(), tt.policy, tt.opts...)
		if !errors.Is(err, ratekeeper.ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v; want ErrInvalidPolicy saying %q", tt.name, err, tt.says)
		}
	}

	// Hand-made Specs are checked as strictly.
	good, err := ratekeeper.All(fw, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 3}).Spec()
	if err != nil {
		t.Fatal(err)
	}
	bad := []func(s *driver.Spec){
		func(s *driver.Spec) { s.MaxCost = 10 },
		func(s *driver.Spec) { s.Limit = 3 },
		func(s *driver.Spec) { s.Parts = nil },
		func(s *driver.Spec) { s.Parts = append(s.Parts[:1:1], good) },
		func(s *driver.Spec) { s.Parts = []driver.Spec{s.Parts[0], s.Parts[0]} },
	}
	for i, f := range bad {
		s := good
		f(&s)
		if _, err := driver.Validate(s); !errors.Is(err, driver.ErrInvalidSpec) {
			t.Errorf("bad Spec %d: Validate = %v, want ErrInvalidSpec", i, err)
		}
		if _, err := ratekeeper.New(memstore.New(), specPolicy(s)); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("bad Spec %d: New = %v, want ErrInvalidPolicy", i, err)
		}
	}
	parts, _ := ratekeeper.FixedWindow{Limit: 1, Window: time.Second}.Spec()
	parts.Parts = good.Parts
	if _, err := driver.Validate(parts); !errors.Is(err, driver.ErrInvalidSpec) {
		t.Errorf("a FixedWindow with Parts: Validate = %v, want ErrInvalidSpec", err)
	}
}
