package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The tests of this file hold the loader to envoyproxy/ratelimit's own, at
// the version the service is compatible with: its configuration fixtures,
// and a corpus of edge cases (testdata/compat), must be accepted or
// rejected alike, and every descriptor looked up must find the same rule.
// envoy's loader runs in testdata/envoyoracle, built in a module of its own
// from the Go module proxy.

// envoyModule is the envoyproxy/ratelimit version ratekeeper-server is
// compatible with.
const envoyModule = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// unavailable skips a test that needs the Go module proxy, or fails it
// under CI=true, where the proxy must be reachable.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: the Go module proxy must be reachable)", msg)
	}
	t.Skipf("%s: the Go module proxy seems unreachable; skipped (CI=true makes this fail)", msg)
}

// goCmd runs the go command in dir, outside any workspace.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

var envoyDir = sync.OnceValues(func() (string, error) {
	out, err := goCmd(os.TempDir(), "mod", "download", "-json", envoyModule)
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil && err == nil {
		return "", jerr
	}
	if m.Error != "" { // go mod download -json reports its error here
		return "", errors.New(m.Error)
	}
	return m.Dir, err
})

// envoyFixtures returns the directory of envoy's configuration fixtures.
func envoyFixtures(t *testing.T) string {
	dir, err := envoyDir()
	if err != nil {
		unavailable(t, "go mod download %s: %v", envoyModule, err)
	}
	return filepath.Join(dir, "test", "config")
}

// oracle returns envoy's loader, built from testdata/envoyoracle against
// envoyModule, as envoytest caches envoy's service: under the user's
// cache directory, keyed by envoy's version, a hash of the oracle's
// source and the Go release, so that later runs reuse it and a change to
// any of them builds it anew. It is built in a directory of its own and
// renamed into place, so that a concurrent test binary never sees a
// half-written file.
var oracle = sync.OnceValues(func() (string, error) {
	src, err := os.ReadFile(filepath.Join("testdata", "envoyoracle", "main.go"))
	if err != nil {
		return "", err
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	_, version, _ := strings.Cut(envoyModule, "@")
	sum := sha256.Sum256(src)
	dir := filepath.Join(base, "ratekeeper", "envoyoracle",
		fmt.Sprintf("%s-%x-%s", version, sum[:8], runtime.Version()))
	path := filepath.Join(dir, "oracle")
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "main.go"), src, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module envoyoracle\n\ngo 1.24\n"), 0o644); err != nil {
		return "", err
	}
	for _, args := range [][]string{{"get", envoyModule}, {"mod", "tidy"}, {"build", "-o", "oracle", "."}} {
		if _, err := goCmd(tmp, args...); err != nil {
			return "", err
		}
	}
	if err := os.Rename(filepath.Join(tmp, "oracle"), path); err != nil {
		return "", err
	}
	return path, nil
})

// query is a descriptor to look up.
type query struct {
	Domain  string
	Entries []Entry
}

func (q query) String() string {
	var s []string
	for _, e := range q.Entries {
		s = append(s, e.Key+"="+e.Value)
	}
	return q.Domain + "{" + strings.Join(s, ", ") + "}"
}

// envoyLimit is what envoy's GetLimit returns, as the oracle reports it.
type envoyLimit struct {
	Found           bool
	RequestsPerUnit uint32
	Unit            string
	Unlimited       bool
	Shadow          bool
	Quota           bool
	Name            string
	Replaces        []string
	Detailed        bool
	Shared          []string
	FullKey         string
}

// askEnvoy loads the files of dir with envoy's loader and looks up queries.
func askEnvoy(t *testing.T, dir string, queries []query) (loadErr string, results []envoyLimit) {
	t.Helper()
	bin, err := oracle()
	if err != nil {
		unavailable(t, "building envoy's loader: %v", err)
	}
	req, _ := json.Marshal(struct {
		Dir     string
		Queries []query
	}{dir, queries})
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(req)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("envoy's loader: %v", err)
	}
	var ans struct {
		Error   string
		Results []envoyLimit
	}
	if err := json.Unmarshal(out, &ans); err != nil {
		t.Fatalf("envoy's loader: %v: %s", err, out)
	}
	return ans.Error, ans.Results
}

// queriesFor returns descriptors that probe every rule of c: each path as
// configured, with wildcards matched, with other values (for the keys'
// defaults), one entry short and one too many; plus those of extra.
func queriesFor(c *Config, extra []query) []query {
	var qs []query
	var walk func(domain string, n *node, prefix []Entry, depth int)
	walk = func(domain string, n *node, prefix []Entry, depth int) {
		qs = append(qs, query{domain, append(slices.Clip(prefix), Entry{"unconfigured", "x"})})
		for _, composite := range slices.Sorted(maps.Keys(n.children)) {
			child := n.children[composite]
			variants := []Entry{{child.key, child.value}, {child.key, "other"}, {child.key, ""}}
			if v, ok := strings.CutSuffix(child.value, "*"); ok {
				variants = append(variants, Entry{child.key, v}, Entry{child.key, v + "-more"})
			}
			for i, e := range variants {
				q := append(slices.Clip(prefix), e)
				qs = append(qs, query{domain, q}, query{domain, append(slices.Clip(q), Entry{"extra", "x"})})
				if i == 0 && depth < 6 {
					walk(domain, child, q, depth+1)
				}
			}
		}
	}
	for _, d := range c.Domains() {
		qs = append(qs, query{d, nil})
		walk(d, c.domains[d], nil, 0)
	}
	qs = append(qs, query{"no-such-domain", []Entry{{"key", "value"}}})
	return append(qs, extra...)
}

// compareWithEnvoy loads dir with both loaders, and checks that they accept
// or reject it alike and that every query finds the same rule. It returns
// ours.
func compareWithEnvoy(t *testing.T, dir string, extra []query) (*Config, error) {
	t.Helper()
	c, err := Load(dir)
	var qs []query
	if err == nil {
		qs = queriesFor(c, extra)
	}
	envoyErr, results := askEnvoy(t, dir, qs)
	switch {
	case err == nil && envoyErr != "":
		t.Errorf("envoy rejects it (%s); ours accepts it", envoyErr)
		return c, err
	case err != nil && envoyErr == "":
		t.Errorf("envoy accepts it; ours rejects it:\n%v", err)
		return c, err
	case err != nil:
		return c, err
	}
	valueToMetric := false
	for _, f := range c.files {
		b, _ := os.ReadFile(f)
		valueToMetric = valueToMetric || bytes.Contains(b, []byte("value_to_metric"))
	}
	for i, q := range qs {
		if diff := sameRule(q, c.Lookup(q.Domain, q.Entries), results[i], !valueToMetric); diff != "" {
			t.Errorf("%v: %s", q, diff)
		}
	}
	t.Logf("%d descriptors looked up alike", len(qs))
	return c, nil
}

// sameRule says how r, the rule of q, differs from envoy's e ("" when
// alike). Their shared values must make the same counter key: envoy leaves
// out those of values that match a wildcard literally (files/* for
// files/*), which stand for themselves.
func sameRule(q query, r *Rule, e envoyLimit, fullKey bool) string {
	if r == nil || !e.Found {
		if (r == nil) != !e.Found {
			return fmt.Sprintf("ours finds %+v, envoy %+v", r, e)
		}
		return ""
	}
	var got envoyLimit
	got.Found, got.Unlimited, got.Shadow, got.Quota, got.Detailed = true, r.Unlimited, r.Shadow, r.QuotaMode, r.DetailedMetric
	got.Replaces = r.Replaces
	got.Shared, e.Shared = counterValues(q, r.SharedValues), counterValues(q, e.Shared)
	if r.ExplicitName {
		got.Name = r.Name
	}
	want := e
	if len(want.Replaces) == 0 {
		want.Replaces = nil
	}
	if len(r.Limits) == 1 {
		got.RequestsPerUnit, got.Unit = r.Limits[0].RequestsPerUnit, r.Limits[0].Unit
	}
	if r.Unlimited { // envoy keeps what an unlimited rule's rate_limit says, to no effect
		want.RequestsPerUnit, want.Unit = 0, ""
	}
	want.FullKey = ""
	g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want)
	if g != w {
		return fmt.Sprintf("\nours  %s\nenvoy %s", g, w)
	}
	// envoy names the statistics of a descriptor matched by a wildcard
	// after the request's key when it differs from the configured one (a_*
	// matched by a_b=c), and those of a key ending in * (key: files*) by
	// the key twice (files*_files*): ours are named by the configuration
	// alone.
	var keys []string
	for _, e := range q.Entries {
		keys = append(keys, e.Key)
	}
	keyWildcard := slices.ContainsFunc(r.keys, func(k string) bool { return strings.HasSuffix(k, "*") })
	if fullKey && !r.ExplicitName && !r.DetailedMetric && slices.Equal(keys, r.keys) && !keyWildcard && e.FullKey != r.Domain+"."+r.Name {
		return fmt.Sprintf("ours is named %q, envoy's stats key is %q", r.Name, e.FullKey)
	}
	return ""
}

// counterValues returns the values of q's entries that make a counter's
// key, given a rule's shared values.
func counterValues(q query, shared []string) []string {
	var out []string
	for i, e := range q.Entries {
		v := e.Value
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		out = append(out, v)
	}
	return out
}

// onlyFiles returns a directory holding copies of files.
func onlyFiles(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestEnvoyFixtures loads each of envoy's configuration fixtures, and the
// pairs its tests load together, with both loaders.
func TestEnvoyFixtures(t *testing.T) {
	fixtures := envoyFixtures(t)
	files, err := filepath.Glob(filepath.Join(fixtures, "*.yaml"))
	if err != nil || len(files) < 15 {
		t.Fatalf("envoy's fixtures in %s: %v, %d files", fixtures, err, len(files))
	}
	sets := [][]string{
		{"basic_config.yaml", "duplicate_domain.yaml"},
		{"merge_domain_key1.yaml", "merge_domain_key2.yaml"},
	}
	for _, f := range files {
		sets = append(sets, []string{filepath.Base(f)})
	}
	accepted := 0
	for _, set := range sets {
		t.Run(strings.Join(set, "+"), func(t *testing.T) {
			var paths []string
			for _, f := range set {
				paths = append(paths, filepath.Join(fixtures, f))
			}
			c, err := compareWithEnvoy(t, onlyFiles(t, paths...), nil)
			if err == nil {
				accepted++
				if len(c.Domains()) == 0 {
					t.Error("no domain")
				}
			}
		})
	}
	// basic_config, duplicate_domain, merge_domain_key1 and 2,
	// shadowmode_config, share_threshold and wildcard.
	if accepted != 7 {
		t.Errorf("%d of envoy's fixtures were accepted, want 7", accepted)
	}
}

// TestEnvoyFixtureErrors checks the file, line and field of the errors of
// envoy's invalid fixtures.
func TestEnvoyFixtureErrors(t *testing.T) {
	fixtures := envoyFixtures(t)
	for file, want := range map[string][]string{
		"bad_limit_unit.yaml":      {":6: descriptors[0].rate_limit.unit: invalid rate limit unit 'foo'"},
		"bad_yaml.yaml":            {":2: invalid YAML"},
		"duplicate_key.yaml":       {":6: descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1'"},
		"empty_domain.yaml":        {":1: domain: config file cannot have empty domain"},
		"empty_key.yaml":           {":3: descriptors[0].key: descriptor has empty key"},
		"misspelled_key.yaml":      {":5: descriptors[0].ratelimit: unknown key 'ratelimit' (did you mean 'rate_limit'?)"},
		"misspelled_key2.yaml":     {":7: descriptors[0].rate_limit.requestsperunit: unknown key 'requestsperunit' (did you mean 'requests_per_unit'?)"},
		"non_map_list.yaml":        {":3: descriptors[0]: must be a mapping", ":4: descriptors[1]: must be a mapping", ":5: descriptors[2]: must be a mapping"},
		"non_string_key.yaml":      {":1: key 0.25 is not a string", ":1: domain: config file cannot have empty domain"},
		"replaces_empty.yaml":      {":10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"},
		"replaces_self.yaml":       {":10: descriptors[0].descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor"},
		"unlimited_with_unit.yaml": {":6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"},
	} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(fixtures, file)
			_, err := Load(path)
			if err == nil {
				t.Fatal("accepted")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(want) {
				t.Errorf("%d errors, want %d:\n%v", len(got), len(want), err)
			}
			for i := range min(len(got), len(want)) {
				if !strings.HasPrefix(got[i], path+want[i]) {
					t.Errorf("error %d:\n got %s\nwant %s%s...", i, got[i], path, want[i])
				}
			}
			var e *Error
			if !errors.As(err, &e) || e.File != path {
				t.Errorf("errors.As(%v) does not give an *Error of the file", err)
			}
		})
	}
}

// TestEnvoyCompat loads each file of testdata/compat, edge cases of envoy's
// format, with both loaders. A file's "# query: domain|key=value|..." lines
// add descriptors to look up.
func TestEnvoyCompat(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "compat", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata/compat: %v, %d files", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var extra []query
			for _, l := range strings.Split(string(b), "\n") {
				spec, ok := strings.CutPrefix(l, "# query: ")
				if !ok {
					continue
				}
				parts := strings.Split(spec, "|")
				q := query{Domain: parts[0]}
				for _, kv := range parts[1:] {
					k, v, _ := strings.Cut(kv, "=")
					q.Entries = append(q.Entries, Entry{k, v})
				}
				extra = append(extra, q)
			}
			abs, _ := filepath.Abs(f)
			dir := onlyFiles(t, abs)
			if strings.Contains(string(b), "# differs: ") {
				// A deliberate difference: envoy accepts, ours rejects.
				envoyErr, _ := askEnvoy(t, dir, nil)
				if _, err := Load(dir); err == nil || envoyErr != "" {
					t.Errorf("envoy's error: %q; ours: %v; want envoy to accept and ours to reject", envoyErr, err)
				} else {
					t.Logf("as intended, ours rejects what envoy accepts: %v", err)
				}
				return
			}
			_, err = compareWithEnvoy(t, dir, extra)
			wantErr := strings.Contains(string(b), "# envoy: rejects")
			if (err != nil) != wantErr {
				t.Errorf("Load: %v; the file says envoy rejects it: %v", err, wantErr)
			}
		})
	}
}

// TestEnvoyRandom compares both loaders on random configurations, built
// from a few keys and values chosen to collide: keys holding '_', values
// ending in '*', units in any case. Each is accepted or rejected alike, and
// random descriptors find the same rules.
func TestEnvoyRandom(t *testing.T) {
	if _, err := oracle(); err != nil {
		unavailable(t, "building envoy's loader: %v", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	keys := []string{"a", "b", "a_b", "k*"}
	values := []string{"", "", "x", "x_y", "x*", "*", "xy*", "y"}
	var gen func(b *strings.Builder, indent string, depth int)
	gen = func(b *strings.Builder, indent string, depth int) {
		for range 1 + rng.IntN(3) {
			fmt.Fprintf(b, "%s- key: %q\n", indent, pick(keys...))
			if v := pick(values...); v != "" {
				fmt.Fprintf(b, "%s  value: %q\n", indent, v)
			}
			if rng.IntN(4) == 0 {
				fmt.Fprintf(b, "%s  shadow_mode: true\n", indent)
			}
			switch rng.IntN(10) {
			case 0:
				fmt.Fprintf(b, "%s  rate_limit: {unlimited: true}\n", indent)
			case 1, 2, 3, 4, 5, 6:
				fmt.Fprintf(b, "%s  rate_limit: {unit: %s, requests_per_unit: %d", indent,
					pick("second", "MINUTE", "Hour", "day", "week", "month", "year"), rng.IntN(6))
				if rng.IntN(3) == 0 {
					fmt.Fprintf(b, ", name: %s, replaces: [{name: %s}]", pick("n1", "n2"), pick("n2", "n3"))
				}
				b.WriteString("}\n")
			}
			if depth < 2 && rng.IntN(2) == 0 {
				fmt.Fprintf(b, "%s  descriptors:\n", indent)
				gen(b, indent+"    ", depth+1)
			}
		}
	}
	qkeys := []string{"a", "b", "a_b", "k", "kz", "k*"}
	qvalues := []string{"", "x", "x_y", "xy", "xyz", "x*", "*", "y", "_"}
	const configs = 150
	accepted, found := 0, 0
	for i := range configs {
		var b strings.Builder
		b.WriteString("domain: r\ndescriptors:\n")
		gen(&b, "  ", 0)
		dir := t.TempDir()
		write(t, filepath.Join(dir, "config.yaml"), b.String())
		var extra []query
		for range 40 {
			q := query{Domain: "r"}
			for range 1 + rng.IntN(3) {
				q.Entries = append(q.Entries, Entry{pick(qkeys...), pick(qvalues...)})
			}
			extra = append(extra, q)
		}
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) {
			c, err := compareWithEnvoy(t, dir, extra)
			if err == nil {
				accepted++
				for _, q := range extra {
					if c.Lookup(q.Domain, q.Entries) != nil {
						found++
					}
				}
			}
		})
		if !ok {
			t.Logf("configuration %d:\n%s", i, b.String())
		}
	}
	// Neither all rejected nor all accepted, and rules found: not vacuous.
	t.Logf("%d of %d configurations accepted; %d random descriptors found a rule", accepted, configs, found)
	if accepted < configs/5 || accepted == configs || found < 100 {
		t.Errorf("%d of %d configurations accepted, %d rules found: the generator needs tuning", accepted, configs, found)
	}
}
