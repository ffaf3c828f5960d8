// Command rlsload drives rate limit services over gRPC
// (envoy.service.ratelimit.v3 ShouldRateLimit) and measures their
// decisions per second, their latency and what each call costs in Redis.
// It compares several services in one run:
//
//	rlsload -targets noop=127.0.0.1:8091,envoy=127.0.0.1:8191,ratekeeper=127.0.0.1:8291 \
//	    -baseline envoy,noop -redis 127.0.0.1:6379 -conc 1,16,128 -dur 4s -rounds 3
//
// or one, with -addr. Every request asks for domain -domain with -descs
// descriptors, each one entry {-key: value}, its values drawn uniformly
// from -keys distinct ones, so that with a limit per value nearly every
// request is allowed; the report says how many were OVER_LIMIT. The
// requests are built before the run, and every caller goroutine sends its
// next one when the last is answered. The callers share -conns gRPC
// connections.
//
// A round runs every target at every concurrency, each for -dur in two
// halves after a warm-up of -warmup each: in an order rotated from round
// to round, then in the reverse order, so that a drift of the shared
// machine over a round weighs on every target alike. After -rounds rounds
// rlsload prints a Markdown table of medians: decisions/s, p50 and p99
// latency, and each target's ratio to every -baseline as the median of the
// per-round ratios. With -redis it also reads Redis's INFO around every
// run and reports, per RLS call, the commands Redis ran
// (total_commands_processed) and the reads it made from its clients
// (total_reads_processed, less PINGs): a read takes in whatever a client
// had sent, a round trip or several pipelined ones, so reads per call
// bound round trips per call from below, and equal them at one caller.
// The commands include those a script runs.
// Give it a Redis used by the targets alone. It also reports the CPU
// time Redis's main thread spent per call, and with -pids, each
// target's own, from /proc (Linux), and rlsload's: at 128 callers the
// three share the machine's cores, and their sum per call bounds the
// decisions/s that the cores allow.
//
// When the targets include ratekeeper, envoy, envoy-best and noop, the
// report ends with the service's goals checked against them.
//
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
	"slices"
	"strconv"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
	"github.com/ratekeeper/ratekeeper/internal/procstat"
)

// target is one service under test.
type target struct {
	name, addr string
	pid        int // its process, for its CPU time; 0 unknown
}

// config is what the flags set.
type config struct {
	targets   []target
	baselines []string
	conc      []int
	dur       time.Duration
	warmup    time.Duration
	rounds    int
	domain    string
	key       string
	keys      int
	descs     int
	conns     int
	timeout   time.Duration
	redis     string
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("rlsload: ")
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

// parseFlags parses the command line; usage and flag errors go to out.
func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("rlsload", flag.ContinueOnError)
	fs.SetOutput(out)
	addr := fs.String("addr", "", "gRPC `address` of the one service to measure (or use -targets)")
	targets := fs.String("targets", "", "services to compare, as comma-separated `name=address` pairs")
	baseline := fs.String("baseline", "", "comma-separated target `names` to give ratios against (default the first target)")
	conc := fs.String("conc", "1,16,128", "comma-separated `counts` of concurrent callers")
	dur := fs.Duration("dur", 4*time.Second, "measured time of each run, in two halves")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured time before each half")
	rounds := fs.Int("rounds", 3, "rounds; figures are medians over rounds")
	domain := fs.String("domain", "bench", "rate limit domain of every request")
	key := fs.String("key", "user", "descriptor entry key")
	keys := fs.Int("keys", 10000, "distinct descriptor values, drawn uniformly")
	descs := fs.Int("descs", 1, "descriptors per request")
	conns := fs.Int("conns", 1, "gRPC connections per target, shared by the callers")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of each call")
	redisAddr := fs.String("redis", "", "Redis `address` the targets use, to count its commands, reads and CPU time per call (default: not counted)")
	pids := fs.String("pids", "", "the targets' processes, as comma-separated `name=pid` pairs, to report their CPU time per call")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg := config{dur: *dur, warmup: *warmup, rounds: *rounds, domain: *domain, key: *key,
		keys: *keys, descs: *descs, conns: *conns, timeout: *timeout, redis: *redisAddr}
	var err error
	switch {
	case (*addr == "") == (*targets == ""):
		return config{}, errors.New("give -addr or -targets, not both")
	case *addr != "":
		cfg.targets = []target{{name: "rls", addr: *addr}}
	default:
		if cfg.targets, err = parseTargets(*targets); err != nil {
			return config{}, fmt.Errorf("-targets: %w", err)
		}
	}
	for _, t := range cfg.targets {
		if err := measure.CheckLoopback("targets", t.addr); err != nil {
			return config{}, err
		}
	}
	if cfg.redis != "" {
		if err := measure.CheckLoopback("redis", cfg.redis); err != nil {
			return config{}, err
		}
	}
	if *pids != "" {
		if err := setPids(cfg.targets, *pids); err != nil {
			return config{}, fmt.Errorf("-pids: %w", err)
		}
	}
	if *baseline == "" {
		cfg.baselines = []string{cfg.targets[0].name}
	} else {
		for _, b := range strings.Split(*baseline, ",") {
			if !slices.ContainsFunc(cfg.targets, func(t target) bool { return t.name == b }) {
				return config{}, fmt.Errorf("-baseline: %q is not a target", b)
			}
			cfg.baselines = append(cfg.baselines, b)
		}
	}
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return config{}, fmt.Errorf("-conc: %q is not a caller count from 1 to 4096", f)
		}
		cfg.conc = append(cfg.conc, n)
	}
	switch {
	case cfg.dur < 10*time.Millisecond || cfg.dur > 10*time.Minute:
		return config{}, errors.New("-dur must be from 10ms to 10m")
	case cfg.warmup < 0 || cfg.warmup > time.Minute:
		return config{}, errors.New("-warmup must be from 0 to 1m")
	case cfg.rounds < 1 || cfg.rounds > 100:
		return config{}, errors.New("-rounds must be from 1 to 100")
	case cfg.domain == "" || cfg.key == "":
		return config{}, errors.New("-domain and -key must not be empty")
	case cfg.keys < 1 || cfg.keys > 10_000_000:
		return config{}, errors.New("-keys must be from 1 to 10000000")
	case cfg.descs < 1 || cfg.descs > 64:
		return config{}, errors.New("-descs must be from 1 to 64")
	case cfg.conns < 1 || cfg.conns > 64:
		return config{}, errors.New("-conns must be from 1 to 64")
	case cfg.timeout <= 0:
		return config{}, errors.New("-timeout must be positive")
	}
	return cfg, nil
}

// parseTargets parses name=addr,name=addr.
func parseTargets(s string) ([]target, error) {
	var ts []target
	for _, f := range strings.Split(s, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%q is not name=address", f)
		}
		if slices.ContainsFunc(ts, func(t target) bool { return t.name == name }) {
			return nil, fmt.Errorf("%q named twice", name)
		}
		ts = append(ts, target{name: name, addr: addr})
	}
	return ts, nil
}

// setPids sets the pid of each target named in name=pid pairs.
func setPids(ts []target, s string) error {
	for _, f := range strings.Split(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		pid, err := strconv.Atoi(v)
		if !ok || err != nil || pid < 1 {
			return fmt.Errorf("%q is not name=pid", f)
		}
		i := slices.IndexFunc(ts, func(t target) bool { return t.name == name })
		if i < 0 {
			return fmt.Errorf("%q is not a target", name)
		}
		ts[i].pid = pid
	}
	return nil
}

// sample is the outcome of one run of one target, or the median of
// several.
type sample struct {
	calls, overLimit, errors int64
	rate                     float64 // decisions (calls answered) per second
	p50, p99                 time.Duration
	hist                     *measure.Histogram
	elapsed                  time.Duration
	// Redis's counts over the run, and the CPU time in µs of its main
	// thread, of the target and of rlsload; -1 when not read.
	redisCmds, redisReads, redisCPU, serviceCPU, clientCPU float64
	cmds                                                   map[string]cmdDelta // per command
}

// add merges o, a run of the same target in the same cell, into s.
func (s *sample) add(o sample) {
	s.calls += o.calls
	s.overLimit += o.overLimit
	s.errors += o.errors
	s.elapsed += o.elapsed
	s.hist.Merge(o.hist)
	s.rate = float64(s.calls) / s.elapsed.Seconds()
	s.p50, s.p99 = s.hist.Quantile(0.50), s.hist.Quantile(0.99)
	s.redisCmds = sum(s.redisCmds, o.redisCmds)
	s.redisReads = sum(s.redisReads, o.redisReads)
	s.redisCPU = sum(s.redisCPU, o.redisCPU)
	s.serviceCPU = sum(s.serviceCPU, o.serviceCPU)
	s.clientCPU = sum(s.clientCPU, o.clientCPU)
	for k, v := range o.cmds {
		d := s.cmds[k]
		s.cmds[k] = cmdDelta{d.calls + v.calls, d.usec + v.usec}
	}
}

// sum returns a+b, or -1 when either is unknown.
func sum(a, b float64) float64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

// perCall returns x per answered call, or -1 when x is unknown.
func (s sample) perCall(x float64) float64 {
	if x < 0 || s.calls == 0 {
		return -1
	}
	return x / float64(s.calls)
}

// cell identifies the runs whose medians make one row.
type cell struct {
	conc   int
	target string
}

// results are every run's sample, in round order, and their medians.
type results struct {
	runs map[cell][]sample
	med  map[cell]sample
}

func newResults(runs map[cell][]sample) results {
	r := results{runs: runs, med: make(map[cell]sample, len(runs))}
	for c, ss := range runs {
		r.med[c] = median(ss)
	}
	return r
}

// ratio returns the median over rounds of a's decisions/s divided by
// b's in the same round.
func (r results) ratio(conc int, a, b string) (float64, bool) {
	return measure.MedianRatio(rates(r.runs[cell{conc, a}]), rates(r.runs[cell{conc, b}]))
}

func rates(ss []sample) []float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = s.rate
	}
	return v
}

// median returns the median of each figure on its own; figures per call
// are medians of each run's.
func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, 0, len(ss))
		for _, s := range ss {
			if x := f(s); x >= 0 {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			return -1
		}
		return measure.Median(v)
	}
	// Figures per call are kept over a nominal million calls, so that the
	// fields keep their meaning.
	const n = 1_000_000
	m := sample{
		calls: n,
		rate:  pick(func(s sample) float64 { return s.rate }),
		p50:   time.Duration(pick(func(s sample) float64 { return float64(s.p50) })),
		p99:   time.Duration(pick(func(s sample) float64 { return float64(s.p99) })),
		cmds:  make(map[string]cmdDelta),
	}
	m.overLimit = int64(n * pick(func(s sample) float64 { return s.perCall(float64(s.overLimit)) }))
	m.redisCmds = scaled(n, pick(func(s sample) float64 { return s.perCall(s.redisCmds) }))
	m.redisReads = scaled(n, pick(func(s sample) float64 { return s.perCall(s.redisReads) }))
	m.redisCPU = scaled(n, pick(func(s sample) float64 { return s.perCall(s.redisCPU) }))
	m.serviceCPU = scaled(n, pick(func(s sample) float64 { return s.perCall(s.serviceCPU) }))
	m.clientCPU = scaled(n, pick(func(s sample) float64 { return s.perCall(s.clientCPU) }))
	names := make(map[string]bool)
	for _, s := range ss {
		m.errors += s.errors
		for k := range s.cmds {
			names[k] = true
		}
	}
	for k := range names {
		m.cmds[k] = cmdDelta{
			calls: n * pick(func(s sample) float64 { return s.perCall(s.cmds[k].calls) }),
			usec:  n * pick(func(s sample) float64 { return s.perCall(s.cmds[k].usec) }),
		}
	}
	return m
}

// scaled returns n×x, or -1 for an unknown x.
func scaled(n, x float64) float64 {
	if x < 0 {
		return -1
	}
	return n * x
}

func run(cfg config, out, progress io.Writer) error {
	perRun := 2*cfg.warmup + cfg.dur
	runs := cfg.rounds * len(cfg.conc) * len(cfg.targets)
	// Every run ends on its own; this only bounds a target that hangs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(runs)*(perRun+2*cfg.timeout+5*time.Second)+time.Minute)
	defer cancel()

	var admin *redis.Client
	if cfg.redis != "" {
		admin = redis.NewClient(&redis.Options{Addr: cfg.redis, PoolSize: 1})
		defer admin.Close()
		if err := admin.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w", cfg.redis, err)
		}
	}
	reqs := requests(cfg)
	clients := make([][]rlsv3.RateLimitServiceClient, len(cfg.targets))
	for i, t := range cfg.targets {
		for range cfg.conns {
			cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			defer cc.Close()
			clients[i] = append(clients[i], rlsv3.NewRateLimitServiceClient(cc))
		}
		// One call first, so that a target that is down or misconfigured
		// is named at once.
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := clients[i][0].ShouldRateLimit(cctx, reqs[0], grpc.WaitForReady(true))
		ccancel()
		if err != nil {
			return fmt.Errorf("%s at %s: %w", t.name, t.addr, err)
		}
		if len(resp.GetStatuses()) != cfg.descs {
			return fmt.Errorf("%s at %s: %d statuses for %d descriptors", t.name, t.addr, len(resp.GetStatuses()), cfg.descs)
		}
	}
	fmt.Fprintf(progress, "%d runs of 2 × (%v warm-up + %v): about %v\n", runs, cfg.warmup, cfg.dur/2, time.Duration(runs)*perRun)

	samples := make(map[cell][]sample)
	for round := range cfg.rounds {
		for _, conc := range cfg.conc {
			order := make([]int, len(cfg.targets))
			for k := range order {
				order[k] = (k + round) % len(cfg.targets)
			}
			halves := make([]sample, len(cfg.targets))
			for pass := range 2 {
				for _, i := range order {
					t := cfg.targets[i]
					s, err := runOne(ctx, cfg, admin, t, clients[i], reqs, conc, cfg.dur/2)
					if err != nil {
						return fmt.Errorf("%s conc=%d: %w", t.name, conc, err)
					}
					if pass == 0 {
						halves[i] = s
					} else {
						halves[i].add(s)
					}
				}
				slices.Reverse(order)
			}
			for i, t := range cfg.targets {
				s := halves[i]
				fmt.Fprintf(progress, "round %d/%d conc=%-4d %-12s %9.0f/s p50 %6dµs p99 %6dµs over-limit %d errors %d\n",
					round+1, cfg.rounds, conc, t.name, s.rate, s.p50.Microseconds(), s.p99.Microseconds(), s.overLimit, s.errors)
				c := cell{conc, t.name}
				samples[c] = append(samples[c], s)
			}
		}
	}
	res := newResults(samples)
	redisNote := "Redis not read"
	if admin != nil {
		redisNote = "Redis " + measure.RedisVersion(ctx, admin) + " at " + cfg.redis
	}
	fmt.Fprintf(out, "# rlsload: %s %s/%s, %d CPUs (GOMAXPROCS %d), %s\n\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), redisNote)
	fmt.Fprintf(out, "Domain %q, %d descriptor(s) per request, values of %q drawn from %d; %d gRPC connection(s) per target. Medians of %d rounds of %v per run.\n\n",
		cfg.domain, cfg.descs, cfg.key, cfg.keys, cfg.conns, cfg.rounds, cfg.dur)
	printTable(out, cfg, res)
	printCommands(out, cfg, res)
	printGoals(out, cfg, res)
	return nil
}

// requests builds one request per descriptor value: descriptor j of
// request i has the value i+j (mod -keys).
func requests(cfg config) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, cfg.keys)
	for i := range reqs {
		r := &rlsv3.RateLimitRequest{Domain: cfg.domain}
		for j := range cfg.descs {
			r.Descriptors = append(r.Descriptors, &rlcommon.RateLimitDescriptor{
				Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: cfg.key, Value: "v" + strconv.Itoa((i+j)%cfg.keys)}},
			})
		}
		reqs[i] = r
	}
	return reqs
}

// runOne warms a target up, then measures it for dur, reading Redis's
// counters and the target's CPU time around the measured part.
func runOne(ctx context.Context, cfg config, admin *redis.Client, t target, clients []rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest, conc int, dur time.Duration) (sample, error) {
	drive(ctx, cfg, clients, reqs, conc, cfg.warmup)
	var before redisCounts
	if admin != nil {
		var err error
		if before, err = readRedis(ctx, admin); err != nil {
			return sample{}, err
		}
	}
	cpu0, cpuErr := targetCPU(t)
	client0 := measure.SelfCPU()
	s, firstErr := drive(ctx, cfg, clients, reqs, conc, dur)
	s.clientCPU = measure.SelfCPU() - client0
	if firstErr != nil {
		log.Printf("%s conc=%d: %d errors, the first: %v", t.name, conc, s.errors, firstErr)
	}
	s.serviceCPU = -1
	if cpu1, err := targetCPU(t); err == nil && cpuErr == nil {
		s.serviceCPU = cpu1 - cpu0
	}
	s.redisCmds, s.redisReads, s.redisCPU, s.cmds = -1, -1, -1, map[string]cmdDelta{}
	if admin != nil {
		after, err := readRedis(ctx, admin)
		if err != nil {
			return sample{}, err
		}
		s.redisCmds, s.redisReads, s.redisCPU, s.cmds = after.since(before)
	}
	return s, nil
}

// targetCPU returns the CPU time of t's process in µs, or an error when
// it is unknown.
func targetCPU(t target) (float64, error) {
	if t.pid == 0 {
		return 0, errors.New("no pid")
	}
	return procstat.CPU(t.pid)
}

// redisCounts are Redis's counters at one moment.
type redisCounts struct {
	cmds, reads, cpu float64
	perCmd           map[string]measure.CmdStat
}

// readRedis reads INFO stats, commandstats and cpu, in one command.
func readRedis(ctx context.Context, c *redis.Client) (redisCounts, error) {
	info, err := c.Info(ctx, "stats", "commandstats", "cpu").Result()
	if err != nil {
		return redisCounts{}, err
	}
	nums, err := measure.ParseInfoNumbers(info)
	if err != nil {
		return redisCounts{}, err
	}
	perCmd, err := measure.ParseCommandStats(info)
	if err != nil {
		return redisCounts{}, err
	}
	return redisCounts{cmds: nums["total_commands_processed"], reads: nums["total_reads_processed"],
		cpu: measure.MainThreadCPU(nums), perCmd: perCmd}, nil
}

// readingCost is what the readings before and after add to the counts
// between them: Redis counts a command once it has run, so the first INFO
// falls in between, and a read as it makes it, so the second's read does.
const readingCost = 1

// cmdDelta is what one command did over a run: its calls and the µs
// Redis spent running them (INFO commandstats).
type cmdDelta struct {
	calls, usec float64
}

// since returns the commands, reads and CPU µs of Redis between b and a,
// less rlsload's own, and what each command but INFO did. The reads
// leave out one per PING: the services' connection pools send them to
// check idle connections, not to decide, and the idle targets' pools
// would otherwise be counted in another target's run.
func (a redisCounts) since(b redisCounts) (cmds, reads, cpu float64, perCmd map[string]cmdDelta) {
	perCmd = make(map[string]cmdDelta)
	for name, s := range a.perCmd {
		if name == "info" {
			continue
		}
		if d := s.Calls - b.perCmd[name].Calls; d > 0 {
			perCmd[name] = cmdDelta{float64(d), float64(max(s.Usec-b.perCmd[name].Usec, 0))}
		}
	}
	return max(a.cmds-b.cmds-readingCost, 0), max(a.reads-b.reads-readingCost-perCmd["ping"].calls, 0), max(a.cpu-b.cpu, 0), perCmd
}

// worker is what one caller counts.
type worker struct {
	hist                   measure.Histogram
	calls, overLimit, errs int64
	firstErr               error
}

// drive runs conc callers, each sending requests drawn uniformly from
// reqs one after the other, until dur has passed, and returns what they
// counted with the first error met.
func drive(ctx context.Context, cfg config, clients []rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest, conc int, dur time.Duration) (sample, error) {
	if dur <= 0 {
		return sample{hist: new(measure.Histogram)}, nil
	}
	workers := make([]worker, conc)
	elapsed := measure.Drive(ctx, conc, dur, func(g int, rng *rand.Rand) bool {
		w, client := &workers[g], clients[g%len(clients)]
		req := reqs[rng.IntN(len(reqs))]
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		t0 := time.Now()
		resp, err := client.ShouldRateLimit(cctx, req)
		lat := time.Since(t0)
		cancel()
		if err == nil && len(resp.GetStatuses()) != len(req.Descriptors) {
			err = fmt.Errorf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.Descriptors))
		}
		if err != nil {
			if w.errs++; w.firstErr == nil {
				w.firstErr = err
			}
			return ctx.Err() == nil
		}
		w.calls++
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.overLimit++
		}
		w.hist.Record(lat)
		return true
	})

	s := sample{hist: new(measure.Histogram), elapsed: elapsed}
	var firstErr error
	for i := range workers {
		w := &workers[i]
		s.hist.Merge(&w.hist)
		s.calls += w.calls
		s.overLimit += w.overLimit
		s.errors += w.errs
		if firstErr == nil {
			firstErr = w.firstErr
		}
	}
	s.rate = float64(s.calls) / elapsed.Seconds()
	s.p50, s.p99 = s.hist.Quantile(0.50), s.hist.Quantile(0.99)
	return s, firstErr
}
