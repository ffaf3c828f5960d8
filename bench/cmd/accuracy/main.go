// Command accuracy replays one synthetic trace through the Go model of every
// ratekeeper algorithm (driver.ValidSpec.Step, which the conformance
// suite holds identical to the Lua scripts, so no Redis is needed) and
// compares each decision with the exact sliding-window ideal: a request is
// ideally admitted if and only if fewer than Limit requests admitted by
// the ideal lie in the preceding Window, (t−Window, t].
//
// Every policy grants 100 requests per minute. The trace has -keys keys of
// each of the client classes listed in classes: key k (from 0) is of class
// k mod len(classes) and draws its times from a PCG seeded with (-seed, k).
// Each key runs for -duration from 2023-11-14 22:13:20 UTC (Unix time
// 1,700,000,000 s, 20 s into a minute, so clock-aligned windows do not
// start with the trace); times are rounded to whole microseconds. A Poisson
// class sends requests with exponential gaps at a fixed mean rate; an
// on/off class alternates off and on periods of exponentially distributed
// lengths and sends as a Poisson process at its rate while on. The
// defaults give about 180,000 requests.
//
// Each algorithm's admissions diverge from the ideal's, so later decisions
// compare different histories. As a second measure that needs no ideal,
// the worst excess is the largest number of requests an algorithm admitted
// in any rolling window, minus Limit (0 when it never passes Limit). The
// output, in markdown: the trace's classes; each algorithm against the
// ideal; wrong decisions by class; and how often each pair of algorithms
// decided a request differently.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// The limit every policy grants: limit requests per window.
const (
	limit  = 100
	window = time.Minute
)

// start is the trace's first instant, in microseconds since the Unix epoch.
const start = 1_700_000_000_000_000

// perSecond is the limit's mean rate.
const perSecond = limit / 60.0

// class is a kind of client. A class with off > 0 alternates off and on
// periods of exponentially distributed lengths; rate is its mean rate,
// in requests per second, while on.
type class struct {
	name    string
	rate    float64
	on, off time.Duration
}

var classes = []class{
	{name: "Poisson at 0.5× the limit", rate: 0.5 * perSecond},
	{name: "Poisson at 0.9× the limit", rate: 0.9 * perSecond},
	{name: "Poisson at the limit", rate: perSecond},
	{name: "Poisson at 1.1× the limit", rate: 1.1 * perSecond},
	{name: "Poisson at 2× the limit", rate: 2 * perSecond},
	{name: "Poisson at 5× the limit", rate: 5 * perSecond},
	{name: "On/off: 10/s for 3 s, off 60 s", rate: 10, on: 3 * time.Second, off: time.Minute},
	{name: "On/off: 20/s for 5 s, off 60 s", rate: 20, on: 5 * time.Second, off: time.Minute},
	{name: "On/off: 50/s for 4 s, off 30 s", rate: 50, on: 4 * time.Second, off: 30 * time.Second},
}

// times draws the class's request times over (start, start+d], in
// microseconds.
func (c class) times(r *rand.Rand, d time.Duration) []int64 {
	end := float64(d.Microseconds())
	gap := 1e6 / c.rate
	var ts []int64
	for t := 0.0; ; {
		onEnd := math.Inf(1)
		if c.off > 0 {
			t += r.ExpFloat64() * float64(c.off.Microseconds())
			onEnd = t + r.ExpFloat64()*float64(c.on.Microseconds())
		}
		for {
			next := t + r.ExpFloat64()*gap
			if next > onEnd {
				t = onEnd // memoryless: the next on period draws afresh
				break
			}
			if t = next; t > end {
				return ts
			}
			ts = append(ts, start+int64(math.Round(t)))
		}
	}
}

// algorithm is a policy under test.
type algorithm struct {
	name   string
	policy ratekeeper.Policy
}

var algorithms = []algorithm{
	{"Token bucket (1 per 600 ms)", ratekeeper.TokenBucket{Capacity: limit, RefillRate: 1, RefillInterval: window / limit}},
	{"Token bucket (100 per minute)", ratekeeper.TokenBucket{Capacity: limit, RefillRate: limit, RefillInterval: window}},
	{"GCRA", ratekeeper.GCRA{Rate: limit, Period: window, Burst: limit}},
	{"Fixed window", ratekeeper.FixedWindow{Limit: limit, Window: window}},
	{"Sliding window log", ratekeeper.SlidingWindowLog{Limit: limit, Window: window}},
	{"Sliding window counter", ratekeeper.SlidingWindowCounter{Limit: limit, Window: window}},
	{"Leaky bucket", ratekeeper.LeakyBucket{Capacity: limit, LeakRate: limit / 60.0}},
}

// rolling counts the admissions in the rolling window (t−window, t].
type rolling struct {
	times []int64 // admissions in the window, oldest first
}

// count returns the number of admissions in the window ending at t.
func (w *rolling) count(t int64) int {
	cut := 0
	for cut < len(w.times) && w.times[cut] <= t-window.Microseconds() {
		cut++
	}
	w.times = w.times[cut:]
	return len(w.times)
}

// admit records an admission at t, no earlier than the last.
func (w *rolling) admit(t int64) { w.times = append(w.times, t) }

// tally is the comparison of one algorithm with the ideal.
type tally struct {
	requests, admitted        int
	wrongAdmits, wrongDenials int
	worstExcess               int
	classWrong                []int  // wrong decisions per client class
	decisions                 []bool // every decision, key after key
}

// replay is the outcome of a trace.
type replay struct {
	ideal         tally   // requests and admissions only
	tallies       []tally // one per algorithm
	classRequests []int
}

func main() {
	seed := flag.Uint64("seed", 1, "seed of the trace")
	keys := flag.Int("keys", 2, "keys per client class")
	duration := flag.Duration("duration", time.Hour, "length of the trace")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("accuracy: ")
	if *keys <= 0 || *duration <= 0 {
		log.Fatal("-keys and -duration must be positive")
	}

	specs := make([]*driver.ValidSpec, len(algorithms))
	for i, a := range algorithms {
		// The limiter is only for its spec: it decides nothing.
		lim, err := ratekeeper.New(memstore.New(memstore.WithSweepInterval(0)), a.policy)
		if err != nil {
			log.Fatalf("%s: %v", a.name, err)
		}
		specs[i] = lim.Spec()
	}
	r := run(specs, *seed, *keys, *duration)
	fmt.Printf("Trace: seed %d, %d keys per class, %v from Unix time %d s, %d requests; limit %d per %v.\n\n",
		*seed, *keys, *duration, start/1_000_000, r.ideal.requests, limit, window)
	r.print(*keys, *duration)
}

// run replays the trace through every spec and the ideal.
func run(specs []*driver.ValidSpec, seed uint64, keys int, d time.Duration) replay {
	r := replay{tallies: make([]tally, len(specs)), classRequests: make([]int, len(classes))}
	for i := range r.tallies {
		r.tallies[i].classWrong = make([]int, len(classes))
	}
	for k := range len(classes) * keys {
		ci := k % len(classes)
		ts := classes[ci].times(rand.New(rand.NewPCG(seed, uint64(k))), d)
		r.classRequests[ci] += len(ts)

		// The ideal: an exact sliding window over its own admissions.
		want := make([]bool, len(ts))
		var w rolling
		for j, t := range ts {
			if want[j] = w.count(t) < limit; want[j] {
				w.admit(t)
				r.ideal.admitted++
			}
		}
		r.ideal.requests += len(ts)

		for i, spec := range specs {
			tl := &r.tallies[i]
			var st driver.State
			var own rolling
			for j, t := range ts {
				got := spec.Step(&st, t, 1, driver.Take).Allowed
				tl.requests++
				tl.decisions = append(tl.decisions, got)
				if got {
					tl.admitted++
					own.admit(t)
					tl.worstExcess = max(tl.worstExcess, own.count(t)-limit)
				}
				switch {
				case got && !want[j]:
					tl.wrongAdmits++
					tl.classWrong[ci]++
				case !got && want[j]:
					tl.wrongDenials++
					tl.classWrong[ci]++
				}
			}
		}
	}
	return r
}

// print writes the replay's tables in markdown.
func (r replay) print(keys int, d time.Duration) {
	fmt.Println("| Client class | Keys | Requests | Mean rate (× limit) |")
	fmt.Println("|---|--:|--:|--:|")
	for ci, c := range classes {
		rate := float64(r.classRequests[ci]) / float64(keys) / d.Seconds() / perSecond
		fmt.Printf("| %s | %d | %d | %.2f |\n", c.name, keys, r.classRequests[ci], rate)
	}

	fmt.Println()
	fmt.Println("| Algorithm | Admitted | Wrongly admitted | Wrongly denied | Wrong decisions | Worst excess in a rolling window |")
	fmt.Println("|---|--:|--:|--:|--:|--:|")
	fmt.Printf("| Exact sliding window (the ideal) | %d | – | – | – | 0 |\n", r.ideal.admitted)
	for i, a := range algorithms {
		tl := r.tallies[i]
		fmt.Printf("| %s | %d | %d (%s) | %d (%s) | %s | %d |\n", a.name, tl.admitted,
			tl.wrongAdmits, pct(tl.wrongAdmits, tl.requests), tl.wrongDenials, pct(tl.wrongDenials, tl.requests),
			pct(tl.wrongAdmits+tl.wrongDenials, tl.requests), tl.worstExcess)
	}

	fmt.Println()
	header("Wrong decisions by class")
	for ci, c := range classes {
		fmt.Printf("| %s |", c.name)
		for i := range algorithms {
			fmt.Printf(" %s |", pct(r.tallies[i].classWrong[ci], r.classRequests[ci]))
		}
		fmt.Println()
	}

	// Algorithms disagree with one another as they do with the ideal: once
	// their admissions differ, so do the histories they decide on.
	fmt.Println()
	header("Decisions that differ")
	for i, a := range algorithms {
		fmt.Printf("| %s |", a.name)
		for j := range algorithms {
			differ := 0
			for n, d := range r.tallies[i].decisions {
				if d != r.tallies[j].decisions[n] {
					differ++
				}
			}
			switch {
			case i == j:
				fmt.Print(" – |")
			case differ == 0:
				fmt.Print(" none |")
			default:
				fmt.Printf(" %s |", pct(differ, r.ideal.requests))
			}
		}
		fmt.Println()
	}
}

// header prints the head of a table with a column per algorithm.
func header(title string) {
	fmt.Printf("| %s |", title)
	for _, a := range algorithms {
		fmt.Printf(" %s |", a.name)
	}
	fmt.Print("\n|---|")
	for range algorithms {
		fmt.Print("--:|")
	}
	fmt.Println()
}

// pct formats a/b as a percentage.
func pct(a, b int) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f%%", 100*float64(a)/float64(b))
}
