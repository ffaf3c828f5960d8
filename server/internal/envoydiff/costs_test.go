package envoydiff

import (
	"fmt"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
)

// startEnvPair starts envoy's service and ratekeeper-server on domains,
// both in envoy's environment (ratekeeper-server with no flags, as where
// it replaces envoy's image), env added to both.
func startEnvPair(t *testing.T, domains map[string][]*rule, env ...string) *pair {
	t.Helper()
	addr := envoytest.RedisAddr(t)
	files := configFiles(domains)
	p := &pair{envoy: dial(t, "envoy", envoytest.StartEnvoy(t, addr, files, env...))}
	if envoytest.HasRatekeeper(t) {
		p.rk = dial(t, "ratekeeper", envoytest.StartRatekeeperEnv(t, addr, files, env...))
	}
	return p
}

// TestResponseCostPattern: Envoy Gateway's cost.response and Envoy AI
// Gateway's token budgets check a descriptor at request time
// (hits_addend 0), then charge it the tokens used once the response is
// done. In envoy's environment both services count a charge that goes
// over the limit, so the checks after it are OVER_LIMIT until the window
// ends, over gRPC and /json alike; with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT too, since the charge's
// descriptor is the one over its limit.
func TestResponseCostPattern(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{nil, {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}} {
		t.Run(strings.Join(append([]string{"envoy's environment"}, env...), " "), func(t *testing.T) {
			domains := map[string][]*rule{}
			names := twoDomains(t, domains, "costs", costRules)
			p := startEnvPair(t, domains, env...)
			checkResponseCosts(t, p, names)
			p.finish(t)
		})
	}
}

// TestResponseCostPatternOverXDS: the same, with both services
// configured over xDS, as Envoy Gateway runs them: no flags, envoy's
// variables, envoy's fields only.
func TestResponseCostPatternOverXDS(t *testing.T) {
	t.Parallel()
	domains := map[string][]*rule{}
	names := twoDomains(t, domains, "costs", costRules)
	xp := startPairXDSWith(t, domains, func(addr string, x envoytest.XDS) envoytest.Addrs {
		return envoytest.StartRatekeeperXDSEnv(t, addr, x, envoyBackoff...)
	})
	checkResponseCosts(t, xp.pair, names)
	xp.finish(t)
}

// costRules is a token budget of 1000 an hour.
func costRules() []*rule { return []*rule{{key: "tokens", unit: hour, rpu: 1000}} }

// checkResponseCosts sends rounds of a check and a charge of 900, then
// checks and a smaller charge, to both services, over gRPC then /json,
// and requires envoy's answers of both: the second charge counts.
func checkResponseCosts(t *testing.T, p *pair, names [2]string) {
	t.Helper()
	hits := []uint64{0, 900, 0, 900, 0, 0, 50}
	want := []*rlsv3.RateLimitResponse{
		answer(okStatus(1000, hour, 1000)), answer(okStatus(1000, hour, 100)),
		answer(okStatus(1000, hour, 100)), answer(overStatus(1000, hour)),
		answer(overStatus(1000, hour)), answer(overStatus(1000, hour)),
		answer(overStatus(1000, hour)),
	}
	inOneWindow(t, names, func(domain string) []string {
		var problems []string
		for _, overHTTP := range []bool{false, true} {
			user := fmt.Sprint("user-http-", overHTTP)
			for i, h := range hits {
				req := &rlsv3.RateLimitRequest{Domain: domain,
					Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("tokens", user), h)}}
				for _, s := range p.services() {
					c := s.ask(req, overHTTP)
					if c.err != nil {
						problems = append(problems, fmt.Sprintf("step %d, %s: %v", i+1, s.name, c.err))
						continue
					}
					if d := compare(c.resp, want[i], c, 1); d != "" || c.transportIssue != "" {
						problems = append(problems, fmt.Sprintf("step %d (hits %d, /json %t), %s:\n\tanswer %s\n\twant   %s\n\t%s %s",
							i+1, h, overHTTP, s.name, responseString(c.resp), responseString(want[i]), d, c.transportIssue))
					}
				}
			}
		}
		return problems
	})
}
