package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
)

// printTable prints one row per concurrency and target.
func printTable(out io.Writer, cfg config, res results) {
	fmt.Fprint(out, "| callers | service | decisions/s |")
	for _, b := range cfg.baselines {
		fmt.Fprintf(out, " × %s |", b)
	}
	fmt.Fprintln(out, " p50 µs | p99 µs | OVER_LIMIT | service CPU µs/call | Redis CPU µs/call | rlsload CPU µs/call | Redis commands/call | Redis reads/call | errors |")
	fmt.Fprint(out, "|---:|---|---:|")
	fmt.Fprint(out, strings.Repeat("---:|", len(cfg.baselines)))
	fmt.Fprintln(out, "---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, conc := range cfg.conc {
		for _, t := range cfg.targets {
			m, ok := res.med[cell{conc, t.name}]
			if !ok {
				continue
			}
			fmt.Fprintf(out, "| %d | %s | %s |", conc, t.name, measure.Thousands(m.rate))
			for _, b := range cfg.baselines {
				vs := "-"
				if r, ok := res.ratio(conc, t.name, b); ok && b != t.name {
					vs = fmt.Sprintf("%.2f", r)
				}
				fmt.Fprintf(out, " %s |", vs)
			}
			fmt.Fprintf(out, " %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
				measure.Micros(m.p50), measure.Micros(m.p99), percent(m.perCall(float64(m.overLimit))),
				fixed(1, m.perCall(m.serviceCPU)), fixed(1, m.perCall(m.redisCPU)), fixed(1, m.perCall(m.clientCPU)),
				fixed(2, m.perCall(m.redisCmds)), fixed(2, m.perCall(m.redisReads)), m.errors)
		}
	}
	fmt.Fprintln(out)
}

// printCommands prints the Redis commands each target sent per call,
// when Redis was read.
func printCommands(out io.Writer, cfg config, res results) {
	if cfg.redis == "" {
		return
	}
	fmt.Fprintln(out, "Redis commands per RLS call, by command, each with the µs Redis spent running it per RLS call (INFO commandstats; a script's time includes the commands it runs):")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| callers | service | commands |\n|---:|---|---|")
	for _, conc := range cfg.conc {
		for _, t := range cfg.targets {
			m, ok := res.med[cell{conc, t.name}]
			if !ok {
				continue
			}
			fmt.Fprintf(out, "| %d | %s | %s |\n", conc, t.name, commandMix(m))
		}
	}
	fmt.Fprintln(out)
}

// commandMix lists the commands of m per call, most frequent first,
// leaving out those below one in a thousand calls.
func commandMix(m sample) string {
	type cmd struct {
		name          string
		perCall, usec float64
	}
	var cmds []cmd
	for name, d := range m.cmds {
		if pc := m.perCall(d.calls); pc >= 0.001 {
			cmds = append(cmds, cmd{name, pc, m.perCall(d.usec)})
		}
	}
	if len(cmds) == 0 {
		return "none"
	}
	slices.SortFunc(cmds, func(a, b cmd) int {
		if a.perCall != b.perCall {
			if a.perCall > b.perCall {
				return -1
			}
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	parts := make([]string, len(cmds))
	for i, c := range cmds {
		parts[i] = fmt.Sprintf("%s %.3f (%.1f µs)", strings.ToUpper(c.name), c.perCall, c.usec)
	}
	return strings.Join(parts, ", ")
}

// The targets printGoals looks for.
const (
	subject    = "ratekeeper"
	envoy      = "envoy"
	envoyBest  = "envoy-best"
	noopTarget = "noop"
)

// printGoals checks the service's goals when the targets include
// ratekeeper, envoy, envoy-best and noop: at 128 callers at least 2× the
// decisions/s of envoy-best with a p99 no worse, and 0.65× the no-op's; at
// one caller 1.3× the better of envoy's two settings; at most one Redis
// read per call at any concurrency.
func printGoals(out io.Writer, cfg config, res results) {
	for _, n := range []string{subject, envoy, envoyBest, noopTarget} {
		if !slices.ContainsFunc(cfg.targets, func(t target) bool { return t.name == n }) {
			return
		}
	}
	fmt.Fprintln(out, "| goal | measured | met |\n|---|---|---|")
	verdict := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	if slices.Contains(cfg.conc, 128) {
		if r, ok := res.ratio(128, subject, envoyBest); ok {
			rk, eb := res.med[cell{128, subject}], res.med[cell{128, envoyBest}]
			fmt.Fprintf(out, "| decisions/s at 128 callers ≥ 2× envoy-best, p99 no worse | %.2f×; p99 %s µs vs %s µs | %s |\n",
				r, measure.Micros(rk.p99), measure.Micros(eb.p99), verdict(r >= 2 && rk.p99 <= eb.p99))
		}
		if r, ok := res.ratio(128, subject, noopTarget); ok {
			fmt.Fprintf(out, "| decisions/s at 128 callers ≥ 0.65× noop | %.2f× | %s |\n", r, verdict(r >= 0.65))
		}
	}
	if slices.Contains(cfg.conc, 1) {
		r1, ok1 := res.ratio(1, subject, envoy)
		r2, ok2 := res.ratio(1, subject, envoyBest)
		if ok1 && ok2 {
			r := min(r1, r2)
			fmt.Fprintf(out, "| decisions/s at 1 caller ≥ 1.3× envoy's better setting | %.2f× | %s |\n", r, verdict(r >= 1.3))
		}
	}
	if cfg.redis != "" {
		worst := -1.0
		for _, conc := range cfg.conc {
			m := res.med[cell{conc, subject}]
			worst = max(worst, m.perCall(m.redisReads))
		}
		if worst >= 0 {
			fmt.Fprintf(out, "| Redis round trips (reads) per RLS call ≤ 1, at every concurrency | %.3f at most | %s |\n", worst, verdict(worst <= 1))
		}
	}
	fmt.Fprintln(out)
}

// percent formats a share, "-" when unknown.
func percent(x float64) string {
	if x < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*x)
}

// fixed formats x with the given decimals, "-" when unknown.
func fixed(decimals int, x float64) string {
	if x < 0 {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', decimals, 64)
}
