package envoydiff

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// desc returns a descriptor of the given key, value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets d's own hits_addend.
func withHits(d *rlcommon.RateLimitDescriptor, hits uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// withOverride sets d's limit override.
func withOverride(d *rlcommon.RateLimitDescriptor, rpu uint32, u typev3.RateLimitUnit) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
	return d
}

// okStatus and overStatus are the expected statuses of a limited
// descriptor, with a duration until the end of u's window.
func okStatus(rpu uint32, u unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return limitStatus(&rule{rpu: rpu, unit: u}, rlsv3.RateLimitResponse_OK, remaining)
}

func overStatus(rpu uint32, u unit) *rlsv3.RateLimitResponse_DescriptorStatus {
	return overLeft(rpu, u, 0)
}

// overLeft is ratekeeper's OVER_LIMIT status: the remaining is what is
// left, since the denial took nothing.
func overLeft(rpu uint32, u unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return limitStatus(&rule{rpu: rpu, unit: u}, rlsv3.RateLimitResponse_OVER_LIMIT, remaining)
}

// answer is the expected answer of the statuses: OVER_LIMIT if one is.
func answer(statuses ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}
	for _, s := range statuses {
		if s.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			r.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return r
}

// step is one request of a scenario and each service's expected answer.
type step struct {
	hits      uint32 // the request's hits_addend
	ds        []*rlcommon.RateLimitDescriptor
	envoy, rk *rlsv3.RateLimitResponse
}

// runScenario starts both services on rules, envoy with envoyEnv added to
// its settings, and sends the steps to each in turn over gRPC, checking
// every answer.
func runScenario(t *testing.T, rules []*rule, steps []step, envoyEnv ...string) {
	t.Helper()
	domains := map[string][]*rule{}
	names := twoDomains(t, domains, "named", func() []*rule { return rules })
	p := startPair(t, domains, envoyEnv...)
	inOneWindow(t, names, func(domain string) []string {
		var problems []string
		for i, st := range steps {
			req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: st.hits, Descriptors: st.ds}
			for _, s := range p.services() {
				want := st.envoy
				if s == p.rk {
					want = st.rk
				}
				c := s.ask(req, false)
				if c.err != nil {
					problems = append(problems, fmt.Sprintf("step %d, %s: request %s: %v", i+1, s.name, requestString(req), c.err))
					continue
				}
				if d := compare(c.resp, want, c, 1); d != "" {
					problems = append(problems, fmt.Sprintf("step %d, %s: request %s:\n\tanswer %s\n\twant   %s\n\t%s",
						i+1, s.name, requestString(req), responseString(c.resp), responseString(want), d))
				}
			}
		}
		return problems
	})
	p.finish(t)
}

// TestDeniedRequestTakesNothing: envoy adds a denied request's hits to
// its counter, so that a later request that would fit is denied too;
// ratekeeper takes nothing for a denial.
func TestDeniedRequestTakesNothing(t *testing.T) {
	t.Parallel()
	rules := []*rule{{key: "user", unit: hour, rpu: 5}}
	runScenario(t, rules, []step{
		{hits: 3, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")},
			envoy: answer(okStatus(5, hour, 2)),
			rk:    answer(okStatus(5, hour, 2))},
		// Denied by both; envoy's counter is 6 after it, ratekeeper's 3,
		// and each says so in limit_remaining.
		{hits: 3, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")},
			envoy: answer(overStatus(5, hour)),
			rk:    answer(overLeft(5, hour, 2))},
		{hits: 2, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")},
			envoy: answer(overStatus(5, hour)),
			rk:    answer(okStatus(5, hour, 0))},
		// A peek (a descriptor's hits_addend of 0): envoy's counter, 8, is
		// over 5; ratekeeper's is at 5, which is not over.
		{ds: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "a"), 0)},
			envoy: answer(overStatus(5, hour)),
			rk:    answer(okStatus(5, hour, 0))},
	})
}

// TestDenialTakesNothingFromOtherDescriptors: envoy counts each
// descriptor of a request on its own, so a request denied by one still
// takes from the others; ratekeeper takes from none of them.
func TestDenialTakesNothingFromOtherDescriptors(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "user", unit: hour, rpu: 5},
		{key: "ip", unit: day, rpu: 1},
	}
	runScenario(t, rules, []step{
		{ds: []*rlcommon.RateLimitDescriptor{desc("ip", "x")},
			envoy: answer(okStatus(1, day, 0)),
			rk:    answer(okStatus(1, day, 0))},
		// Denied by ip: envoy takes 1 from user anyway.
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a"), desc("ip", "x")},
			envoy: answer(okStatus(5, hour, 4), overStatus(1, day)),
			rk:    answer(okStatus(5, hour, 5), overStatus(1, day))},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")},
			envoy: answer(okStatus(5, hour, 3)),
			rk:    answer(okStatus(5, hour, 4))},
	})
}

// TestZeroLimitDenialTakesNothing: a request denied by a rule of
// requests_per_unit 0 takes nothing from its other descriptors either.
func TestZeroLimitDenialTakesNothing(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "user", unit: hour, rpu: 5},
		{key: "blocked", unit: hour, rpu: 0},
	}
	runScenario(t, rules, steps{
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a"), desc("blocked", "b")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
	}.with(
		answer(okStatus(5, hour, 4), overStatus(0, hour)), answer(okStatus(5, hour, 5), overStatus(0, hour)),
		answer(okStatus(5, hour, 3)), answer(okStatus(5, hour, 4)),
	))
}

// TestEnvoyStopIncrementStillCountsDenials: envoy's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT spares the other descriptors of
// a denied request, but still adds the hits of the descriptor that denies
// it (src/redis/fixed_cache_impl.go, getHitsAddend), so a denial still
// counts against a later request that would fit.
func TestEnvoyStopIncrementStillCountsDenials(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "user", unit: hour, rpu: 5},
		{key: "ip", unit: day, rpu: 1},
	}
	runScenario(t, rules, steps{
		{hits: 3, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
		{hits: 3, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
		{hits: 2, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("ip", "x")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "b"), desc("ip", "x")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "b")}},
	}.with(
		answer(okStatus(5, hour, 2)), answer(okStatus(5, hour, 2)),
		answer(overStatus(5, hour)), answer(overLeft(5, hour, 2)),
		// envoy's counter is at 6 after the denial: 8 now.
		answer(overStatus(5, hour)), answer(okStatus(5, hour, 0)),
		answer(okStatus(1, day, 0)), answer(okStatus(1, day, 0)),
		// Here the flag works: user b is not counted.
		answer(okStatus(5, hour, 5), overStatus(1, day)), answer(okStatus(5, hour, 5), overStatus(1, day)),
		answer(okStatus(5, hour, 4)), answer(okStatus(5, hour, 4)),
	), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
}

// TestOverrideCountedByItsValue: envoy keys a counter by the descriptor's
// entries and unit alone, so every limit override of the same entries and
// unit shares one counter (envoyproxy/ratelimit#1077); ratekeeper counts
// each override value apart.
func TestOverrideCountedByItsValue(t *testing.T) {
	t.Parallel()
	rules := []*rule{{key: "user", unit: hour, rpu: 10}}
	runScenario(t, rules, steps{
		{hits: 2, ds: []*rlcommon.RateLimitDescriptor{withOverride(desc("user", "a"), 2, typev3.RateLimitUnit_HOUR)}},
		{ds: []*rlcommon.RateLimitDescriptor{withOverride(desc("user", "a"), 4, typev3.RateLimitUnit_HOUR)}},
	}.with(
		answer(okStatus(2, hour, 0)), answer(okStatus(2, hour, 0)),
		// envoy's shared counter is at 3 of 4; ratekeeper's own at 1.
		answer(okStatus(4, hour, 1)), answer(okStatus(4, hour, 3)),
	))
}

// steps is a scenario written request by request.
type steps []step

// with sets the expected answers, envoy's then ratekeeper's for each step.
func (s steps) with(answers ...*rlsv3.RateLimitResponse) []step {
	for i := range s {
		s[i].envoy, s[i].rk = answers[2*i], answers[2*i+1]
	}
	return s
}

// same sets the expected answer of each step, the same for both services.
func (s steps) same(answers ...*rlsv3.RateLimitResponse) []step {
	for i := range s {
		s[i].envoy, s[i].rk = answers[i], answers[i]
	}
	return s
}

// noLimit is the status of a descriptor that no rule limits.
var noLimit = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}

// named returns st with the rule's name in its current_limit.
func named(st *rlsv3.RateLimitResponse_DescriptorStatus, name string) *rlsv3.RateLimitResponse_DescriptorStatus {
	st.CurrentLimit.Name = name
	return st
}

// TestMatching: nested descriptors, an exact value beside the key alone,
// wildcards and a rule with a limit of its own and a nested one match as
// in envoy, and a key-only or wildcard rule counts each value apart.
func TestMatching(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "team", children: []*rule{{key: "user", unit: hour, rpu: 3}}},
		{key: "team", value: "red", children: []*rule{{key: "ip", unit: day, rpu: 2}}},
		{key: "path", value: "/api/*", unit: day, rpu: 4},
		{key: "region", unit: day, rpu: 6, children: []*rule{{key: "zone", value: "a", unit: hour, rpu: 2}}},
	}
	one := func(kv ...string) []*rlcommon.RateLimitDescriptor {
		return []*rlcommon.RateLimitDescriptor{desc(kv...)}
	}
	runScenario(t, rules, steps{
		{ds: one("team", "t1", "user", "u")},
		{ds: one("team", "t2", "user", "u")},
		// team_red matches exactly, and has no user below it.
		{ds: one("team", "red", "user", "u")},
		{ds: one("team", "red", "ip", "1")},
		{ds: one("team", "t1")},
		{ds: one("team", "t1", "user", "u", "extra", "x")},
		{ds: one("path", "/api/x")},
		{ds: one("path", "/api/y")},
		{ds: one("path", "/apix")},
		{ds: one("region", "eu")},
		{ds: one("region", "eu", "zone", "a")},
		{ds: one("region", "us", "zone", "a")},
		{ds: one("region", "eu", "zone", "b")},
	}.same(
		answer(okStatus(3, hour, 2)),
		answer(okStatus(3, hour, 2)),
		answer(noLimit),
		answer(okStatus(2, day, 1)),
		answer(noLimit),
		answer(noLimit),
		answer(okStatus(4, day, 3)),
		answer(okStatus(4, day, 3)),
		answer(noLimit),
		answer(okStatus(6, day, 5)),
		answer(okStatus(2, hour, 1)),
		answer(okStatus(2, hour, 1)),
		answer(noLimit),
	))
}

// TestReplaces: a matched rule that replaces a named one drops it from
// the request, which then neither limits nor counts.
func TestReplaces(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "tenant", unit: hour, rpu: 4, name: "tenant"},
		{key: "burst", unit: hour, rpu: 6, replaces: []string{"tenant"}},
	}
	runScenario(t, rules, steps{
		{ds: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("tenant", "a"), desc("burst", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("tenant", "a")}},
	}.same(
		answer(named(okStatus(4, hour, 3), "tenant")),
		answer(noLimit, okStatus(6, hour, 5)),
		answer(named(okStatus(4, hour, 2), "tenant")),
	))
}

// TestShadowMode: a shadow_mode rule answers OK with its limit when over
// it, and its descriptor never denies the request.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	rules := []*rule{
		{key: "trial", unit: hour, rpu: 2, shadow: true, name: "trial"},
		{key: "user", unit: hour, rpu: 1},
	}
	shadowOver := func() *rlsv3.RateLimitResponse_DescriptorStatus {
		st := named(overStatus(2, hour), "trial")
		st.Code = rlsv3.RateLimitResponse_OK
		return st
	}
	runScenario(t, rules, steps{
		{hits: 2, ds: []*rlcommon.RateLimitDescriptor{desc("trial", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("trial", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("trial", "a"), desc("user", "u")}},
		// Denied by user; the shadow rule is decided apart, and counts.
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "u"), desc("trial", "b")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("trial", "b")}},
	}.same(
		answer(named(okStatus(2, hour, 0), "trial")),
		answer(shadowOver()),
		answer(shadowOver(), okStatus(1, hour, 0)),
		answer(overStatus(1, hour), named(okStatus(2, hour, 1), "trial")),
		answer(named(okStatus(2, hour, 0), "trial")),
	))
}

// TestZeroLimit: requests_per_unit 0 denies every hit; a peek (hits 0)
// at it is OK with nothing remaining.
func TestZeroLimit(t *testing.T) {
	t.Parallel()
	rules := []*rule{{key: "blocked", unit: hour, rpu: 0}}
	runScenario(t, rules, steps{
		{ds: []*rlcommon.RateLimitDescriptor{withHits(desc("blocked", "a"), 0)}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("blocked", "b")}},
		{hits: 5, ds: []*rlcommon.RateLimitDescriptor{desc("blocked", "c")}},
	}.same(
		answer(okStatus(0, hour, 0)),
		answer(overStatus(0, hour)),
		answer(overStatus(0, hour)),
	))
}

// TestDuplicateDescriptors: the same descriptor twice in one request
// counts twice, in order.
func TestDuplicateDescriptors(t *testing.T) {
	t.Parallel()
	rules := []*rule{{key: "user", unit: hour, rpu: 3}}
	runScenario(t, rules, steps{
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a"), desc("user", "a")}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
	}.same(
		answer(okStatus(3, hour, 2), okStatus(3, hour, 1)),
		answer(okStatus(3, hour, 0)),
	))
}

// TestUnknownDomain: a domain with no configuration limits nothing: OK,
// and no current_limit, for every descriptor, even one with an override.
func TestUnknownDomain(t *testing.T) {
	t.Parallel()
	domains := map[string][]*rule{domainName("known"): {{key: "user", unit: hour, rpu: 1}}}
	p := startPair(t, domains)
	req := &rlsv3.RateLimitRequest{Domain: domainName("unknown"), HitsAddend: 5, Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("user", "a"),
		withOverride(desc("user", "b"), 1, typev3.RateLimitUnit_HOUR),
	}}
	none := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	want := answer(none, none)
	for _, overHTTP := range []bool{false, true} {
		var calls []call
		for _, s := range p.services() {
			c := s.ask(req, overHTTP)
			if c.err != nil || c.transportIssue != "" {
				t.Fatalf("%s (HTTP %v): %v %s", s.name, overHTTP, c.err, c.transportIssue)
			}
			if d := compare(c.resp, want, c, 1); d != "" {
				t.Errorf("%s (HTTP %v): answer %s: %s", s.name, overHTTP, responseString(c.resp), d)
			}
			calls = append(calls, c)
		}
		if len(calls) == 2 {
			if d := compareReplies(calls[0], calls[1]); d != "" {
				t.Errorf("HTTP %v: ratekeeper's answer differs from envoy's: %s", overHTTP, d)
			}
		}
	}
	p.finish(t)
}

// TestEmptyRequest: a request without descriptors, or without a domain, is
// an error over gRPC and HTTP 400 from POST /json.
func TestEmptyRequest(t *testing.T) {
	t.Parallel()
	domain := domainName("empty")
	p := startPair(t, map[string][]*rule{domain: {{key: "user", unit: hour, rpu: 1}}})
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: domain},
		{Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
	} {
		for _, s := range p.services() {
			c := s.ask(req, false)
			if c.err == nil {
				t.Errorf("%s: request %s: answer %s, want an error", s.name, requestString(req), responseString(c.resp))
			} else {
				t.Logf("%s: request %s: gRPC %v", s.name, requestString(req), status.Convert(c.err))
			}
			c = s.ask(req, true)
			if c.err == nil || c.httpStatus != http.StatusBadRequest {
				t.Errorf("%s: POST /json %s: HTTP %d (%v), want 400", s.name, requestString(req), c.httpStatus, c.err)
			}
		}
	}
	p.finish(t)
}

// TestMalformedJSON: POST /json answers 400 to a body that is not a
// request, including one with a field the request does not have.
func TestMalformedJSON(t *testing.T) {
	t.Parallel()
	domain := domainName("json")
	p := startPair(t, map[string][]*rule{domain: {{key: "user", unit: hour, rpu: 1}}})
	for _, body := range []string{
		``,
		`not json`,
		`{"domain":`,
		`{"domain": 1}`,
		`{"domain": "` + domain + `", "descriptors": [{"entries": [{"key": 1}]}]}`,
		`{"domain": "` + domain + `", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}], "unknown_field": 1}`,
		`[]`,
	} {
		for _, s := range p.services() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, out, err := s.post(ctx, "/json", []byte(body))
			cancel()
			if err != nil {
				t.Fatalf("%s: POST /json %q: %v", s.name, body, err)
			}
			if code != http.StatusBadRequest {
				t.Errorf("%s: POST /json %q: HTTP %d %q, want 400", s.name, body, code, out)
			}
		}
	}
	p.finish(t)
}

// TestHealthcheck: GET /healthcheck answers 200 "OK" while serving.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	domain := domainName("health")
	p := startPair(t, map[string][]*rule{domain: {{key: "user", unit: hour, rpu: 1}}})
	for _, s := range p.services() {
		resp, err := http.Get(s.addrs.URL("/healthcheck"))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || string(body) != "OK" {
			t.Errorf("%s: GET /healthcheck: HTTP %d %q, want 200 \"OK\"", s.name, resp.StatusCode, body)
		}
	}
	p.finish(t)
}

// TestHitsAddendMeanings: a request's hits_addend of 0 means 1; a
// descriptor's own hits_addend overrides it, and its 0 takes nothing. Both
// services agree.
func TestHitsAddendMeanings(t *testing.T) {
	t.Parallel()
	rules := []*rule{{key: "user", unit: hour, rpu: 3}, {key: "unlimited", unlimited: true}}
	unlimited := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	runScenario(t, rules, steps{
		// A peek at a counter never used: the full limit, and the time to
		// the end of the window.
		{ds: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "c"), 0)}},
		{ds: []*rlcommon.RateLimitDescriptor{desc("user", "a")}},
		{hits: 5, ds: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "a"), 0), withHits(desc("user", "b"), 2)}},
		{hits: 2, ds: []*rlcommon.RateLimitDescriptor{desc("user", "a"), desc("unlimited", "x")}},
		{ds: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "a"), 0)}},
		{hits: 0, ds: []*rlcommon.RateLimitDescriptor{desc("user", "b")}},
	}.with(
		answer(okStatus(3, hour, 3)), answer(okStatus(3, hour, 3)),
		answer(okStatus(3, hour, 2)), answer(okStatus(3, hour, 2)),
		answer(okStatus(3, hour, 2), okStatus(3, hour, 1)), answer(okStatus(3, hour, 2), okStatus(3, hour, 1)),
		answer(okStatus(3, hour, 0), unlimited), answer(okStatus(3, hour, 0), unlimited),
		answer(okStatus(3, hour, 0)), answer(okStatus(3, hour, 0)),
		answer(okStatus(3, hour, 0)), answer(okStatus(3, hour, 0)),
	))
}
