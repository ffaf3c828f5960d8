package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

func xdsLimit(unit rlsconfv3.RateLimitUnit, rpu uint32) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}
}

// TestFromXDSLikeYAML checks that a pushed configuration builds the same
// rules as the YAML file it stands for.
func TestFromXDSLikeYAML(t *testing.T) {
	pushed := []*rlsconfv3.RateLimitConfig{{
		Name:   "api",
		Domain: "api",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "user", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_MINUTE, 5)},
			{Key: "path", Value: "/login", RateLimit: &rlsconfv3.RateLimitPolicy{
				Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 2, Name: "login",
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "other"}}}},
			{Key: "flag", Value: "yes", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_WEEK, 1)},
			{Key: "team", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "user", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_SECOND, 3), ShadowMode: true, DetailedMetric: true},
			}},
			{Key: "vip", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
			{Key: "block", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_YEAR, 0)},
			{Key: "month", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_MONTH, 7)},
		},
	}, {Name: "other", Domain: "other", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", Value: "v*", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_DAY, 9)},
	}}}
	got, err := FromXDS(pushed)
	if err != nil {
		t.Fatal(err)
	}
	if w := got.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %v", w)
	}
	want, errs := loadYAML(t, `domain: api
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2, name: login, replaces: [{name: other}]}
  - {key: flag, value: "yes", rate_limit: {unit: week, requests_per_unit: 1}}
  - key: team
    descriptors:
      - {key: user, shadow_mode: true, detailed_metric: true, rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: vip, rate_limit: {unlimited: true}}
  - {key: block, rate_limit: {unit: year, requests_per_unit: 0}}
  - {key: month, rate_limit: {unit: month, requests_per_unit: 7}}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	if d := got.Domains(); !reflect.DeepEqual(d, []string{"api", "other"}) {
		t.Errorf("domains %v", d)
	}
	if f := got.Files(); !reflect.DeepEqual(f, []string{`RateLimitConfig "api"`, `RateLimitConfig "other"`}) {
		t.Errorf("files %v", f)
	}
	gr, wr := got.Rules("api"), want.Rules("api")
	if len(gr) != len(wr) || len(gr) != 7 {
		t.Fatalf("%d rules pushed, %d from YAML, want 7", len(gr), len(wr))
	}
	for i := range gr {
		g, w := *gr[i], *wr[i]
		if g.Line != 0 {
			t.Errorf("rule %s: line %d, want 0", g.Name, g.Line)
		}
		g.File, g.Line, w.File, w.Line = "", 0, "", 0
		if !reflect.DeepEqual(g, w) {
			t.Errorf("rule %d:\npushed %+v\nYAML   %+v", i, g, w)
		}
	}
	for _, q := range [][]Entry{
		{{"user", "u1"}}, {{"path", "/login"}}, {{"flag", "yes"}}, {{"team", "a"}, {"user", "b"}}, {{"vip", "x"}},
	} {
		g, w := got.Lookup("api", q), want.Lookup("api", q)
		if g == nil || w == nil || g.Name != w.Name {
			t.Errorf("Lookup(%v): pushed %v, YAML %v", q, g, w)
		}
	}
	if r := got.Lookup("other", []Entry{{"k", "value"}}); r == nil || r.Limits[0].RequestsPerUnit != 9 {
		t.Errorf("wildcard: %+v", r)
	}
}

// TestFromXDSErrors checks that an invalid push is refused with every
// problem, each naming the resource and the field.
func TestFromXDSErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  []*rlsconfv3.RateLimitConfig
		want []string
	}{
		{"no unit", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "a", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_SECOND, 1)},
			{Key: "b", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "c", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}},
		}}}, []string{`RateLimitConfig "r": descriptors[1].descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`}},
		{"unknown unit number", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "a", RateLimit: xdsLimit(99, 1)},
		}}}, []string{`RateLimitConfig "r": descriptors[0].rate_limit.unit: invalid rate limit unit '99'`}},
		{"unlimited with a unit", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "a", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_HOUR}},
		}}}, []string{`RateLimitConfig "r": descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited`}},
		{"empty domain and key", []*rlsconfv3.RateLimitConfig{{Name: "r", Descriptors: []*rlsconfv3.RateLimitDescriptor{{}}}},
			[]string{`RateLimitConfig "r": domain: config file cannot have empty domain`,
				`RateLimitConfig "r": descriptors[0].key: descriptor has empty key`}},
		{"duplicate descriptor", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "a"}, {Key: "a"},
		}}}, []string{`RateLimitConfig "r": descriptors[1]: duplicate descriptor composite key 'd.a'`}},
		{"duplicate domain", []*rlsconfv3.RateLimitConfig{{Name: "one", Domain: "d"}, {Name: "two", Domain: "d"}},
			[]string{`RateLimitConfig "two": domain: duplicate domain 'd' in config file (first defined at RateLimitConfig "one")`}},
		{"empty replaces", []*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "a", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1, Replaces: []*rlsconfv3.RateLimitReplace{{}}}},
		}}}, []string{`RateLimitConfig "r": descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry`}},
		{"nil resource", []*rlsconfv3.RateLimitConfig{nil}, []string{`RateLimitConfig "": resource 0 is empty`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromXDS(tc.res)
			if err == nil {
				t.Fatalf("no error; domains %v", c.Domains())
			}
			errs := Errors(err)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors:\n%v\nwant %d", err, len(tc.want))
			}
			for i, e := range errs {
				var ce *Error
				if !errors.As(e, &ce) || ce.Line != 0 {
					t.Errorf("%v: not an *Error without a line", e)
				}
				if !strings.HasPrefix(e.Error(), tc.want[i]) {
					t.Errorf("error %d:\n%s\nwant it to start with\n%s", i, e, tc.want[i])
				}
			}
		})
	}
}

// TestFromXDSEmpty checks that a push of no resources is an empty, valid
// configuration, as envoy has it.
func TestFromXDSEmpty(t *testing.T) {
	c, err := FromXDS(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Domains()) != 0 || c.HasDomain("") {
		t.Errorf("domains %v", c.Domains())
	}
}

// TestFromXDSStrings checks that keys and values that mean something
// else in YAML reach the configuration as the strings they are.
func TestFromXDSStrings(t *testing.T) {
	for _, s := range []string{"yes", "~", "null", "0x10", "1e3", "08", "a: b", "- x", "#x", "&a", "*a", "!!int 1",
		"<<", "\t tab", "line\nbreak", "日本", `"quoted"`, "'single'", "{}", "[1]", "trailing "} {
		c, err := FromXDS([]*rlsconfv3.RateLimitConfig{{Name: s, Domain: s, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: s, Value: s, RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_SECOND, 1)},
			{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: s, RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_HOUR, 2)}}},
		}}})
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		if r := c.Lookup(s, []Entry{{s, s}}); r == nil || r.Limits[0].RequestsPerUnit != 1 {
			t.Errorf("%q: Lookup of key and value: %+v", s, r)
		}
		if r := c.Lookup(s, []Entry{{"k", "v"}, {s, "any"}}); r == nil || r.Limits[0].RequestsPerUnit != 2 {
			t.Errorf("%q: Lookup of the nested key: %+v", s, r)
		}
		if w := c.Warnings(); len(w) > 0 {
			t.Errorf("%q: warnings %v", s, w)
		}
	}
}

// TestFromXDSQuotaBuckets: the quota buckets of a QuotaBucketsKey
// descriptor are those of the file it stands for, and the descriptors
// beside it are the domain's rules.
func TestFromXDSQuotaBuckets(t *testing.T) {
	got, err := FromXDS([]*rlsconfv3.RateLimitConfig{{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "user", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_MINUTE, 5)},
		{Key: QuotaBucketsKey, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "name", Value: "global", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_SECOND, 10000)},
			{Key: "team", Value: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "tenant", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 600, Name: "tenants"}},
			}},
		}},
		{Key: "path", Value: "/x", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_HOUR, 1)},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	want, errs := loadYAML(t, `domain: api
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: path, value: /x, rate_limit: {unit: hour, requests_per_unit: 1}}
quota_buckets:
  - bucket: {name: global}
    rate_limit: {unit: second, requests_per_unit: 10000}
  - bucket: {team: a, tenant: "*"}
    rate_limit: {unit: minute, requests_per_unit: 600, name: tenants}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	strip := func(qs []*QuotaBucket) []QuotaBucket {
		var out []QuotaBucket
		for _, q := range qs {
			c := *q
			c.File, c.Line = "", 0
			out = append(out, c)
		}
		return out
	}
	if g, w := strip(got.QuotaBuckets("api")), strip(want.QuotaBuckets("api")); !reflect.DeepEqual(g, w) {
		t.Errorf("quota buckets:\n%+v\nwant\n%+v", g, w)
	}
	if g, w := len(got.Rules("api")), len(want.Rules("api")); g != w || g != 2 {
		t.Errorf("%d rules, want %d", g, w)
	}
	if r := got.Lookup("api", []Entry{{Key: QuotaBucketsKey, Value: "x"}}); r != nil {
		t.Errorf("the quota buckets' descriptor is a rule: %+v", r)
	}
}

// TestFromXDSQuotaBucketErrors: errors in quota buckets, and in the
// descriptors after them, name the resource's own fields.
func TestFromXDSQuotaBucketErrors(t *testing.T) {
	_, err := FromXDS([]*rlsconfv3.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: QuotaBucketsKey, RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_SECOND, 1), Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "name", Value: "a", RateLimit: xdsLimit(rlsconfv3.RateLimitUnit_WEEK, 1)},
			{Key: "name", Value: "b", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		}},
		{Key: "b", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "c", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}},
	}}})
	want := []string{
		`RateLimitConfig "r": descriptors[0]: a ratekeeper.quota_buckets descriptor holds quota buckets below it, and no value or rate_limit of its own`,
		`RateLimitConfig "r": descriptors[0].descriptors[0].rate_limit.unit:`,
		`RateLimitConfig "r": descriptors[0].descriptors[1].rate_limit.unlimited:`,
		`RateLimitConfig "r": descriptors[1].descriptors[0].rate_limit.unit: invalid rate limit unit 'UNKNOWN'`,
	}
	errs := Errors(err)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
			t.Errorf("no error starting %s in\n%s", w, strings.Join(got, "\n"))
		}
	}
}
