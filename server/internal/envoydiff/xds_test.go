package envoydiff

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
	"github.com/ratekeeper/ratekeeper/server/internal/xdstest"
)

// The nodes the two services speak as; the server sets the same
// snapshot for both.
const envoyNode, rkNode = "envoy-ratelimit", "ratekeeper-server"

// Both services retry a lost stream with the same backoff: 200 ms each
// time (envoy's factor 0.5 never grows it).
var (
	envoyBackoff = []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=200ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=1s", "XDS_CLIENT_BACKOFF_JITTER=false"}
	rkBackoff    = []string{"-xds-backoff-initial", "200ms", "-xds-backoff-max", "1s", "-xds-backoff-jitter=false"}
)

// xdsPair is the pair of services configured by one xDS management
// server, over mTLS.
type xdsPair struct {
	*pair
	srv *xdstest.Server
}

// startPairXDS starts the management server with domains as its first
// snapshot, then both services configured by it.
func startPairXDS(t *testing.T, domains map[string][]*rule) *xdsPair {
	t.Helper()
	return startPairXDSWith(t, domains, func(addr string, x envoytest.XDS) envoytest.Addrs {
		return envoytest.StartRatekeeperXDS(t, "redis://"+addr+"/0", x, rkBackoff...)
	})
}

// startPairXDSWith is startPairXDS, ratekeeper-server started by start
// on the Redis at addr.
func startPairXDSWith(t *testing.T, domains map[string][]*rule, start func(addr string, x envoytest.XDS) envoytest.Addrs) *xdsPair {
	t.Helper()
	addr := envoytest.RedisAddr(t)
	pki := xdstest.NewPKI(t)
	xp := &xdsPair{pair: &pair{}, srv: xdstest.Start(t, pki.ServerTLS(t))}
	xp.set("1", domains)
	x := envoytest.XDS{Addr: xp.srv.Addr, ClientCert: pki.ClientCert, ClientKey: pki.ClientKey, CA: pki.CA, SAN: xdstest.ServerName}
	x.NodeID = envoyNode
	xp.envoy = dial(t, "envoy", envoytest.StartEnvoyXDS(t, addr, x, envoyBackoff...))
	if envoytest.HasRatekeeper(t) {
		x.NodeID = rkNode
		xp.rk = dial(t, "ratekeeper", start(addr, x))
	}
	return xp
}

// set pushes domains to both services as snapshot version.
func (xp *xdsPair) set(version string, domains map[string][]*rule) {
	xp.setConfs(version, xdsResources(domains))
}

// setConfs pushes confs to both services as snapshot version.
func (xp *xdsPair) setConfs(version string, confs []*rlsconfv3.RateLimitConfig) {
	xp.srv.Set(envoyNode, version, confs...)
	xp.srv.Set(rkNode, version, confs...)
}

// xdsResources is one RateLimitConfig per domain, named after it.
func xdsResources(domains map[string][]*rule) []*rlsconfv3.RateLimitConfig {
	var out []*rlsconfv3.RateLimitConfig
	for _, name := range slices.Sorted(maps.Keys(domains)) {
		out = append(out, &rlsconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: xdsDescriptors(domains[name])})
	}
	return out
}

// xdsDescriptors are rules as a RateLimitConfig holds them, as
// writeRules writes them in YAML.
func xdsDescriptors(rules []*rule) []*rlsconfv3.RateLimitDescriptor {
	var out []*rlsconfv3.RateLimitDescriptor
	for _, r := range rules {
		d := &rlsconfv3.RateLimitDescriptor{Key: r.key, Value: r.value, ShadowMode: r.shadow, Descriptors: xdsDescriptors(r.children)}
		switch {
		case r.unlimited:
			d.RateLimit = &rlsconfv3.RateLimitPolicy{Unlimited: true}
		case r.hasLimit():
			d.RateLimit = &rlsconfv3.RateLimitPolicy{
				Unit:            rlsconfv3.RateLimitUnit(rlsconfv3.RateLimitUnit_value[r.unit.String()]),
				RequestsPerUnit: r.rpu,
				Name:            r.name,
			}
			for _, name := range r.replaces {
				d.RateLimit.Replaces = append(d.RateLimit.Replaces, &rlsconfv3.RateLimitReplace{Name: name})
			}
		}
		out = append(out, d)
	}
	return out
}

// TestXDSRandomSequences is TestRandomSequences with both services
// configured over xDS instead of by files.
func TestXDSRandomSequences(t *testing.T) {
	t.Parallel()
	randomSequences(t, func(t *testing.T, domains map[string][]*rule) *pair { return startPairXDS(t, domains).pair })
}

// knows reports whether s has domain configured: its unlimited vip
// descriptor answers the largest remaining, an unknown domain 0.
func knows(s *service, domain string) bool {
	c := s.ask(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{desc("vip", "probe")}}, false)
	return c.err == nil && len(c.resp.GetStatuses()) == 1 && c.resp.GetStatuses()[0].GetLimitRemaining() == math.MaxUint32
}

// waitKnows waits until each service knows domain, and returns how long
// each took.
func waitKnows(t *testing.T, p *pair, domain string) map[string]time.Duration {
	t.Helper()
	start := time.Now()
	took := map[string]time.Duration{}
	for len(took) < len(p.services()) {
		for _, s := range p.services() {
			if _, done := took[s.name]; !done && knows(s, domain) {
				took[s.name] = time.Since(start)
			}
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("domain %s not applied within 60 s: only by %v", domain, took)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return took
}

// compareRandom sends n seeded random requests on domain to both
// services and reports every difference from the models and between the
// services. The seeds are TestRandomSequences', so that a sequence that
// passes with files must pass over xDS.
func compareRandom(t *testing.T, p *pair, domains map[string][]*rule, domain string, seed uint64, n int) {
	t.Helper()
	envoyM, rkM := newEnvoyModel(domains), newRatekeeperModel(domains)
	rng := rand.New(rand.NewPCG(seed, 0))
	var tl tally
	for j := range n {
		problems, stop := compareOne(p, envoyM, rkM, randomRequest(rng, domain), rng.IntN(4) == 0, &tl)
		for _, pr := range problems {
			t.Errorf("domain %s, request %d: %s", domain, j+1, pr)
		}
		if stop {
			return
		}
	}
}

// TestXDSUpdatesNACKAndRestart pushes snapshots to both services in
// turn: an update, an invalid one (both NACK it and keep the previous),
// and one set while the server is away, taken once it is back. Both
// answer alike after each, and the time each takes to apply a push and
// to recover is logged.
func TestXDSUpdatesNACKAndRestart(t *testing.T) {
	t.Parallel()
	// A window about to end would split the counters: leave it.
	if left := time.Hour - time.Since(time.Now().Truncate(time.Hour)); left < 30*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	v1 := map[string][]*rule{domainName("xds1"): diffRules()}
	xp := startPairXDS(t, v1)
	for d := range v1 {
		compareRandom(t, xp.pair, v1, d, 1000, 80)
	}

	// An update: a new domain, with one more rule, in place of the first.
	d2 := domainName("xds2")
	v2 := map[string][]*rule{d2: append(diffRules(), &rule{key: "updated", unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, rpu: 42})}
	xp.set("2", v2)
	took := waitKnows(t, xp.pair, d2)
	t.Logf("time to apply a push (SetSnapshot to the new domain answering): %v", took)
	for _, s := range xp.services() {
		for d := range v1 {
			if knows(s, d) {
				t.Errorf("%s: domain %s still answered after a snapshot without it", s.name, d)
			}
		}
		c := s.ask(&rlsv3.RateLimitRequest{Domain: d2, Descriptors: []*rlcommon.RateLimitDescriptor{desc("updated", "x")}}, false)
		if l := c.resp.GetStatuses(); c.err != nil || len(l) != 1 || l[0].GetCurrentLimit().GetRequestsPerUnit() != 42 {
			t.Errorf("%s: the new rule answers %s, %v", s.name, responseString(c.resp), c.err)
		}
	}
	compareRandom(t, xp.pair, v2, d2, 1001, 80)

	// An invalid push: both NACK it and keep serving the previous one.
	d3 := domainName("xds3")
	bad := xdsResources(map[string][]*rule{d2: v2[d2], d3: {{key: "vip", unlimited: true}}})
	for _, c := range bad {
		if c.Domain == d3 { // a limit without a unit
			c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}})
		}
	}
	xp.setConfs("3", bad)
	for _, s := range xp.services() {
		node := envoyNode
		if s == xp.rk {
			node = rkNode
		}
		nack := xp.srv.WaitRequest(30*time.Second, func(r *discoveryv3.DiscoveryRequest) bool {
			return xdstest.IsNACK(r) && r.GetNode().GetId() == node
		})
		if nack == nil {
			t.Fatalf("%s did not NACK the invalid push", s.name)
		}
		t.Logf("%s NACKed version 3, at version %q: %s", s.name, nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
		if !knows(s, d2) || knows(s, d3) {
			t.Errorf("%s: after the invalid push, knows %s %v (want true), %s %v (want false)", s.name, d2, knows(s, d2), d3, knows(s, d3))
		}
	}

	// The server goes away; the last configuration keeps serving; a new
	// snapshot waits for it to be back.
	d4 := domainName("xds4")
	v4 := map[string][]*rule{d4: diffRules()}
	xp.set("4", v2) // ends the NACKs: the cache would send the invalid one again
	xp.srv.Stop()
	time.Sleep(time.Second)
	for _, s := range xp.services() {
		if !knows(s, d2) {
			t.Errorf("%s: domain %s not answered while the server is away", s.name, d2)
		}
	}
	xp.set("5", v4)
	xp.srv.Restart()
	took = waitKnows(t, xp.pair, d4)
	t.Logf("time to recover (server listening again to its new snapshot answering; both retry every 200 ms): %v", took)
	compareRandom(t, xp.pair, v4, d4, 1002, 80)
	xp.finish(t)
}
