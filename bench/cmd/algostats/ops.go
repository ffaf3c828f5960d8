package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

// -ops measures several operations of every algorithm side by side, in
// stretches of -chunk calls taken in turn, so that the machine's noise
// falls on each alike. Each operation has callers of its own, on the same
// Zipf sequence as the decisions:
//   - decide: AllowN of 1, as the decisions of the main table;
//   - charge: Charge of 1, so that the hot callers go into debt, and stay
//     there, where a decision would have been denied;
//   - refund: Refund of 1, each stretch after an untimed Charge of 1 of
//     the same callers, so that every refund has something to give back.
var (
	opsFlag   = flag.String("ops", "", "measure these operations side by side instead of the main table: a comma-separated list of decide, charge and refund")
	chunkFlag = flag.Int("chunk", 500, "with -ops: calls per stretch of one operation")
)

// allowN decides a request of cost 1 with AllowN.
var allowN = costOf((*ratekeeper.Limiter).AllowN)

// operations are -ops's values: the timed call, and what comes before
// each stretch of it, untimed.
var operations = map[string]mode{
	"decide": {decide: allowN, prepare: nothing},
	"charge": {decide: charge, prepare: nothing},
	"refund": {decide: refund, prepare: charge},
}

// parseOps reads -ops: known operations, each once.
func parseOps(list string) ([]string, error) {
	var ops []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if _, ok := operations[name]; !ok {
			return nil, fmt.Errorf("-ops: unknown operation %q: want decide, charge or refund", name)
		}
		if slices.Contains(ops, name) {
			return nil, fmt.Errorf("-ops: %q given twice", name)
		}
		ops = append(ops, name)
	}
	return ops, nil
}

// opRow is one algorithm's line of the -ops table: per operation, its
// per-call cost in each run.
type opRow struct {
	name string
	runs map[string][]cost
}

func runOps(ctx context.Context, rdb *redis.Client, ops []string, n, numCallers, runs, limit, chunk int) error {
	server, err := rdb.InfoMap(ctx, "server").Result()
	if err != nil {
		return err
	}
	all, err := newSubjects(rdb, limit)
	if err != nil {
		return err
	}
	subjects := slices.DeleteFunc(all, func(s subject) bool { return s.lim == nil })
	seq, hot := zipfSequence(n, numCallers, limit)

	// Each operation's callers, named alike in length: "c:user:0000001".
	callers := map[string][]string{}
	for _, op := range ops {
		names := make([]string, numCallers)
		for i := range names {
			names[i] = fmt.Sprintf("%c:user:%07d", op[0], i)
		}
		callers[op] = names
	}
	deleteAll := func(s subject) error {
		for _, op := range ops {
			if err := deleteKeys(ctx, rdb, s, callers[op]); err != nil {
				return err
			}
		}
		return nil
	}
	defer func() {
		for _, s := range subjects {
			if err := deleteAll(s); err != nil {
				fmt.Fprintln(os.Stderr, "algostats:", err)
			}
		}
	}()

	rows := make([]opRow, len(subjects))
	for k := range runs {
		for i, s := range subjects {
			if k == 0 {
				rows[i] = opRow{name: s.name, runs: map[string][]cost{}}
			}
			if err := deleteAll(s); err != nil {
				return err
			}
			if err := s.load(ctx); err != nil {
				return err
			}
			totals, err := measureOps(ctx, rdb, s, ops, callers, seq, chunk)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Fprintf(os.Stderr, "run %d: %-24s", k+1, s.name)
			for _, op := range ops {
				c := totals[op].perCall()
				rows[i].runs[op] = append(rows[i].runs[op], c)
				fmt.Fprintf(os.Stderr, " %s %6.2f µs", op, c.usec)
			}
			fmt.Fprintln(os.Stderr)
		}
	}

	fmt.Printf("Redis %s, %d CPUs shared by client and server; limit %d per minute; "+
		"%d calls of each operation over %d callers per run (%d callers make more than %d requests), "+
		"in turns of %d calls; median of %d runs.\n\n",
		server["Server"]["redis_version"], runtime.NumCPU(), limit, n, numCallers, hot, limit, chunk, runs)
	printOps(ops, rows)
	return nil
}

// measureOps runs seq's calls of every operation on fresh keys, a stretch
// of chunk calls of each in turn, the order rotating from one stretch to
// the next, and returns each operation's totals.
func measureOps(ctx context.Context, rdb *redis.Client, s subject, ops []string, callers map[string][]string, seq []int, chunk int) (map[string]spent, error) {
	totals := map[string]spent{}
	for start, turn := 0, 0; start < len(seq); start, turn = start+chunk, turn+1 {
		stretch := seq[start:min(start+chunk, len(seq))]
		for j := range ops {
			op := ops[(j+turn)%len(ops)]
			m := operations[op]
			if prepare := m.prepare(s.lim); prepare != nil {
				if err := callEach(ctx, prepare, callers[op], stretch); err != nil {
					return nil, err
				}
			}
			t, err := timeCalls(ctx, rdb, m.decide(s.lim), callers[op], stretch)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			totals[op] = totals[op].add(t)
		}
	}
	return totals, nil
}

// printOps prints the -ops table: server µs per call of each operation
// (the median of the runs), each operation's ratio to decide (the median
// of the runs' ratios, and their range), and redis.call per call and the
// share allowed, from the last run.
func printOps(ops []string, rows []opRow) {
	var ratios []string
	if slices.Contains(ops, "decide") {
		for _, op := range ops {
			if op != "decide" {
				ratios = append(ratios, op)
			}
		}
	}
	head := []string{"Algorithm"}
	for _, op := range ops {
		head = append(head, op+" µs/call")
	}
	for _, op := range ratios {
		head = append(head, op+" ÷ decide (min–max)")
	}
	// A refund answers as a peek of nothing, always allowed.
	judged := slices.DeleteFunc(slices.Clone(ops), func(op string) bool { return op == "refund" })
	head = append(head, "redis.call per call ("+strings.Join(ops, " / ")+")")
	if len(judged) > 0 {
		head = append(head, "Allowed ("+strings.Join(judged, " / ")+")")
	}
	fmt.Println("| " + strings.Join(head, " | ") + " |")
	fmt.Println("|---" + strings.Repeat("|--:", len(head)-1) + "|")
	for _, r := range rows {
		cells := []string{r.name}
		for _, op := range ops {
			cells = append(cells, fmt.Sprintf("%.2f", median(field(r.runs[op], func(c cost) float64 { return c.usec }))))
		}
		for _, op := range ratios {
			q := make([]float64, len(r.runs[op]))
			for k, c := range r.runs[op] {
				q[k] = c.usec / r.runs["decide"][k].usec
			}
			cells = append(cells, fmt.Sprintf("%.2f× (%.2f–%.2f)", median(q), slices.Min(q), slices.Max(q)))
		}
		last := func(op string) cost { return r.runs[op][len(r.runs[op])-1] }
		var calls, allowed []string
		for _, op := range ops {
			calls = append(calls, fmt.Sprintf("%.2f", last(op).calls))
		}
		for _, op := range judged {
			allowed = append(allowed, fmt.Sprintf("%.1f%%", 100*last(op).allowed))
		}
		cells = append(cells, strings.Join(calls, " / "))
		if len(judged) > 0 {
			cells = append(cells, strings.Join(allowed, " / "))
		}
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
	}
}

// field picks one figure of each run.
func field(cs []cost, f func(cost) float64) []float64 {
	xs := make([]float64, len(cs))
	for i, c := range cs {
		xs[i] = f(c)
	}
	return xs
}
