package quota

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// envoy is one holder as Envoy's rate limit quota filter behaves (its
// global client): a token bucket that starts full when an assignment
// differs from the one it holds, is carried over unchanged when it is the
// same, and ends TTL after receipt; without one, it denies.
type envoy struct {
	demand   float64 // requests per second
	carry    float64
	has      bool
	hold     Hold
	tokens   int64 // × Unit
	last     int64
	ends     int64
	inbox    []message
	seen     int64 // requests since the last step
	lastStep int64
	phase    int64
	join     int64
	leave    int64
}

type message struct {
	at    int64
	grant Grant
}

func (e *envoy) receive(r Rule, g Grant, now, ttl int64) {
	switch g.Kind {
	case Deny:
		e.has = false
		return
	case Refresh, New:
		if !e.has || e.hold != g.Hold {
			e.hold, e.tokens, e.last = g.Hold, g.Hold.Tokens*r.Unit, now
		}
		e.has, e.ends = true, now+ttl
	}
}

func (e *envoy) admit(r Rule, now int64) bool {
	if e.has && now >= e.ends {
		e.has = false
	}
	if !e.has {
		return false
	}
	e.tokens = min(e.tokens+e.hold.Rate*(now-e.last), e.hold.Tokens*r.Unit)
	e.last = now
	if e.tokens < r.Unit {
		return false
	}
	e.tokens -= r.Unit
	return true
}

// run simulates envoys for ms milliseconds and checks that the fleet never
// admits more than the rule's bound in any window: a replay of every
// admission through the rule's own token bucket never goes below zero.
// It returns the share of the rate admitted.
func run(t *testing.T, seed uint64, r Rule, envoys []*envoy, ms, ttl, slack, every int64, lose float64, triple int64, step func(i int, req Request, now int64) Grant) (share float64, ok bool) {
	rng := rand.New(rand.NewPCG(seed, 1))
	level := r.Burst * r.Unit
	var admitted int64
	for now := int64(0); now < ms; now++ {
		level = min(level+r.Rate, r.Burst*r.Unit)
		for i, e := range envoys {
			if now < e.join || now >= e.leave {
				continue
			}
			if now == triple && i == 0 {
				e.demand *= 3
			}
			for len(e.inbox) > 0 && e.inbox[0].at <= now {
				e.receive(r, e.inbox[0].grant, now, ttl)
				e.inbox = e.inbox[1:]
			}
			if (now-e.phase)%every == 0 {
				demand := int64(-1)
				if now > e.join {
					demand = e.seen * r.Unit / max(now-e.lastStep, 1)
				}
				g := step(i, Request{Holder: fmt.Sprint(i), Demand: demand, TTL: ttl, Slack: slack}, now)
				e.seen, e.lastStep = 0, now
				if rng.Float64() >= lose {
					e.inbox = append(e.inbox, message{at: now + rng.Int64N(slack), grant: g})
				}
			}
			e.carry += e.demand / 1000 * (0.5 + rng.Float64())
			for ; e.carry >= 1; e.carry-- {
				e.seen++
				if e.admit(r, now) {
					admitted++
					level -= r.Unit
					if level < 0 {
						t.Logf("seed %d: at %d ms the fleet admitted past the rule's bound (B %d + R·d)", seed, now, r.Burst)
						return 0, false
					}
				}
			}
		}
	}
	return float64(admitted) / float64(r.Rate*ms/r.Unit), true
}

func fleet(rate float64, weights []float64) []*envoy {
	var sum float64
	for _, w := range weights {
		sum += w
	}
	es := make([]*envoy, len(weights))
	for i, w := range weights {
		es[i] = &envoy{demand: 2 * rate * w / sum, phase: int64(37 * i % 250), leave: 1 << 62}
	}
	return es
}

func TestNeverPastTheBound(t *testing.T) {
	r := Rule{Rate: 10000, Unit: 1000, Burst: 10000}
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for _, lose := range []float64{0, 0.05} {
		for seed := range uint64(seeds) {
			es := fleet(10000, []float64{1, 1, 1, 1, 2, 2, 4, 8})
			es[3].join, es[5].leave = 3000, 6000 // one joins, one leaves
			var s State
			var rates []Grant // Envoy 0's, from its demand's tripling on
			var times []int64
			step := func(i int, req Request, now int64) Grant {
				g := s.Step(r, req, now)
				if i == 0 && now >= 4000 {
					rates, times = append(rates, g), append(times, now)
				}
				return g
			}
			share, ok := run(t, seed, r, es, 12000, 1000, 250, 250, lose, 4000, step)
			if !ok {
				t.Fatalf("seed %d, %.0f%% of assignments lost: past the bound", seed, 100*lose)
			}
			followed := int64(-1) // until Envoy 0 holds 90% of its final share
			final := rates[len(rates)-1].Hold.Rate
			for j := len(rates) - 1; j >= 0 && 10*rates[j].Hold.Rate >= 9*final; j-- {
				followed = times[j] - 4000
			}
			t.Logf("seed %d, %.0f%% of assignments lost: the fleet admitted %.1f%% of the rate; Envoy 0's share followed its tripled demand in %d ms",
				seed, 100*lose, 100*share, followed)
			if share < 0.85 {
				t.Errorf("seed %d: admitted %.1f%% of the rate at twice its demand", seed, 100*share)
			}
		}
	}
}

// TestOracleCanFail checks that the oracle fails a fleet past the bound:
// each Envoy assigned the whole rule, as a server without a global bound
// assigns a static strategy to every Envoy.
func TestOracleCanFail(t *testing.T) {
	r := Rule{Rate: 10000, Unit: 1000, Burst: 10000}
	es := fleet(10000, []float64{1, 1, 1, 1})
	whole := func(int, Request, int64) Grant { return Grant{Kind: New, Hold: Hold{Tokens: r.Burst, Rate: r.Rate}} }
	if _, ok := run(t, 0, r, es, 5000, 1000, 250, 250, 0, -1, whole); ok {
		t.Fatal("four Envoys each assigned the whole rule stayed within its bound: the oracle cannot fail")
	}
}
