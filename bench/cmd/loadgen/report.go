package main

import (
	"fmt"
	"io"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
)

var modeTitles = map[string]string{
	"allow": "allow mode: callers drawn uniformly at random, nearly every request allowed",
	"hot":   "hot mode: every goroutine on one caller, nearly every request denied",
}

func printTable(out io.Writer, cfg config, res results, mode string) {
	fmt.Fprintf(out, "## %s\n\n", modeTitles[mode])
	if mode == "allow" {
		fmt.Fprintf(out, "%d callers.\n\n", cfg.users)
	}
	hot := mode == "hot"
	fmt.Fprint(out, "| conc | library | decisions/s | × redis_rate | p50 µs | p99 µs | server µs/decision | server µs/call | Redis CPU µs/decision | client CPU µs/decision | commands/decision | allowed |")
	if hot {
		fmt.Fprint(out, " in Redis/denied |")
	}
	fmt.Fprint(out, " errors |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if hot {
		fmt.Fprint(out, "---:|")
	}
	fmt.Fprintln(out, "---:|")
	for _, conc := range cfg.conc {
		for _, l := range cfg.libs {
			m, ok := res.med[cell{mode, conc, l.name}]
			if !ok {
				continue
			}
			vs := "-"
			if r, ok := res.ratio(mode, conc, l.name, "redis_rate"); ok {
				vs = fmt.Sprintf("%.2f", r)
			}
			fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f%% |",
				conc, l.name, measure.Thousands(m.rate), vs, measure.Micros(m.p50), measure.Micros(m.p99),
				perDecision(m.srvUsec, m.decisions), perDecision(m.srvUsec, m.calls), perDecision(m.cpuUsec, m.decisions), perDecision(m.clientUsec, m.decisions),
				perDecision(float64(m.calls), m.decisions), 100*perDecision(float64(m.allowed), m.decisions))
			if hot {
				fmt.Fprintf(out, " %s |", inRedisPerDenied(m))
			}
			fmt.Fprintf(out, " %d |\n", m.errors)
		}
	}
	fmt.Fprintln(out)
}

// inRedisPerDenied is the share of denials that Redis decided: every
// allowed decision ran in Redis, the rest of those Redis ran were
// denials. Below 1, the library answered denials itself.
func inRedisPerDenied(m sample) string {
	if m.inRedis < 0 || m.denied == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", float64(max(m.inRedis-m.allowed, 0))/float64(m.denied))
}

func printMemory(out io.Writer, m memory) {
	fmt.Fprint(out, "## memory of one caller's key after one request (MEMORY USAGE, mean of ", len(memCallers), " callers)\n\n")
	fmt.Fprintln(out, "| limiter | Redis key | bytes | × seed |\n|---|---|---:|---:|")
	for _, r := range m.rows {
		fmt.Fprintf(out, "| %s | `%s` | %.0f | %.2f |\n", r.what, r.example, r.bytes, r.bytes/m.seed)
	}
	fmt.Fprintln(out)
}

// printTargets compares ratekeeper's default store with the goals it is
// held to, each a ratio within the same rounds.
func printTargets(out io.Writer, cfg config, res results, mem memory) {
	fmt.Fprintln(out, "## targets (ratekeeper = redisstore.New(client); ratios are medians of per-round ratios)")
	fmt.Fprintln(out, "\n| target | measured | met |\n|---|---|---|")
	verdict := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, t := range []struct {
		conc int
		min  float64
	}{{128, 2.5}, {1, 1.0}} {
		r, ok := res.ratio("allow", t.conc, "ratekeeper", "redis_rate")
		if !ok {
			continue
		}
		rk, rr := res.med[cell{"allow", t.conc, "ratekeeper"}], res.med[cell{"allow", t.conc, "redis_rate"}]
		if t.conc == 128 {
			fmt.Fprintf(out, "| decisions/s ≥ %.1f× redis_rate at conc=%d (allow), p99 no worse | %.2f×; p99 %s µs vs %s µs | %s |\n",
				t.min, t.conc, r, measure.Micros(rk.p99), measure.Micros(rr.p99), verdict(r >= t.min && rk.p99 <= rr.p99))
		} else {
			fmt.Fprintf(out, "| decisions/s ≥ %.1f× redis_rate at conc=%d (allow) | %.2f× | %s |\n", t.min, t.conc, r, verdict(r >= t.min))
		}
	}
	if r, ok := res.ratio("allow", 1, "ratekeeper-defaultclient", "redis_rate"); ok {
		fmt.Fprintf(out, "| the same, over go-redis's default options (ratekeeper-defaultclient) | %.2f× | %s |\n", r, verdict(r >= 1.0))
	}
	for _, mode := range cfg.modes {
		for _, conc := range cfg.conc {
			r, ok := res.costRatio(mode, conc, "ratekeeper", "seed")
			if !ok {
				continue
			}
			rk, sd := res.med[cell{mode, conc, "ratekeeper"}], res.med[cell{mode, conc, "seed"}]
			fmt.Fprintf(out, "| server µs/decision ≤ 0.75× the seed's at conc=%d (%s) | %.2f× (%.1f vs %.1f µs) | %s |\n",
				conc, mode, r, perDecision(rk.srvUsec, rk.decisions), perDecision(sd.srvUsec, sd.decisions), verdict(r <= 0.75))
		}
	}
	fmt.Fprintf(out, "| memory per idle key ≤ 0.6× the seed's hash | %.2f× (%.0f vs %.0f B) | %s |\n\n",
		mem.tb/mem.seed, mem.tb, mem.seed, verdict(mem.tb <= 0.6*mem.seed))
}
