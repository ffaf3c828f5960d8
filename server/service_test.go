package server

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/server/config"
)

const testConfig = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /slow
    rate_limit: {unit: hour, requests_per_unit: 2, name: slow-path}
  - key: team
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: vip
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// stores returns the stores every service test runs on: the in-process
// one, and Redis when RATEKEEPER_REDIS_ADDR names one (a failure under
// CI=true when it does not).
func stores(t *testing.T) map[string]Store {
	t.Helper()
	out := map[string]Store{"memstore": memstore.New()}
	if c := redisClient(t); c != nil {
		out["redis"] = redisstore.New(c, redisstore.WithKeyPrefix("svc-"+strconv.FormatInt(time.Now().UnixNano(), 36)+":"))
	}
	return out
}

// redisClient is a client of the test Redis, or nil without one.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	addr := os.Getenv("RATEKEEPER_REDIS_ADDR")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RATEKEEPER_REDIS_ADDR is not set: run the tests with scripts/with-redis.sh (make test)")
		}
		t.Log("RATEKEEPER_REDIS_ADDR is not set: Redis cases skipped")
		return nil
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func loadConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newService(t *testing.T, st Store, yaml string, opts Options) *Service {
	t.Helper()
	svc := New(st, opts)
	if err := svc.SetConfig(loadConfig(t, yaml)); err != nil {
		t.Fatal(err)
	}
	return svc
}

// desc makes a descriptor of key/value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func ask(t *testing.T, svc *Service, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// unique returns a value no other test uses, so that tests sharing a
// Redis never share a counter.
func unique(t *testing.T) string {
	return t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func TestEnvoyFixedWindow(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, testConfig, Options{})
			user := unique(t)
			for want := 4; want >= 0; want-- {
				resp := ask(t, svc, 0, desc("user", user))
				s := resp.Statuses[0]
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(want) {
					t.Fatalf("want OK with %d remaining, got %v", want, resp)
				}
				if l := s.CurrentLimit; l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
					t.Fatalf("current_limit %v", l)
				}
				checkUntilHour(t, s.DurationUntilReset.AsDuration())
			}
			resp := ask(t, svc, 0, desc("user", user))
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
				resp.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("6th call: %v", resp)
			}
			checkUntilHour(t, resp.Statuses[0].DurationUntilReset.AsDuration())
		})
	}
}

// checkUntilHour checks a duration_until_reset against the time to the
// top of the hour, as envoy gives it: whole seconds, 1 to 3600.
func checkUntilHour(t *testing.T, got time.Duration) {
	t.Helper()
	now := time.Now()
	want := now.Truncate(time.Hour).Add(time.Hour).Sub(now)
	if got%time.Second != 0 || got < time.Second || got > time.Hour || (got-want).Abs() > 2*time.Second {
		t.Fatalf("duration_until_reset %v, want about %v (to the top of the hour)", got, want)
	}
}

func TestUnmatchedUnlimitedAndUnknown(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	resp := ask(t, svc, 0, desc("nothing", "here"), desc("vip", "x"), desc("path", "/fast"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatal(resp)
	}
	if s := resp.Statuses[0]; s.CurrentLimit != nil || s.LimitRemaining != 0 || s.DurationUntilReset != nil {
		t.Errorf("no rule: %v", s)
	}
	if s := resp.Statuses[1]; s.CurrentLimit != nil || s.LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited: %v", s)
	}
	if s := resp.Statuses[2]; s.CurrentLimit != nil {
		t.Errorf("another value of a valued rule: %v", s)
	}
	other, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "nope",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
	if err != nil || other.OverallCode != rlsv3.RateLimitResponse_OK || other.Statuses[0].CurrentLimit != nil {
		t.Errorf("unknown domain: %v, %v", other, err)
	}
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}},
		{Domain: "test"},
	} {
		if _, err := svc.Decide(context.Background(), req); !errors.Is(err, errInvalidRequest) {
			t.Errorf("%v: want an invalid request, got %v", req, err)
		}
	}
}

func TestHitsAddend(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, testConfig, Options{})
			user := unique(t)
			if s := ask(t, svc, 3, desc("user", user)).Statuses[0]; s.LimitRemaining != 2 {
				t.Fatalf("request hits 3: %v", s)
			}
			// A descriptor's own hits_addend wins, and 0 only looks.
			if s := ask(t, svc, 3, withHits(desc("user", user), 0)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 2 {
				t.Fatalf("descriptor hits 0: %v", s)
			}
			// A cost above what is left is denied and takes nothing.
			if s := ask(t, svc, 3, desc("user", user)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("hits 3 of 2 left: %v", s)
			}
			if s := ask(t, svc, 0, withHits(desc("user", user), 2)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 0 {
				t.Fatalf("hits 2 of 2 left, after a denial: %v", s)
			}
			// At the limit, a peek is still OK: it needs nothing.
			if s := ask(t, svc, 0, withHits(desc("user", user), 0)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK {
				t.Fatalf("peek at the limit: %v", s)
			}
			// A cost above the limit itself is OVER_LIMIT, not an error.
			if s := ask(t, svc, 7, desc("user", unique(t))).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("hits 7 against a limit of 5: %v", s)
			}
		})
	}
}

func TestDeniedRequestTakesNothing(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, testConfig, Options{})
			user, team := unique(t), unique(t)
			// team+user allows 3, user alone 5.
			for range 3 {
				if resp := ask(t, svc, 0, desc("user", user), desc("team", team, "user", user)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatal(resp)
				}
			}
			resp := ask(t, svc, 0, desc("user", user), desc("team", team, "user", user))
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT ||
				resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("4th: %v", resp)
			}
			if got := resp.Statuses[0].LimitRemaining; got != 2 {
				t.Fatalf("the allowed descriptor of a denied request reports %d remaining, want 2 (nothing taken)", got)
			}
			// So user alone still has 2.
			for want := 1; want >= 0; want-- {
				if s := ask(t, svc, 0, desc("user", user)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(want) {
					t.Fatalf("user alone: %v", s)
				}
			}
			// A cost above a limit denies the whole request, taking nothing.
			other := unique(t)
			resp = ask(t, svc, 4, desc("user", other), desc("team", team, "user", other))
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
				t.Fatalf("hits 4 against 5 and 3: %v", resp)
			}
			if s := ask(t, svc, 5, desc("user", other)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 0 {
				t.Fatalf("after the denied request, user has all 5: %v", s)
			}
		})
	}
}

func TestBlockedRule(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	resp := ask(t, svc, 0, desc("closed", "x"))
	if s := resp.Statuses[0]; resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || s.CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatal(resp)
	}
	if resp := ask(t, svc, 0, withHits(desc("closed", "x"), 0)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a peek at a closed rule: %v", resp)
	}
}

func TestShadowMode(t *testing.T) {
	for _, global := range []bool{false, true} {
		t.Run("global="+strconv.FormatBool(global), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			svc := newService(t, memstore.New(), testConfig, Options{Shadow: global, Metrics: m})
			key, rule, limit := "trial", "trial", 1
			if global {
				key, rule, limit = "user", "user", 5
			}
			v := unique(t)
			for i := range limit + 3 {
				resp := ask(t, svc, 0, desc(key, v))
				if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit == nil {
					t.Fatalf("call %d: %v", i, resp)
				}
			}
			if got := testutil.ToFloat64(m.shadow.WithLabelValues("test", rule)); got != 3 {
				names := []string{}
				for _, r := range svc.current.Load().rules {
					names = append(names, r.cfg.Name)
				}
				t.Fatalf("would-deny count %v, want 3 (rules %q)", got, names)
			}
		})
	}
}

func TestShadowRuleDoesNotBlockOthers(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	user := unique(t)
	for i := range 5 {
		resp := ask(t, svc, 0, desc("user", user), desc("trial", user))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(4-i) {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
}

func TestLimitOverride(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, testConfig, Options{})
			user := unique(t)
			over := func(n uint32) *ratelimitv3.RateLimitDescriptor {
				d := desc("user", user)
				d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit_HOUR}
				return d
			}
			for want := 1; want >= 0; want-- {
				s := ask(t, svc, 0, over(2)).Statuses[0]
				if s.LimitRemaining != uint32(want) || s.CurrentLimit.GetRequestsPerUnit() != 2 {
					t.Fatalf("override of 2: %v", s)
				}
			}
			if s := ask(t, svc, 0, over(2)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("3rd of 2: %v", s)
			}
			// Another value is another limit, with its own counter.
			if s := ask(t, svc, 0, over(10)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 9 {
				t.Fatalf("override of 10: %v", s)
			}
			if len(svc.overrides.rules) != 2 {
				t.Fatalf("%d override rules cached, want 2", len(svc.overrides.rules))
			}
		})
	}
}

func TestReplaces(t *testing.T) {
	svc := newService(t, memstore.New(), `
domain: test
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1, name: narrow}
  - key: b
    rate_limit:
      unit: hour
      requests_per_unit: 100
      name: wide
      replaces:
        - name: narrow
`, Options{})
	for range 3 {
		resp := ask(t, svc, 0, desc("a", "1"), desc("b", "1"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
			t.Fatalf("a replaced rule limits nothing: %v", resp)
		}
	}
	if resp := ask(t, svc, 0, desc("a", "1")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("alone, a's rule applies, and it has not been charged: %v", resp)
	}
}

func TestStoreErrors(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	st := redisstore.New(dead)
	for _, tc := range []struct {
		mode OnStoreError
		code rlsv3.RateLimitResponse_Code
	}{{FailAllow, rlsv3.RateLimitResponse_OK}, {FailDeny, rlsv3.RateLimitResponse_OVER_LIMIT}} {
		svc := newService(t, st, testConfig, Options{OnStoreError: tc.mode})
		resp := ask(t, svc, 0, desc("user", "a"), desc("nothing", "b"))
		if resp.OverallCode != tc.code || resp.Statuses[0].Code != tc.code || resp.Statuses[0].CurrentLimit == nil ||
			resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK {
			t.Errorf("mode %d: %v", tc.mode, resp)
		}
	}
	svc := newService(t, st, testConfig, Options{})
	_, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
	if err == nil || !strings.Contains(grpcError(err).Error(), "Unavailable") {
		t.Fatalf("default: %v", grpcError(err))
	}
}

func TestOneScriptCallPerRequest(t *testing.T) {
	c := redisClient(t)
	if c == nil {
		t.Skip("needs Redis")
	}
	svc := newService(t, redisstore.New(c, redisstore.WithAutoPipelining(false)), testConfig, Options{})
	user, team := unique(t), unique(t)
	ask(t, svc, 0, desc("user", user), desc("team", team, "user", user), desc("path", "/slow")) // loads the script
	before := scriptCalls(t, c)
	const calls = 10
	for range calls {
		ask(t, svc, 0, desc("user", user), desc("team", team, "user", user), desc("path", "/slow"))
	}
	if got := scriptCalls(t, c) - before; got != calls {
		t.Fatalf("%d script calls for %d requests of 3 descriptors, want one each", got, calls)
	}
}

// scriptCalls counts the EVAL and EVALSHA calls Redis has served.
func scriptCalls(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for line := range strings.SplitSeq(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") || strings.HasPrefix(line, "cmdstat_fcall:") {
			_, rest, _ := strings.Cut(line, "calls=")
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			total += n
		}
	}
	return total
}

func TestResponseHeaders(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{ResponseHeaders: true})
	user := unique(t)
	resp := ask(t, svc, 0, desc("user", user), desc("path", "/slow"), desc("nothing", "x"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if p := got["RateLimit-Policy"]; !strings.Contains(p, ";q=5;w=3600") || !strings.Contains(p, `"slow-path";q=2;w=3600`) {
		t.Errorf("RateLimit-Policy: %q", p)
	}
	if r := got["RateLimit"]; !strings.HasPrefix(r, `"slow-path";r=1;t=`) {
		t.Errorf("RateLimit: %q, want the binding slow-path's", r)
	}
	if resp := ask(t, svc, 0, desc("nothing", "x")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without a limit: %v", resp.ResponseHeadersToAdd)
	}
}

func TestSeveralLimitsOnOneDescriptor(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, `
domain: test
descriptors:
  - key: api_key
    rate_limits:
      - name: burst
        algorithm: token_bucket
        requests_per_unit: 3
        unit: hour
      - name: quarter
        algorithm: sliding_window_log
        requests_per_unit: 5
        period: 15m
`, Options{})
			key := unique(t)
			// The token bucket binds first: 3 per hour, 2 then 1 then 0 left.
			for want := 2; want >= 0; want-- {
				s := ask(t, svc, 0, desc("api_key", key)).Statuses[0]
				if s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != uint32(want) || s.CurrentLimit.GetName() != "burst" {
					t.Fatalf("want OK, %d left of burst: %v", want, s)
				}
			}
			s := ask(t, svc, 0, desc("api_key", key)).Statuses[0]
			if s.Code != rlsv3.RateLimitResponse_OVER_LIMIT || s.CurrentLimit.GetName() != "burst" {
				t.Fatalf("4th: %v", s)
			}
			// Its 3 tokens come back together, at the end of its hour.
			if d := s.DurationUntilReset.AsDuration(); d < 59*time.Minute || d > time.Hour {
				t.Fatalf("denied by a token bucket of 3 per hour: retry in %v, want 1h", d)
			}
			// A 15-minute period is reported as 15 minutes.
			other := unique(t)
			s = ask(t, svc, 3, desc("api_key", other)).Statuses[0]
			if s.CurrentLimit.GetName() != "burst" {
				t.Fatalf("%v", s)
			}
			s = ask(t, svc, 0, withHits(desc("api_key", unique(t)), 0)).Statuses[0]
			if l := s.CurrentLimit; l.GetName() == "quarter" && (l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetUnitMultiplier().GetValue() != 15) {
				t.Fatalf("15m as a current_limit: %v", l)
			}
		})
	}
}

func TestPeekDoesNotBlockOthers(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			svc := newService(t, st, testConfig, Options{})
			user, team := unique(t), unique(t)
			ask(t, svc, 0, withHits(desc("path", "/slow"), 2)) // path=/slow exhausted
			resp := ask(t, svc, 0, withHits(desc("path", "/slow"), 0), desc("team", team, "user", user))
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
				resp.Statuses[1].LimitRemaining != 2 {
				t.Fatalf("a peek at an exhausted limit beside a request that fits: %v", resp)
			}
		})
	}
}

// TestClusterGuarantee checks the guarantee given on a Redis Cluster: the
// descriptors of a request whose keys share a hash slot are decided all
// or nothing; across slots, a denial in one slot does not undo what
// another slot's descriptors took, and no limit ever admits more than it
// allows.
func TestClusterGuarantee(t *testing.T) {
	addrs := os.Getenv("RATEKEEPER_REDIS_CLUSTER")
	if addrs == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("RATEKEEPER_REDIS_CLUSTER is not set: run the tests with scripts/with-redis.sh (make test)")
		}
		t.Skip("RATEKEEPER_REDIS_CLUSTER is not set")
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
	defer c.Close()
	svc := newService(t, redisstore.New(c), testConfig, Options{})
	slot := func(user string) uint16 {
		return crc16([]byte(stateKey("test", []config.Entry{{Key: "user", Value: user}}))) % 16384
	}
	if want, err := c.ClusterKeySlot(context.Background(), "{"+stateKey("test", []config.Entry{{Key: "user", Value: "x"}})+"}").Result(); err != nil || uint16(want) != slot("x") {
		t.Fatalf("the local slot of x is %d, Redis says %d (%v)", slot("x"), want, err)
	}
	// Two users in one slot, and one in another.
	base := unique(t)
	a := base + "-a"
	var same, other string
	for i := 0; same == "" || other == ""; i++ {
		v := base + "-" + strconv.Itoa(i)
		switch {
		case slot(v) == slot(a) && same == "":
			same = v
		case slot(v) != slot(a) && other == "":
			other = v
		}
	}
	ask(t, svc, 5, desc("user", a)) // a is exhausted

	resp := ask(t, svc, 0, desc("user", a), desc("user", same))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].LimitRemaining != 5 {
		t.Fatalf("same slot: %v", resp)
	}
	if s := ask(t, svc, 5, desc("user", same)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK {
		t.Fatalf("same slot: the denied request took from %s: %v", same, s)
	}

	resp = ask(t, svc, 0, desc("user", a), desc("user", other))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("across slots: %v", resp)
	}
	if s := ask(t, svc, 5, withHits(desc("user", other), 0)).Statuses[0]; s.LimitRemaining != 4 {
		t.Fatalf("across slots, the other slot's descriptor took its hit, as documented: %v", s)
	}
}

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestTooManyDescriptors(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	var ds []*ratelimitv3.RateLimitDescriptor
	for i := range 100 {
		ds = append(ds, desc("user", strconv.Itoa(i)))
	}
	_, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test", Descriptors: ds})
	if !errors.Is(err, errInvalidRequest) || !strings.Contains(grpcError(err).Error(), "InvalidArgument") {
		t.Fatalf("100 limited descriptors: %v", err)
	}
}
