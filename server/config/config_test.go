package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// loadYAML loads content as the file config.yaml, and returns the errors
// without the file's path: "line: field: message" each.
func loadYAML(t *testing.T, content string) (*Config, []string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write(t, path, content)
	c, err := Load(path)
	if err == nil {
		return c, nil
	}
	var lines []string
	for _, e := range Errors(err) {
		var ce *Error
		if !errors.As(e, &ce) || ce.File != path {
			t.Fatalf("%v is not an *Error of %s", e, path)
		}
		lines = append(lines, strings.TrimPrefix(ce.Error(), path+":"))
	}
	return nil, lines
}

// TestErrors checks that each invalid configuration gets every one of its
// errors, with its line and field.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // line: field: the message's start
	}{
		{"syntax", "domain: d\ndescriptors:\n  - key: a\n   value: b\n", []string{
			"2: invalid YAML: did not find expected '-' indicator"}},
		{"not a mapping", "just a string\n", []string{
			"1: a configuration file is a mapping of domain and descriptors, not a string"}},
		{"no domain", "descriptors:\n  - key: a\n", []string{
			"1: domain: config file cannot have empty domain"}},
		{"empty domain", "domain: ''\n", []string{
			"1: domain: config file cannot have empty domain"}},
		{"unknown key, misspelled", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_units: 5\n", []string{
			"6: descriptors[0].rate_limit.requests_per_units: unknown key 'requests_per_units'"}},
		{"unknown key, suggested", "domain: d\ndescriptors:\n  - key: a\n    shadowMode: true\n", []string{
			"4: descriptors[0].shadowMode: unknown key 'shadowMode' (did you mean 'shadow_mode'?)"}},
		{"key not a string", "domain: d\n[a]: b\n", []string{
			"2: key (a list) is not a string"}},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", []string{
			"3: descriptors[0].key: descriptor has empty key"}},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a_b\n", []string{
			"5: descriptors[1]: duplicate descriptor composite key 'd.a_b'"}},
		{"duplicate nested descriptor", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n", []string{
			"6: descriptors[0].descriptors[1]: duplicate descriptor composite key 'd.a.b'"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", []string{
			"4: descriptors[0].rate_limit.unit: invalid rate limit unit 'fortnight'"}},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n", []string{
			"5: descriptors[0].rate_limit.unit: invalid rate limit unit ''"}},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n", []string{
			"6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"}},
		{"unlimited with extensions", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      algorithm: gcra\n      period: 1s\n      burst: 3\n", []string{
			"6: descriptors[0].rate_limit.algorithm: an unlimited rule takes no algorithm",
			"7: descriptors[0].rate_limit.period: an unlimited rule takes no period",
			"8: descriptors[0].rate_limit.burst: an unlimited rule takes no burst"}},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: [{name: ''}]\n", []string{
			"6: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"}},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n      replaces:\n        - name: x\n", []string{
			"8: descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor"}},
		{"replaces not a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: x\n", []string{
			"6: descriptors[0].rate_limit.replaces: must be a list, not a string"}},
		{"rpu negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -3}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295, got -3"}},
		{"rpu quoted", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '3'}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: must be an integer, not a string (\"3\")"}},
		{"rpu above ratekeeper's limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2000000000}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: 2000000000 is above the largest limit ratekeeper keeps exactly"}},
		{"float value", "domain: d\ndescriptors:\n  - key: v\n    value: 2.0\n", []string{
			"4: descriptors[0].value: 2.0 is read as a floating-point number"}},
		{"bool not a bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: 1\n", []string{
			"4: descriptors[0].shadow_mode: must be true or false, not a number (1)"}},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", []string{
			"2: descriptors: must be a list, not a mapping"}},
		{"descriptor not a mapping", "domain: d\ndescriptors:\n  - a\n", []string{
			"3: descriptors[0]: must be a mapping, not a string"}},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", []string{
			"5: descriptors[0].share_threshold: share_threshold can only be used with wildcard values"}},
		{"unknown key in an ignored value", "domain: d\nunit: {bogus: 1}\n", []string{
			"2: unit.bogus: unknown key 'bogus'"}},
		{"list of scalars in an ignored value", "domain: d\nname: [a]\n", []string{
			"2: name[0]: must be a mapping, not a string"}},
		// ratekeeper's extensions
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token-bucket}\n", []string{
			"4: descriptors[0].rate_limit.algorithm: unknown algorithm 'token-bucket': one of fixed_window, gcra, leaky_bucket, sliding_window_counter, sliding_window_log, token_bucket"}},
		{"unit and period", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      period: 30s\n      requests_per_unit: 1\n", []string{
			"6: descriptors[0].rate_limit.period: give unit or period, not both"}},
		{"bad period", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 5 minutes, requests_per_unit: 1}\n", []string{
			"4: descriptors[0].rate_limit.period: '5 minutes' is not a duration such as 30s, 5m or 1h30m"}},
		{"negative period", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: -5s, requests_per_unit: 1}\n", []string{
			"4: descriptors[0].rate_limit.period: must be positive, got -5s"}},
		{"period below a microsecond", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 1500ns, requests_per_unit: 1}\n", []string{
			"4: descriptors[0].rate_limit.period: ratekeeper.FixedWindow Window 1.5µs is not a whole number of microseconds"}},
		{"period too long", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 100000h, requests_per_unit: 1, algorithm: sliding_window_counter}\n", []string{
			"4: descriptors[0].rate_limit.period: sliding_window_counter Window of 100000h0m0s is out of range (longest 87600h0m0s)"}},
		{"burst without a bucket", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n", []string{
			"7: descriptors[0].rate_limit.burst: burst is the capacity of algorithm gcra, leaky_bucket, token_bucket; a window of envoy's fixed window has none"}},
		{"burst of a window", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window_log, burst: 5}\n", []string{
			"4: descriptors[0].rate_limit.burst: burst is the capacity of algorithm gcra, leaky_bucket, token_bucket; a window of sliding_window_log has none"}},
		{"burst zero", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 0}\n", []string{
			"4: descriptors[0].rate_limit.burst: must be between 1 and 1000000000, got 0"}},
		{"leaky bucket too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 2000000}\n", []string{
			"4: descriptors[0].rate_limit.burst: ratekeeper.LeakyBucket Capacity must be between 1 and 1000000"}},
		{"leaky bucket too large by default", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2000000, algorithm: leaky_bucket}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: ratekeeper.LeakyBucket Capacity must be between 1 and 1000000"}},
		{"sliding log too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 20000, algorithm: sliding_window_log}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: ratekeeper.SlidingWindowLog Limit must be between 1 and 10000, got 20000"}},
		{"gcra faster than a microsecond", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {period: 1ms, requests_per_unit: 5000, algorithm: gcra}\n", []string{
			"4: descriptors[0].rate_limit.requests_per_unit: ratekeeper.GCRA Rate 5000 per 1ms is more than one request per microsecond"}},
		{"rate_limit and rate_limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits:\n      - {unit: day, requests_per_unit: 10}\n", []string{
			"5: descriptors[0].rate_limits: give rate_limit or rate_limits, not both"}},
		{"rate_limits empty", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: []\n", []string{
			"4: descriptors[0].rate_limits: holds 1 to 8 limits, not 0"}},
		{"rate_limits too many", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [" + strings.Repeat("{unit: second, requests_per_unit: 1}, ", 8) + "{unit: second, requests_per_unit: 1}]\n", []string{
			"4: descriptors[0].rate_limits: holds 1 to 8 limits, not 9"}},
		{"rate_limits names alike", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 2, algorithm: gcra}\n", []string{
			"6: descriptors[0].rate_limits[1].name: the limit name 'second' is also descriptors[0].rate_limits[0]'s: give each limit of a descriptor its own name"}},
		{"rate_limits named alike", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {name: x, unit: second, requests_per_unit: 1}\n      - {name: x, unit: day, requests_per_unit: 2}\n", []string{
			"6: descriptors[0].rate_limits[1].name: the limit name 'x' is also descriptors[0].rate_limits[0]'s"}},
		{"rate_limits name too long", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {name: " + strings.Repeat("x", 65) + ", unit: second, requests_per_unit: 1}\n", []string{
			"5: descriptors[0].rate_limits[0].name: the name of 65 bytes is longer than 64"}},
		{"rate_limits take no envoy-only keys", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - unit: second\n        requests_per_unit: 1\n        unlimited: true\n        replaces: [{name: b}]\n", []string{
			"7: descriptors[0].rate_limits[0].unlimited: unknown key 'unlimited'",
			"8: descriptors[0].rate_limits[0].replaces: unknown key 'replaces'"}},
		{"count_over_limit not a bool", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, count_over_limit: yes please}\n", []string{
			"4: descriptors[0].rate_limit.count_over_limit: must be true or false, not a string"}},
		{"count_over_limit unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      count_over_limit: true\n", []string{
			"6: descriptors[0].rate_limit.count_over_limit: an unlimited rule takes no count_over_limit"}},
		{"count_over_limit on some limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 1, count_over_limit: true}\n      - {unit: day, requests_per_unit: 2}\n", []string{
			"6: descriptors[0].rate_limits[1].count_over_limit: count_over_limit is false here and true on descriptors[0].rate_limits[0]: a descriptor's limits are decided together, so give it on every limit or on none"}},
		{"refunds not a bool", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, refunds: yes please}\n", []string{
			"4: descriptors[0].rate_limit.refunds: must be true or false, not a string"}},
		{"refunds unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      refunds: true\n", []string{
			"6: descriptors[0].rate_limit.refunds: an unlimited rule takes no refunds"}},
		{"refunds on some limits", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: day, requests_per_unit: 2, refunds: true}\n", []string{
			"6: descriptors[0].rate_limits[1].refunds: refunds is true here and false on descriptors[0].rate_limits[0]: a descriptor's limits are decided together, so give it on every limit or on none"}},
		{"refunds on a descriptor", "domain: d\ndescriptors:\n  - key: a\n    refunds: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", []string{
			"4: descriptors[0].refunds: unknown key 'refunds'"}},
		{"every error of a file, in order", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: x}\n  - key: b\n    rate_limit: {unit: y}\n    descriptors:\n      - value: z\n  - key: a\n", []string{
			"4: descriptors[0].rate_limit.unit: invalid rate limit unit 'x'",
			"6: descriptors[1].rate_limit.unit: invalid rate limit unit 'y'",
			"8: descriptors[1].descriptors[0].key: descriptor has empty key",
			"9: descriptors[2]: duplicate descriptor composite key 'd.a'"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, got := loadYAML(t, tc.yaml)
			if len(got) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s...", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{"a.yaml", 3, "descriptors[1].rate_limit.unit", "invalid"}, "a.yaml:3: descriptors[1].rate_limit.unit: invalid"},
		{Error{"a.yaml", 2, "", "invalid YAML: x"}, "a.yaml:2: invalid YAML: x"},
		{Error{"dir", 0, "", "no configuration"}, "dir: no configuration"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

func TestAliasBomb(t *testing.T) {
	_, got := loadYAML(t, "domain: d\nunit:\n"+aliasBomb("  "))
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "too large once its aliases are expanded") {
		t.Errorf("errors %v", got)
	}
}

func TestWarnings(t *testing.T) {
	c, errs := loadYAML(t, `domain: d
unit: minute
descriptors:
  - key: a
    requests_per_unit: 5
    rate_limit: {unit: second, requests_per_unit: 1}
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: b
    rate_limit: {unlimited: true, unit: foo, requests_per_unit: 3}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	var got []string
	for _, w := range c.Warnings() {
		var e *Error
		if !errors.As(w, &e) {
			t.Fatalf("%v is not an *Error", w)
		}
		got = append(got, fmt.Sprintf("%d: %s: %s", e.Line, e.Field, e.Msg))
	}
	want := []string{
		"2: unit: ignored: unit has no meaning here",
		"5: descriptors[0].requests_per_unit: ignored: requests_per_unit has no meaning here",
		"7: descriptors[0].rate_limit: given twice (also on line 6): the last one counts",
		"9: descriptors[1].rate_limit.unit: ignored: the rule is unlimited",
		"9: descriptors[1].rate_limit.requests_per_unit: ignored: the rule is unlimited",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := c.Lookup("d", []Entry{{"a", "x"}}); r == nil || r.Limits[0].RequestsPerUnit != 2 {
		t.Errorf("the last rate_limit does not count: %+v", r)
	}
}

const lookupYAML = `domain: api
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key2
    value: value3
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1
      replaces: [{name: other}]
  - key: key6
    rate_limit: {unlimited: true}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /api/v1/users
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: files
    value: files/*
    share_threshold: true
    descriptors:
      - key: user
        rate_limit: {unit: week, requests_per_unit: 7}
`

func TestLookup(t *testing.T) {
	c, errs := loadYAML(t, lookupYAML)
	if errs != nil {
		t.Fatal(errs)
	}
	e := func(kv ...string) []Entry {
		var es []Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, Entry{kv[i], kv[i+1]})
		}
		return es
	}
	for _, tc := range []struct {
		domain  string
		entries []Entry
		name    string // "" for no rule
		rpu     uint32
	}{
		{"api", e("key1", "value1", "subkey1", "x"), "key1_value1.subkey1", 5},
		{"api", e("key1", "value1", "subkey1", "subvalue1"), "key1_value1.subkey1_subvalue1", 10},
		{"api", e("key1", "value1"), "", 0},                          // no rule at that level
		{"api", e("key1", "other", "subkey1", "x"), "", 0},           // key1 has no default
		{"api", e("key2", "x"), "key2", 20},                          // the key's default
		{"api", e("key2", "value2"), "key2_value2", 30},              // the value first
		{"api", e("key2", "value3"), "", 0},                          // a value with no rule
		{"api", e("key2", "x", "more", "y"), "", 0},                  // deeper than the rule
		{"api", e("key4", "x"), "key4_rate_limit", 1},                // rate_limit.name
		{"api", e("path", "/api/v1/users"), "path_/api/v1/users", 3}, // exact before wildcards
		{"api", e("path", "/api/v2/x"), "path_/api/*", 1},            // the first wildcard of the file
		{"api", e("path", "/api/"), "path_/api/*", 1},                // * matches nothing too
		{"api", e("path", "/other"), "", 0},
		{"api", e("files", "files/a", "user", "u"), "files_files/*.user", 7},
		{"api", nil, "", 0},
		{"web", e("key2", "x"), "", 0}, // no such domain
	} {
		r := c.Lookup(tc.domain, tc.entries)
		switch {
		case tc.name == "" && r != nil:
			t.Errorf("%s %v: rule %q, want none", tc.domain, tc.entries, r.Name)
		case tc.name != "" && r == nil:
			t.Errorf("%s %v: no rule, want %q", tc.domain, tc.entries, tc.name)
		case r != nil && (r.Name != tc.name || r.Limits[0].RequestsPerUnit != tc.rpu || r.Domain != tc.domain):
			t.Errorf("%s %v: rule %q of %d, want %q of %d", tc.domain, tc.entries, r.Name, r.Limits[0].RequestsPerUnit, tc.name, tc.rpu)
		}
	}

	r := c.Lookup("api", e("key1", "value1", "subkey1", "subvalue1"))
	if !r.Shadow || r.DetailedMetric || r.Unlimited || r.ExplicitName || r.Line != 8 || !strings.HasSuffix(r.File, "config.yaml") {
		t.Errorf("%+v", r)
	}
	if r := c.Lookup("api", e("key2", "value2")); !r.DetailedMetric || r.Shadow {
		t.Errorf("%+v", r)
	}
	if r := c.Lookup("api", e("key4", "x")); !r.ExplicitName || !reflect.DeepEqual(r.Replaces, []string{"other"}) {
		t.Errorf("%+v", r)
	}
	if r := c.Lookup("api", e("key6", "x")); r == nil || !r.Unlimited || len(r.Limits) != 0 || r.Policy() != nil {
		t.Errorf("unlimited: %+v", r)
	}
	if r := c.Lookup("api", e("files", "files/a", "user", "u")); !reflect.DeepEqual(r.SharedValues, []string{"files/*", ""}) {
		t.Errorf("shared values %q", r.SharedValues)
	}
	if r := c.Lookup("api", e("key2", "x")); r.SharedValues != nil {
		t.Errorf("shared values %q", r.SharedValues)
	}
	if got := c.Domains(); !reflect.DeepEqual(got, []string{"api"}) {
		t.Errorf("domains %v", got)
	}
	if !c.HasDomain("api") || c.HasDomain("web") {
		t.Errorf("HasDomain(api) %v, HasDomain(web) %v", c.HasDomain("api"), c.HasDomain("web"))
	}
}

func TestLookupAllocations(t *testing.T) {
	c, errs := loadYAML(t, lookupYAML)
	if errs != nil {
		t.Fatal(errs)
	}
	entries := []Entry{{"key1", "value1"}, {"subkey1", "x"}}
	wild := []Entry{{"path", "/api/v2/x"}}
	if n := testing.AllocsPerRun(100, func() {
		c.Lookup("api", entries)
		c.Lookup("api", wild)
	}); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// spec is a policy's Spec, or its error.
func spec(t *testing.T, p ratekeeper.Policy) string {
	t.Helper()
	if p == nil {
		return "<nil>"
	}
	s, err := p.Spec()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", s)
}

func TestPolicies(t *testing.T) {
	c, errs := loadYAML(t, `domain: d
descriptors:
  - key: envoy
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: period
    rate_limit: {period: 30s, requests_per_unit: 10}
  - key: month
    rate_limit: {unit: MONTH, requests_per_unit: 1000}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 50}
  - key: tb-default
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: gcra
    rate_limit: {period: 1m, requests_per_unit: 120, algorithm: gcra, burst: 10}
  - key: leaky
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: leaky_bucket, burst: 8}
  - key: fw
    rate_limit: {period: 1h30m, requests_per_unit: 100, algorithm: fixed_window}
  - key: swc
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window_counter}
  - key: swl
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window_log}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: multi
    rate_limits:
      - {name: per_second, unit: second, requests_per_unit: 10, algorithm: gcra, burst: 20}
      - {unit: day, requests_per_unit: 10000}
      - {period: 5m, requests_per_unit: 500, algorithm: sliding_window_counter}
  - key: multi-zero
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: day, requests_per_unit: 0}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		key   string
		limit Limit // without its Policy
		want  ratekeeper.Policy
	}{
		{"envoy", Limit{Name: "minute", RequestsPerUnit: 60, Unit: "MINUTE", Period: time.Minute},
			ratekeeper.FixedWindow{Limit: 60, Window: time.Minute, Aligned: true}},
		{"period", Limit{Name: "30s", RequestsPerUnit: 10, Period: 30 * time.Second},
			ratekeeper.FixedWindow{Limit: 10, Window: 30 * time.Second, Aligned: true}},
		{"month", Limit{Name: "month", RequestsPerUnit: 1000, Unit: "MONTH", Period: 30 * 24 * time.Hour},
			ratekeeper.FixedWindow{Limit: 1000, Window: 30 * 24 * time.Hour, Aligned: true}},
		{"tb", Limit{Name: "second", RequestsPerUnit: 10, Unit: "SECOND", Period: time.Second, Algorithm: "token_bucket", Burst: 50},
			ratekeeper.TokenBucket{Capacity: 50, RefillRate: 10, RefillInterval: time.Second}},
		{"tb-default", Limit{Name: "second", RequestsPerUnit: 10, Unit: "SECOND", Period: time.Second, Algorithm: "token_bucket", Burst: 10},
			ratekeeper.TokenBucket{Capacity: 10, RefillRate: 10, RefillInterval: time.Second}},
		{"gcra", Limit{Name: "1m", RequestsPerUnit: 120, Period: time.Minute, Algorithm: "gcra", Burst: 10},
			ratekeeper.GCRA{Rate: 120, Period: time.Minute, Burst: 10}},
		{"leaky", Limit{Name: "second", RequestsPerUnit: 4, Unit: "SECOND", Period: time.Second, Algorithm: "leaky_bucket", Burst: 8},
			ratekeeper.LeakyBucket{Capacity: 8, LeakRate: 4}},
		{"fw", Limit{Name: "1h30m", RequestsPerUnit: 100, Period: 90 * time.Minute, Algorithm: "fixed_window"},
			ratekeeper.FixedWindow{Limit: 100, Window: 90 * time.Minute}},
		{"swc", Limit{Name: "hour", RequestsPerUnit: 100, Unit: "HOUR", Period: time.Hour, Algorithm: "sliding_window_counter"},
			ratekeeper.SlidingWindowCounter{Limit: 100, Window: time.Hour}},
		{"swl", Limit{Name: "minute", RequestsPerUnit: 100, Unit: "MINUTE", Period: time.Minute, Algorithm: "sliding_window_log"},
			ratekeeper.SlidingWindowLog{Limit: 100, Window: time.Minute}},
		{"zero", Limit{Name: "second", Unit: "SECOND", Period: time.Second}, nil},
	} {
		r := c.Lookup("d", []Entry{{tc.key, "x"}})
		if r == nil || len(r.Limits) != 1 {
			t.Errorf("%s: %+v", tc.key, r)
			continue
		}
		l := r.Limits[0]
		if !reflect.DeepEqual(l.Policy, tc.want) {
			t.Errorf("%s: policy %#v, want %#v", tc.key, l.Policy, tc.want)
		}
		l.Policy = nil
		if l != tc.limit {
			t.Errorf("%s: limit\n%+v\nwant\n%+v", tc.key, l, tc.limit)
		}
		if !reflect.DeepEqual(r.Policy(), tc.want) {
			t.Errorf("%s: the rule's policy %#v, want its limit's", tc.key, r.Policy())
		}
		if r.BlocksAll() != (tc.want == nil) {
			t.Errorf("%s: BlocksAll %v", tc.key, r.BlocksAll())
		}
	}

	r := c.Lookup("d", []Entry{{"multi", "x"}})
	var names []string
	for _, l := range r.Limits {
		names = append(names, l.Name)
	}
	if !reflect.DeepEqual(names, []string{"per_second", "day", "5m"}) {
		t.Errorf("names %q", names)
	}
	want := ratekeeper.All(
		ratekeeper.Named("per_second", ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 20}),
		ratekeeper.Named("day", ratekeeper.FixedWindow{Limit: 10000, Window: 24 * time.Hour, Aligned: true}),
		ratekeeper.Named("5m", ratekeeper.SlidingWindowCounter{Limit: 500, Window: 5 * time.Minute}))
	if got := spec(t, r.Policy()); got != spec(t, want) {
		t.Errorf("multi: policy\n%s\nwant\n%s", got, spec(t, want))
	}
	if r.Name != "multi" || r.ExplicitName || r.BlocksAll() {
		t.Errorf("multi: %+v", r)
	}
	r = c.Lookup("d", []Entry{{"multi-zero", "x"}})
	if r.Policy() != nil || !r.BlocksAll() || r.Limits[0].Policy == nil || r.Limits[1].Policy != nil {
		t.Errorf("multi-zero: %+v", r)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 1))
	write(t, filepath.Join(dir, "b.yml"), domainYAML("b", 2))
	write(t, filepath.Join(dir, "c.txt"), "not: [configuration")
	write(t, filepath.Join(dir, ".hidden.yaml"), "not: [configuration")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub.yaml", "d.yaml"), "not: [configuration")
	other := t.TempDir()
	write(t, filepath.Join(other, "e.yaml"), domainYAML("e", 5))
	if err := os.Symlink(filepath.Join(other, "e.yaml"), filepath.Join(dir, "e.yaml")); err != nil {
		t.Fatal(err)
	}
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); !reflect.DeepEqual(got, []string{"a", "b", "e"}) {
		t.Errorf("domains %v", got)
	}
	if got := c.Files(); len(got) != 3 || got[2] != filepath.Join(dir, "e.yaml") {
		t.Errorf("files %v", got)
	}
	if rpu(t, c, "e") != 5 {
		t.Error("the symlinked file")
	}

	// The same domain twice, and a broken file: every error.
	write(t, filepath.Join(dir, "f.yaml"), domainYAML("a", 6))
	write(t, filepath.Join(dir, "g.yaml"), "domain: g\ndescriptors: 5\n")
	_, err = Load(dir)
	want := []string{
		filepath.Join(dir, "f.yaml") + ":1: domain: duplicate domain 'a' in config file (first defined at " + filepath.Join(dir, "a.yaml") + ":1)",
		filepath.Join(dir, "g.yaml") + ":2: descriptors: must be a list, not a number (5)",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("error\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "nothing.yaml"), "nothing.yaml: stat: no such file or directory"},
		{dir, ": no configuration: the directory holds no *.yaml or *.yml file"},
	} {
		_, err := Load(tc.path)
		var e *Error
		if !errors.As(err, &e) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("Load(%s): %v, want an *Error ending %q", tc.path, err, tc.want)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "gone.yaml"), filepath.Join(dir, "broken.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "broken.yaml: stat: no such file") {
		t.Errorf("a broken symlink: %v", err)
	}
}

// TestCountOverLimit checks that count_over_limit is read from a
// rate_limit, and from a rate_limits list given it on every limit.
func TestCountOverLimit(t *testing.T) {
	c, errs := loadYAML(t, `domain: d
descriptors:
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000, count_over_limit: true}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 10, count_over_limit: true}
      - {unit: day, requests_per_unit: 1000, count_over_limit: true}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	for key, want := range map[string]bool{"tokens": true, "plain": false, "both": true} {
		r := c.Lookup("d", []Entry{{key, "x"}})
		if r == nil || r.CountOverLimit != want {
			t.Errorf("%s: rule %+v, want CountOverLimit %t", key, r, want)
		}
	}
}

// TestRefunds checks that refunds is read from a rate_limit, and from a
// rate_limits list given it on every limit; a rule without it takes none.
func TestRefunds(t *testing.T) {
	c, errs := loadYAML(t, `domain: d
descriptors:
  - key: reserved
    rate_limit: {unit: hour, requests_per_unit: 1000, refunds: true}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000, refunds: false}
  - key: default
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 10, refunds: true}
      - {unit: day, requests_per_unit: 1000, refunds: true}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	for key, want := range map[string]bool{"reserved": true, "plain": false, "default": false, "both": true} {
		r := c.Lookup("d", []Entry{{key, "x"}})
		if r == nil || r.Refunds != want {
			t.Errorf("%s: rule %+v, want Refunds %t", key, r, want)
		}
	}
}

// TestCalendar: calendar: true makes a day, week, month or year a
// calendar period, in time_zone (UTC by default); without it, a MONTH is
// envoy's 30 days. Misuse gets its line and field.
func TestCalendar(t *testing.T) {
	c, errs := loadYAML(t, `domain: d
descriptors:
  - key: plan
    rate_limit: {unit: month, requests_per_unit: 10000, calendar: true, time_zone: Europe/Berlin}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 100, calendar: true}
  - key: envoy-month
    rate_limit: {unit: month, requests_per_unit: 1000}
  - key: multi
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {name: tokens, unit: year, requests_per_unit: 500000, calendar: true, time_zone: America/New_York}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	newYork, _ := time.LoadLocation("America/New_York")
	for key, want := range map[string]ratekeeper.Policy{
		"plan":        ratekeeper.FixedWindow{Limit: 10000, Calendar: ratekeeper.Month, Location: berlin},
		"daily":       ratekeeper.FixedWindow{Limit: 100, Calendar: ratekeeper.Day},
		"envoy-month": ratekeeper.FixedWindow{Limit: 1000, Window: 30 * 24 * time.Hour, Aligned: true},
	} {
		got := c.Lookup("d", []Entry{{Key: key}}).Policy().(ratekeeper.FixedWindow)
		w := want.(ratekeeper.FixedWindow)
		if got.Limit != w.Limit || got.Calendar != w.Calendar || got.Window != w.Window || got.Aligned != w.Aligned || got.Location.String() != w.Location.String() {
			t.Errorf("%s: %+v; want %+v", key, got, w)
		}
	}
	if got := c.Lookup("d", []Entry{{Key: "multi"}}).Limits[1]; got.Calendar != ratekeeper.Year || got.Location.String() != newYork.String() {
		t.Errorf("multi's second limit: %+v", got)
	}
	for _, tc := range []struct{ name, rateLimit, want string }{
		{"unknown zone", "{unit: day, requests_per_unit: 1, calendar: true, time_zone: Mars/Olympus}",
			"4: descriptors[0].rate_limit.time_zone: unknown time zone 'Mars/Olympus'"},
		{"zone without calendar", "{unit: day, requests_per_unit: 1, time_zone: UTC}",
			"4: descriptors[0].rate_limit.time_zone: a time zone is for calendar periods"},
		{"hours", "{unit: hour, requests_per_unit: 1, calendar: true}",
			"4: descriptors[0].rate_limit.calendar: calendar periods are days, weeks, months and years: unit hour has none"},
		{"a period", "{period: 24h, requests_per_unit: 1, calendar: true}",
			"4: descriptors[0].rate_limit.calendar: a calendar window's period is its unit"},
		{"another algorithm", "{unit: day, requests_per_unit: 1, algorithm: gcra, calendar: true}",
			"4: descriptors[0].rate_limit.calendar: a calendar window is a fixed window: algorithm gcra takes no calendar"},
	} {
		_, errs := loadYAML(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: "+tc.rateLimit+"\n")
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.HasPrefix(e, tc.want) }) {
			t.Errorf("%s: %v; want %q", tc.name, errs, tc.want)
		}
	}
}
