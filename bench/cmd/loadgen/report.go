package main

import (
	"fmt"
	"io"
	"strings"

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
	fmt.Fprint(out, "| conc | deadline | library | decisions/s | × redis_rate | p50 µs | p99 µs | server µs/decision | server µs/call | Redis CPU µs/decision | client CPU µs/decision | commands/decision | allowed |")
	if hot {
		fmt.Fprint(out, " in Redis/denied |")
	}
	fmt.Fprint(out, " errors |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if hot {
		fmt.Fprint(out, "---:|")
	}
	fmt.Fprintln(out, "---:|")
	for _, conc := range cfg.conc {
		for _, dl := range cfg.deadlines {
			for _, l := range cfg.libs {
				m, ok := res.med[cell{mode, conc, dl, l.name}]
				if !ok {
					continue
				}
				vs := "-"
				if r, ok := res.ratio(mode, conc, dl, l.name, peerOf(l.name)); ok {
					vs = fmt.Sprintf("%.2f", r)
				}
				fmt.Fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f%% |",
					conc, deadlineName(dl), l.name, measure.Thousands(m.rate), vs, measure.Micros(m.p50), measure.Micros(m.p99),
					perDecision(m.srvUsec, m.decisions), perDecision(m.srvUsec, m.calls), perDecision(m.cpuUsec, m.decisions), perDecision(m.clientUsec, m.decisions),
					perDecision(float64(m.calls), m.decisions), 100*perDecision(float64(m.allowed), m.decisions))
				if hot {
					fmt.Fprintf(out, " %s |", inRedisPerDenied(m))
				}
				fmt.Fprintf(out, " %d |\n", m.errors)
			}
		}
	}
	fmt.Fprintln(out, "\n(× redis_rate: the -cte variants against redis_rate-cte, over the same kind of client.)")
	fmt.Fprintln(out)
}

// peerOf is the redis_rate a library is compared with: redis_rate-cte
// for a library over a client with ContextTimeoutEnabled, else redis_rate.
func peerOf(name string) string {
	if strings.HasSuffix(name, "-cte") {
		return "redis_rate-cte"
	}
	return "redis_rate"
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

// printTargets compares ratekeeper's default store, its token bucket and
// its GCRA, with the goals it is held to, each a ratio within the same
// rounds, for the run's one policy.
func printTargets(out io.Writer, cfg config, res results, mem memory) {
	fmt.Fprintf(out, "## targets, %s (allow mode; ratios are medians of per-round ratios)\n", cfg.policy)
	fmt.Fprintln(out, "\n| target | policy | algorithm | deadline | measured | met |\n|---|---|---|---|---|---|")
	verdict := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	const mode = "allow"
	for _, alg := range []struct{ name, lib string }{{"token bucket", "ratekeeper"}, {"GCRA", "ratekeeper-gcra"}} {
		row := func(target, dl, measured string, ok bool) {
			fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", target, cfg.policy, alg.name, dl, measured, verdict(ok))
		}
		for _, dl := range cfg.deadlines {
			if r, ok := res.ratio(mode, 128, dl, alg.lib, "redis_rate"); ok {
				rk, rr := res.med[cell{mode, 128, dl, alg.lib}], res.med[cell{mode, 128, dl, "redis_rate"}]
				row("decisions/s ≥ 2.5× redis_rate at conc=128, p99 no worse", deadlineName(dl),
					fmt.Sprintf("%.2f×; p99 %s vs %s µs", r, measure.Micros(rk.p99), measure.Micros(rr.p99)), r >= 2.5 && rk.p99 <= rr.p99)
			}
		}
		for _, dl := range cfg.deadlines {
			want := 1.0
			if dl > 0 {
				want = 0.9
			}
			if r, ok := res.ratio(mode, 1, dl, alg.lib, "redis_rate"); ok {
				row(fmt.Sprintf("decisions/s ≥ %.1f× redis_rate at conc=1", want), deadlineName(dl), fmt.Sprintf("%.2f×", r), r >= want)
			}
			if dl == 0 {
				continue
			}
			if r, ok := res.ratio(mode, 1, dl, alg.lib+"-cte", "redis_rate-cte"); ok {
				row("decisions/s ≥ 1.0× redis_rate at conc=1, both with ContextTimeoutEnabled", deadlineName(dl), fmt.Sprintf("%.2f×", r), r >= 1.0)
			}
		}
		for _, conc := range []int{128, 1} {
			want := 0.75
			if conc == 1 {
				want = 1.1
			}
			for _, dl := range cfg.deadlines {
				r, ok := res.costRatio(mode, conc, dl, alg.lib, "seed")
				if !ok {
					continue
				}
				rk, sd := res.med[cell{mode, conc, dl, alg.lib}], res.med[cell{mode, conc, dl, "seed"}]
				row(fmt.Sprintf("server µs/decision ≤ %.2f× the seed's at conc=%d", want, conc), deadlineName(dl),
					fmt.Sprintf("%.2f× (%.1f vs %.1f µs)", r, perDecision(rk.srvUsec, rk.decisions), perDecision(sd.srvUsec, sd.decisions)), r <= want)
			}
		}
	}
	fmt.Fprintf(out, "\nMemory per idle key: token bucket %.0f B, %.2f× the seed's hash (%.0f B).\n\n", mem.tb, mem.tb/mem.seed, mem.seed)
}
