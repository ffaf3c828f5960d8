package envoydiff

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
)

func TestMain(m *testing.M) { os.Exit(envoytest.Run(m)) }

// diffRules is the configuration of the random comparison: every kind of
// rule envoy's format has, with small limits so that sequences deny
// often.
func diffRules() []*rule {
	return []*rule{
		{key: "plan", value: "gold", unit: hour, rpu: 7, name: "gold-plan"},
		// Key only: one counter per value.
		{key: "user", unit: hour, rpu: 5},
		{key: "path", value: "/api/*", unit: day, rpu: 4},
		// Nested, with an exact value beside the key alone at the same
		// level: envoy takes the exact one and never goes back.
		{key: "team", children: []*rule{{key: "user", unit: hour, rpu: 3}}},
		{key: "team", value: "red", children: []*rule{{key: "ip", unit: day, rpu: 2}}},
		// A limit of its own and a nested one.
		{key: "region", unit: day, rpu: 6, children: []*rule{{key: "zone", value: "a", unit: hour, rpu: 2}}},
		{key: "vip", unlimited: true},
		{key: "trial", unit: hour, rpu: 3, shadow: true, name: "trial"},
		{key: "blocked", unit: hour, rpu: 0},
		{key: "tenant", unit: hour, rpu: 4, name: "tenant"},
		{key: "burst", unit: hour, rpu: 6, replaces: []string{"tenant"}},
	}
}

// entryPool holds the descriptors random requests draw from, as key,
// value pairs: matched ones of every rule above, and unmatched ones.
var entryPool = [][]string{
	{"plan", "gold"},
	{"plan", "silver"}, // no rule
	{"user", "u1"},
	{"user", "u2"},
	{"user", "u3"},
	{"path", "/api/a"},
	{"path", "/api/b"},
	{"path", "/web"}, // no rule
	{"team", "t1", "user", "u1"},
	{"team", "t2", "user", "u1"},
	{"team", "red", "user", "u1"}, // team_red has no user: no rule
	{"team", "red", "ip", "10.0.0.1"},
	{"team", "t1"},            // team alone has no limit
	{"team", "t1", "ip", "x"}, // no rule
	{"region", "eu"},
	{"region", "eu", "zone", "a"},
	{"region", "us", "zone", "a"},
	{"region", "eu", "zone", "b"}, // no rule
	{"vip", "v"},
	{"vip", "v", "user", "u1"}, // deeper than the rule: no rule
	{"trial", "t1"},
	{"trial", "t2"},
	{"blocked", "b"},
	{"tenant", "a"},
	{"burst", "a"},
	{"other", "x"},               // no rule
	{"user", "u1", "extra", "1"}, // deeper than the rule: no rule
}

var hitsChoices = []uint64{0, 1, 1, 1, 2, 5}

// randomRequest draws a request of 1 to 3 descriptors, with a request's
// hits_addend of 0, 1, 2 or 5 and, on some descriptors, a hits_addend of
// their own.
func randomRequest(rng *rand.Rand, domain string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(hitsChoices[rng.IntN(len(hitsChoices))])}
	for range 1 + rng.IntN(3) {
		d := &rlcommon.RateLimitDescriptor{}
		kv := entryPool[rng.IntN(len(entryPool))]
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		if rng.IntN(4) == 0 {
			d.HitsAddend = wrapperspb.UInt64([]uint64{0, 1, 2, 5}[rng.IntN(4)])
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// inOneWindow runs run on the first of two fresh domains and reports its
// problems, unless the run crossed the top of an hour, the end of every
// window the tests use: then the counters of both services were split
// between two windows, and it runs once more on the second domain.
func inOneWindow(t *testing.T, domains [2]string, run func(domain string) []string) {
	t.Helper()
	for _, domain := range domains {
		// Leave a window about to end.
		if left := time.Hour - time.Since(time.Now().Truncate(time.Hour)); left < 3*time.Second {
			time.Sleep(left + 100*time.Millisecond)
		}
		start := time.Now()
		problems := run(domain)
		if start.Unix()/3600 == time.Now().Unix()/3600 {
			for _, p := range problems {
				t.Error(p)
			}
			return
		}
		t.Logf("the run on domain %s crossed the top of the hour; running it again on a fresh domain", domain)
	}
	t.Fatal("two runs in a row crossed the top of an hour")
}

// twoDomains returns two fresh domains of the same rules, for
// inOneWindow, and adds them to domains.
func twoDomains(t *testing.T, domains map[string][]*rule, tag string, rules func() []*rule) [2]string {
	var names [2]string
	for i := range names {
		names[i] = domainName(tag)
		domains[names[i]] = rules()
	}
	return names
}

// tally counts what a random comparison saw, so that it cannot pass
// without denying, allowing, and both agreeing and differing.
type tally struct {
	requests, agreed                 int
	envoyOver, envoyOK, rkOver, rkOK int
	counterless                      int // differences in names and durations
}

// TestRandomSequences sends the same seeded random requests to both
// services, a quarter of them as POST /json, and checks every answer
// against that service's model, and the two answers against each other
// wherever the models agree.
func TestRandomSequences(t *testing.T) {
	t.Parallel()
	randomSequences(t, func(t *testing.T, domains map[string][]*rule) *pair { return startPair(t, domains) })
}

// TestRandomSequencesInEnvoysEnvironment sends the same random requests
// to both services in envoy's environment (ratekeeper-server started with
// no flags), and checks both against envoy's model: there, ratekeeper-server
// counts as envoy does, and answers alike, but for a look at a limit of 0.
func TestRandomSequencesInEnvoysEnvironment(t *testing.T) {
	t.Parallel()
	randomSequencesOf(t, func(t *testing.T, domains map[string][]*rule) *pair { return startEnvPair(t, domains) },
		func(domains map[string][]*rule) model {
			m := newEnvoyModel(domains)
			m.zeroLooksOK = true
			return m
		})
}

// model is a service's model: the answer it owes each request in turn.
type model interface {
	apply(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse
}

// randomSequences runs the random comparison on the pair start returns.
func randomSequences(t *testing.T, start func(*testing.T, map[string][]*rule) *pair) {
	randomSequencesOf(t, start, func(domains map[string][]*rule) model { return newRatekeeperModel(domains) })
}

// randomSequencesOf is randomSequences, ratekeeper-server checked against
// the model rkModel makes.
func randomSequencesOf(t *testing.T, start func(*testing.T, map[string][]*rule) *pair, rkModel func(map[string][]*rule) model) {
	const sequences, requests = 4, 80
	domains := map[string][]*rule{}
	names := make([][2]string, sequences)
	for i := range names {
		names[i] = twoDomains(t, domains, fmt.Sprintf("seq%d", i), diffRules)
	}
	p := start(t, domains)
	envoyM, rkM := newEnvoyModel(domains), rkModel(domains)
	_, envoys := rkM.(*envoyModel) // both count as envoy: the models agree on all
	var n tally
	for i := range sequences {
		seed := uint64(1000 + i)
		inOneWindow(t, names[i], func(domain string) []string {
			rng := rand.New(rand.NewPCG(seed, 0))
			var all []string
			for j := range requests {
				req := randomRequest(rng, domain)
				problems, stop := compareOne(p, envoyM, rkM, req, rng.IntN(4) == 0, &n)
				if len(problems) > 0 {
					all = append(all, append(problems, fmt.Sprintf("(sequence %d, seed %d, request %d of it)", i, seed, j+1))...)
				}
				if stop {
					break
				}
			}
			return all
		})
		if t.Failed() {
			break
		}
	}
	t.Logf("%d requests: models agreed on %d; envoy denied %d, allowed %d with a limit; ratekeeper denied %d, allowed %d with a limit",
		n.requests, n.agreed, n.envoyOver, n.envoyOK, n.rkOver, n.rkOK)
	if n.counterless > maxCounterless {
		t.Errorf("%d differences in names or durations in all, the first %d above", n.counterless, maxCounterless)
	}
	if !t.Failed() {
		if n.envoyOver == 0 || n.envoyOK == 0 {
			t.Errorf("envoy denied %d and allowed %d: the sequences must do both", n.envoyOver, n.envoyOK)
		}
		if p.rk != nil && (n.rkOver == 0 || n.rkOK == 0) {
			t.Errorf("ratekeeper denied %d and allowed %d: the sequences must do both", n.rkOver, n.rkOK)
		}
		if !envoys && (n.agreed < n.requests/4 || n.agreed == n.requests) {
			t.Errorf("the models agreed on %d of %d requests: want a good part, but not all", n.agreed, n.requests)
		}
	}
	p.finish(t)
}

// compareOne sends req to both services and returns the problems found.
// Once a service's counters leave its model's, the model no longer knows
// them: stop says the sequence ends there. A difference in a field that
// says nothing of the counters (see counterless) lets it go on, so that
// one run shows more than the first difference.
func compareOne(p *pair, envoyM, rkM model, req *rlsv3.RateLimitRequest, overHTTP bool, n *tally) (problems []string, stop bool) {
	n.requests++
	wantEnvoy, wantRK := envoyM.apply(req), rkM.apply(req)
	agree := proto.Equal(wantEnvoy, wantRK)
	if agree {
		n.agreed++
	}
	via := "gRPC"
	if overHTTP {
		via = "POST /json"
	}
	report := func(problem, diff string) {
		if !counterless(diff) {
			stop = true
		} else if n.counterless++; n.counterless > maxCounterless {
			return
		}
		problems = append(problems, problem)
	}
	check := func(s *service, want *rlsv3.RateLimitResponse) call {
		c := s.ask(req, overHTTP)
		switch {
		case c.err != nil:
			problems, stop = append(problems, fmt.Sprintf("%s over %s: request %s: %v", s.name, via, requestString(req), c.err)), true
		case c.transportIssue != "":
			problems, stop = append(problems, fmt.Sprintf("%s over %s: request %s: %s", s.name, via, requestString(req), c.transportIssue)), true
		default:
			if d := compare(c.resp, want, c, 1); d != "" {
				report(fmt.Sprintf("%s over %s: request %s:\n\tanswer %s\n\tmodel  %s\n\t%s",
					s.name, via, requestString(req), responseString(c.resp), responseString(want), d), d)
			}
		}
		return c
	}
	ce := check(p.envoy, wantEnvoy)
	count(ce.resp, &n.envoyOver, &n.envoyOK)
	if p.rk == nil {
		return problems, stop
	}
	cr := check(p.rk, wantRK)
	count(cr.resp, &n.rkOver, &n.rkOK)
	if agree && ce.err == nil && cr.err == nil {
		if d := compareReplies(ce, cr); d != "" {
			report(fmt.Sprintf("over %s, where the models agree: request %s:\n\tenvoy      %s\n\tratekeeper %s\n\t%s",
				via, requestString(req), responseString(ce.resp), responseString(cr.resp), d), d)
		}
	}
	return problems, stop
}

// maxCounterless bounds the differences in names and durations reported
// by one run: past it they are only counted.
const maxCounterless = 6

// count counts a denial, or an answer OK with a limit applied.
func count(r *rlsv3.RateLimitResponse, over, ok *int) {
	if r.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		*over++
		return
	}
	for _, s := range r.GetStatuses() {
		if s.GetCurrentLimit() != nil {
			*ok++
			return
		}
	}
}
