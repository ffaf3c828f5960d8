// Command loadgen measures the decisions per second, latency and Redis
// cost of ratekeeper's redisstore next to other Redis rate limiters for
// Go, all against the same Redis, in the same run, with the same callers:
//
//	go run ./cmd/loadgen -redis 127.0.0.1:6379 -conc 1,16,128 -dur 5s -users 10000 \
//	    -libs ratekeeper,redis_rate,ulule,throttled,seed
//
// Run it from bench/ (the rueidis variant reads ratekeeper's scripts from
// ../redisstore/testdata). Every library applies the same limit per caller
// (-rate per -period, bursts of -burst) in its own terms, through a
// go-redis v9 client with go-redis's default options (rueidis for the
// rueidis variant; ContextTimeoutEnabled for the -cte variants). Each
// call's context has a deadline of its own (-deadline after the call
// starts), or none: -deadline none,1s runs every library both ways. Two
// modes:
//
//   - allow: each goroutine draws its callers uniformly from -users, so
//     that nearly every request is allowed (under a slow -rate, fewer);
//   - hot: every goroutine asks for the same caller, which is denied all
//     but -rate times per -period.
//
// A round runs every library at every concurrency and deadline in every
// mode; each run
// lasts -dur, in two halves, each after a warm-up of -warmup: the libraries
// run in an order rotated from round to round, then in the reverse order,
// so that a drift of the machine over the round weighs on all alike. After
// -rounds rounds loadgen prints the median of each figure, and each ratio
// to another library as the median of the ratios within a round, which the
// varying load of other work on a shared machine moves least. Per library
// and concurrency it reports decisions/s, p50 and p99 latency, the Redis
// server time per decision and per call (the usec in INFO commandstats of
// the commands the library sends, reset with CONFIG RESETSTAT before each
// run), the CPU time of Redis's main thread per decision, Redis commands
// per decision,
// and errors; in hot mode also the share of denials that Redis decided
// (the rest were answered in process). It then measures the memory of one
// caller's key (MEMORY USAGE), and ends with the line
//
//	ratio ratekeeper/redis_rate at conc=128: X.XX
//
// (decisions/s in allow mode). -svg writes a bar chart of decisions/s.
//
// loadgen resets the server's statistics and deletes the keys it wrote
// (their caller keys contain "loadgen:"), so give it a Redis of its own.
// It only connects to loopback addresses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	addr   string
	conc   []int
	dur    time.Duration
	warmup time.Duration
	users  int
	libs   []lib
	modes  []string
	rounds int
	policy policy
	// deadlines are the per-call deadlines to run with; 0 for none.
	deadlines []time.Duration
	svg       string
	prof      string
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("loadgen: ")
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed
	}
	if err != nil {
		log.Fatal(err)
	}
	if cfg.prof != "" {
		f, err := os.Create(cfg.prof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
	}
	err = run(cfg, os.Stdout, os.Stderr)
	if cfg.prof != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		log.Fatal(err)
	}
}

// parseFlags parses the command line; usage and flag errors go to out.
func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	// No default of the flag's own: the usage says the default once, and
	// the environment is read only when the flag is not given.
	addr := fs.String("redis", "", "Redis `address`, on loopback (default $RATEKEEPER_REDIS_ADDR, else 127.0.0.1:6379)")
	conc := fs.String("conc", "1,16,128", "comma-separated `goroutine counts`")
	dur := fs.Duration("dur", 5*time.Second, "measured time of each run, in two halves")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured time before each run")
	users := fs.Int("users", 10000, "number of distinct callers in allow mode")
	names := fs.String("libs", "all", "comma-separated libraries, or all: "+libNames())
	mode := fs.String("mode", "both", "allow, hot or both")
	rounds := fs.Int("rounds", 3, "rounds; figures are medians over rounds")
	rate := fs.Int64("rate", 100, "requests per -period allowed per caller")
	period := fs.Duration("period", time.Second, "the period of -rate")
	burst := fs.Int64("burst", 100, "burst allowed per caller")
	deadlines := fs.String("deadline", "1s", "comma-separated `deadlines` of each call's context, each run on its own; none for a context without one (context.Background())")
	svg := fs.String("svg", "", "write a chart of decisions/s to this `file`")
	prof := fs.String("cpuprofile", "", "write a CPU profile of the client to this `file`")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if *addr == "" {
		*addr = os.Getenv("RATEKEEPER_REDIS_ADDR")
	}
	if *addr == "" {
		*addr = "127.0.0.1:6379"
	}
	cfg := config{addr: *addr, dur: *dur, warmup: *warmup, users: *users, rounds: *rounds,
		policy: policy{Rate: *rate, Period: *period, Burst: *burst}, svg: *svg, prof: *prof}
	if err := measure.CheckLoopback("redis", cfg.addr); err != nil {
		return config{}, err
	}
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return config{}, fmt.Errorf("-conc: %q is not a goroutine count from 1 to 4096", f)
		}
		cfg.conc = append(cfg.conc, n)
	}
	for _, f := range strings.Split(*deadlines, ",") {
		f = strings.TrimSpace(f)
		if f == "none" {
			cfg.deadlines = append(cfg.deadlines, 0)
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Millisecond || d > time.Minute {
			return config{}, fmt.Errorf("-deadline: %q is not none or a duration from 1ms to 1m", f)
		}
		cfg.deadlines = append(cfg.deadlines, d)
	}
	var err error
	if cfg.libs, err = findLibs(strings.Split(*names, ",")); err != nil {
		return config{}, fmt.Errorf("-libs: %w", err)
	}
	switch *mode {
	case "both":
		cfg.modes = []string{"allow", "hot"}
	case "allow", "hot":
		cfg.modes = []string{*mode}
	default:
		return config{}, fmt.Errorf("-mode: %q is not allow, hot or both", *mode)
	}
	switch {
	case cfg.dur < 10*time.Millisecond || cfg.dur > 10*time.Minute:
		return config{}, errors.New("-dur must be between 10ms and 10m")
	case cfg.warmup < 0 || cfg.warmup > time.Minute:
		return config{}, errors.New("-warmup must be from 0 to 1m")
	case cfg.users < 1:
		return config{}, errors.New("-users must be positive")
	case cfg.rounds < 1 || cfg.rounds > 100:
		return config{}, errors.New("-rounds must be from 1 to 100")
	case cfg.policy.Rate < 1 || cfg.policy.Rate > 1_000_000_000 || cfg.policy.Burst < 1 || cfg.policy.Burst > 1_000_000_000:
		// Above one a microsecond only ratekeeper's token bucket (several
		// tokens a refill) takes the rate; the others refuse it.
		return config{}, errors.New("-rate and -burst must be from 1 to 1000000000")
	case cfg.policy.Period < time.Second || cfg.policy.Period > 24*time.Hour:
		return config{}, errors.New("-period must be from 1s to 24h")
	}
	return cfg, nil
}

func libNames() string {
	names := make([]string, len(libs))
	for i, l := range libs {
		names[i] = l.name
	}
	return strings.Join(names, ",")
}

// sample is the outcome of one run of one library.
type sample struct {
	decisions, allowed, denied, errors int64
	rate                               float64 // decisions per second
	p50, p99                           time.Duration
	srvUsec                            float64 // commandstats usec
	calls                              int64   // commands the library sent
	inRedis                            int64   // decisions Redis ran; -1 unknown
	cpuUsec                            float64 // Redis main thread
	clientUsec                         float64 // this process
	hist                               *measure.Histogram
	elapsed                            time.Duration
}

// add merges o, a run of the same library in the same cell, into s.
func (s *sample) add(o sample) {
	s.decisions += o.decisions
	s.allowed += o.allowed
	s.denied += o.denied
	s.errors += o.errors
	s.srvUsec += o.srvUsec
	s.calls += o.calls
	if s.inRedis < 0 || o.inRedis < 0 {
		s.inRedis = -1 // unknown
	} else {
		s.inRedis += o.inRedis
	}
	s.cpuUsec += o.cpuUsec
	s.clientUsec += o.clientUsec
	s.elapsed += o.elapsed
	s.hist.Merge(o.hist)
	s.rate = float64(s.decisions) / s.elapsed.Seconds()
	s.p50, s.p99 = s.hist.Quantile(0.50), s.hist.Quantile(0.99)
}

// cell identifies the runs whose medians make one row.
type cell struct {
	mode     string
	conc     int
	deadline time.Duration // of each call; 0 for none
	lib      string
}

// deadlineName names a call deadline in the reports.
func deadlineName(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

func run(cfg config, out, progress io.Writer) error {
	perRun := 2*cfg.warmup + cfg.dur // two halves, each warmed up
	runs := cfg.rounds * len(cfg.modes) * len(cfg.conc) * len(cfg.deadlines) * len(cfg.libs)
	// Every run ends on its own; this only bounds a Redis that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(runs)*(perRun+10*time.Second)+time.Minute)
	defer cancel()

	admin := newClient(cfg.addr)
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", cfg.addr, err)
	}
	if err := deleteKeys(ctx, admin); err != nil {
		return err
	}
	defer func() {
		if err := deleteKeys(context.Background(), admin); err != nil {
			log.Print(err)
		}
	}()

	deciders := make([]decideFunc, len(cfg.libs))
	for i, l := range cfg.libs {
		decide, closeFn, err := l.open(cfg.addr, cfg.policy)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		defer closeFn()
		deciders[i] = decide
	}
	fmt.Fprintf(progress, "%d runs of 2 × (%v warm-up + %v): about %v\n", runs, cfg.warmup, cfg.dur/2, time.Duration(runs)*perRun)

	samples := make(map[cell][]sample)
	for round := range cfg.rounds {
		for _, mode := range cfg.modes {
			for _, conc := range cfg.conc {
				for _, dl := range cfg.deadlines {
					// Each library runs twice, for half of -dur each: in an
					// order rotated from round to round, then in the reverse
					// order, so that a drift of the machine over the round
					// weighs on every library alike.
					order := make([]int, len(cfg.libs))
					for k := range order {
						order[k] = (k + round) % len(cfg.libs)
					}
					halves := make([]sample, len(cfg.libs))
					for pass := range 2 {
						for _, i := range order {
							l := cfg.libs[i]
							s, err := runOne(ctx, cfg, admin, l, deciders[i], mode, conc, dl, cfg.dur/2)
							if err != nil {
								return fmt.Errorf("%s %s conc=%d deadline=%s: %w", l.name, mode, conc, deadlineName(dl), err)
							}
							if pass == 0 {
								halves[i] = s
								continue
							}
							halves[i].add(s)
						}
						slices.Reverse(order)
					}
					for _, i := range order {
						l, s := cfg.libs[i], halves[i]
						fmt.Fprintf(progress, "round %d/%d %-5s conc=%-4d deadline=%-4s %-22s %9.0f/s p50 %6dµs p99 %6dµs srv %5.1fµs errors %d\n",
							round+1, cfg.rounds, mode, conc, deadlineName(dl), l.name, s.rate, s.p50.Microseconds(), s.p99.Microseconds(),
							perDecision(s.srvUsec, s.decisions), s.errors)
						c := cell{mode, conc, dl, l.name}
						samples[c] = append(samples[c], s)
					}
				}
			}
		}
	}
	res := results{med: make(map[cell]sample, len(samples)), runs: samples}
	for c, ss := range samples {
		res.med[c] = median(ss)
	}

	version := measure.RedisVersion(ctx, admin)
	fmt.Fprintf(out, "# loadgen: %s %s/%s, %d CPUs (GOMAXPROCS %d), Redis %s at %s\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), version, cfg.addr)
	fmt.Fprintf(out, "Every library: %d requests per %v per caller, bursts of %d (%s). Medians of %d rounds of %v per run.\n\n",
		cfg.policy.Rate, cfg.policy.Period, cfg.policy.Burst, cfg.policy, cfg.rounds, cfg.dur)
	for _, mode := range cfg.modes {
		printTable(out, cfg, res, mode)
	}
	mem, err := measureMemory(ctx, admin)
	if err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	printMemory(out, mem)
	printTargets(out, cfg, res, mem)
	if cfg.svg != "" {
		if err := writeChart(cfg.svg, cfg, res.med, version); err != nil {
			return err
		}
		fmt.Fprintf(out, "chart written to %s\n\n", cfg.svg)
	}
	ratio := "n/a"
	if r, ok := res.ratio("allow", 128, cfg.deadlines[0], "ratekeeper", "redis_rate"); ok {
		ratio = fmt.Sprintf("%.2f", r)
	}
	fmt.Fprintf(out, "ratio ratekeeper/redis_rate at conc=128: %s\n", ratio)
	return nil
}

// runOne warms lib up, then measures it for dur.
func runOne(ctx context.Context, cfg config, admin *redis.Client, l lib, decide decideFunc, mode string, conc int, deadline, dur time.Duration) (sample, error) {
	keys := []string{"loadgen:" + l.name + ":hot"}
	if mode == "allow" {
		keys = make([]string, cfg.users)
		for i := range keys {
			keys[i] = "loadgen:" + l.name + ":user:" + strconv.Itoa(i)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.warmup+dur+10*time.Second)
	defer cancel()
	drive(ctx, decide, keys, conc, deadline, cfg.warmup)
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return sample{}, err
	}
	cpu0, err := measure.CPUMicros(ctx, admin)
	if err != nil {
		return sample{}, err
	}
	client0 := measure.SelfCPU()
	s, firstErr := drive(ctx, decide, keys, conc, deadline, dur)
	s.clientUsec = measure.SelfCPU() - client0
	if firstErr != nil {
		log.Printf("%s %s conc=%d: %d errors, the first: %v", l.name, mode, conc, s.errors, firstErr)
	}
	stats, err := measure.CommandStats(ctx, admin)
	if err != nil {
		return sample{}, err
	}
	cpu1, err := measure.CPUMicros(ctx, admin)
	if err != nil {
		return sample{}, err
	}
	s.srvUsec, s.calls = serverTime(l, stats)
	switch {
	case l.decisionCmd != "":
		s.inRedis = stats[l.decisionCmd].Calls
	case l.oneCall:
		s.inRedis = s.calls
	default:
		s.inRedis = -1
	}
	s.cpuUsec = cpu1 - cpu0
	return s, nil
}

// worker is what one goroutine of a run counts.
type worker struct {
	hist                  measure.Histogram
	allowed, denied, errs int64
	firstErr              error
}

// drive runs conc goroutines that decide for keys drawn uniformly at
// random until dur has passed, and returns what they counted, with the
// first error met. Each call's context has the given deadline from the
// call's start, or none (context.Background()) for 0, as a caller's would:
// ctx only stops the goroutines.
func drive(ctx context.Context, decide decideFunc, keys []string, conc int, deadline, dur time.Duration) (sample, error) {
	if dur <= 0 {
		return sample{}, nil
	}
	workers := make([]worker, conc)
	elapsed := measure.Drive(ctx, conc, dur, func(g int, rng *rand.Rand) bool {
		w := &workers[g]
		key := keys[rng.IntN(len(keys))]
		t0 := time.Now()
		callCtx, cancel := context.Background(), context.CancelFunc(nil)
		if deadline > 0 {
			callCtx, cancel = context.WithDeadline(callCtx, t0.Add(deadline))
		}
		allowed, err := decide(callCtx, key)
		lat := time.Since(t0)
		if cancel != nil {
			cancel()
		}
		switch {
		case err != nil:
			if w.errs++; w.firstErr == nil {
				w.firstErr = err
			}
			return ctx.Err() == nil
		case allowed:
			w.allowed++
		default:
			w.denied++
		}
		w.hist.Record(lat)
		return true
	})

	s := sample{hist: new(measure.Histogram), elapsed: elapsed}
	hist := s.hist
	var firstErr error
	for i := range workers {
		w := &workers[i]
		hist.Merge(&w.hist)
		s.allowed += w.allowed
		s.denied += w.denied
		s.errors += w.errs
		if firstErr == nil {
			firstErr = w.firstErr
		}
	}
	s.decisions = s.allowed + s.denied
	s.rate = float64(s.decisions) / elapsed.Seconds()
	s.p50, s.p99 = hist.Quantile(0.50), hist.Quantile(0.99)
	return s, firstErr
}

// median returns the median of each figure on its own.
func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		return measure.Median(v)
	}
	perDec := func(f func(sample) float64) float64 {
		return pick(func(s sample) float64 { return f(s) / float64(max(s.decisions, 1)) })
	}
	m := sample{
		rate: pick(func(s sample) float64 { return s.rate }),
		p50:  time.Duration(pick(func(s sample) float64 { return float64(s.p50) })),
		p99:  time.Duration(pick(func(s sample) float64 { return float64(s.p99) })),
	}
	// Per-decision figures are medians of each run's ratio, kept over a
	// nominal million decisions so that the fields keep their meaning.
	const n = 1_000_000
	m.decisions = n
	m.srvUsec = n * perDec(func(s sample) float64 { return s.srvUsec })
	m.cpuUsec = n * perDec(func(s sample) float64 { return s.cpuUsec })
	m.clientUsec = n * perDec(func(s sample) float64 { return s.clientUsec })
	m.calls = int64(n * perDec(func(s sample) float64 { return float64(s.calls) }))
	m.inRedis = int64(n * perDec(func(s sample) float64 { return float64(s.inRedis) }))
	m.allowed = int64(n * perDec(func(s sample) float64 { return float64(s.allowed) }))
	m.denied = n - m.allowed
	for _, s := range ss {
		m.errors += s.errors
	}
	return m
}

func perDecision(total float64, decisions int64) float64 {
	if decisions == 0 {
		return 0
	}
	return total / float64(decisions)
}

// results are the samples of every run, in round order, and their
// medians.
type results struct {
	med  map[cell]sample
	runs map[cell][]sample
}

// ratio returns the median over rounds of a's decisions/s divided by b's
// in the same round: the load that other work puts on a shared machine
// changes from round to round, and moves both alike.
func (r results) ratio(mode string, conc int, dl time.Duration, a, b string) (float64, bool) {
	return r.roundRatio(mode, conc, dl, a, b, func(s sample) float64 { return s.rate })
}

// costRatio is ratio for the server time per decision.
func (r results) costRatio(mode string, conc int, dl time.Duration, a, b string) (float64, bool) {
	return r.roundRatio(mode, conc, dl, a, b, func(s sample) float64 { return perDecision(s.srvUsec, s.decisions) })
}

func (r results) roundRatio(mode string, conc int, dl time.Duration, a, b string, f func(sample) float64) (float64, bool) {
	values := func(ss []sample) []float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		return v
	}
	return measure.MedianRatio(values(r.runs[cell{mode, conc, dl, a}]), values(r.runs[cell{mode, conc, dl, b}]))
}

// deleteKeys deletes the keys of the runs: their caller keys contain
// "loadgen:".
func deleteKeys(ctx context.Context, c *redis.Client) error {
	iter := c.Scan(ctx, 0, "*loadgen:*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return c.Unlink(ctx, batch...).Err()
	}
	return nil
}

// serverTime returns the usec and the number of calls of a library's own
// commands in stats; see lib.cmds and lib.nested.
func serverTime(l lib, stats map[string]measure.CmdStat) (usec float64, calls int64) {
	for _, name := range l.cmds {
		s := stats[name]
		u, n := float64(s.Usec), s.Calls
		if script, ok := l.nested[name]; ok && n > 0 {
			// Take out the script's own calls at the average cost per call.
			inner := min(stats[script].Calls, n)
			u -= u * float64(inner) / float64(n)
			n -= inner
		}
		usec += u
		calls += n
	}
	return usec, calls
}
