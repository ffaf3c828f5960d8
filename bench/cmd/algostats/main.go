// Command algostats measures what each ratekeeper algorithm costs in Redis,
// through redisstore with its default options (the server's clock):
//
//   - the memory of one caller's key (MEMORY USAGE … SAMPLES 0) after one
//     request and after Limit requests, averaged over several callers;
//   - the server time per decision: the usec of EVALSHA and EVAL in INFO
//     commandstats, which include the commands each script calls, divided
//     by the number of decisions. The decisions go to callers drawn from a
//     Zipf distribution, so a few hot callers are denied while most pass.
//
// The token bucket script of Redis's guide "Token bucket rate limiter with
// Redis and Rust" (a hash written with HMSET on every call, the client's
// clock, no expiry) is measured alongside as a baseline.
// Every policy grants -limit requests per minute (default 100). The timed
// part runs -runs times and the table gives the median. With -mode charge
// or refund, each timed decision is a Charge or a Refund of 1 instead.
// With -ops decide,charge,refund, algostats measures those operations of
// every algorithm side by side instead, and gives each one's server time
// per call and its ratio to a decision's (see ops.go).
//
// algostats runs CONFIG RESETSTAT and reads server-wide statistics, so give
// it a Redis of its own, for example from the repository root:
//
//	scripts/with-redis.sh sh -c 'cd bench && go run ./cmd/algostats'
//
// scripts/with-redis.sh starts a throwaway redis-server and sets
// RATEKEEPER_REDIS_ADDR, the default of -redis. algostats deletes the keys
// it wrote before it exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/seedscript"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// memCallers is how many callers the memory figures are averaged over.
const memCallers = 10

// The callers' popularity: caller k is drawn with a probability
// proportional to (zipfV+k)^-zipfS. With the default 20,000 decisions over
// 1,000 callers, 36 callers pass the limit and about a fifth of all
// decisions are denials.
const (
	zipfS = 1.1
	zipfV = 10
)

func main() {
	addr := flag.String("redis", os.Getenv("RATEKEEPER_REDIS_ADDR"), "address of a Redis used by nothing else (default $RATEKEEPER_REDIS_ADDR)")
	n := flag.Int("n", 20000, "decisions per algorithm and run")
	callers := flag.Int("callers", 1000, "distinct callers the decisions are spread over")
	runs := flag.Int("runs", 5, "timed runs; the table gives the median")
	limit := flag.Int("limit", 100, "requests per minute that every policy grants")
	flag.StringVar(&costMode, "mode", "take", "what each timed decision is: take (Allow), charge (Charge of 1) or refund (Refund of 1, after a Charge of 1 that is not timed)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("algostats: ")
	if *addr == "" {
		log.Fatal("no Redis: give -redis, or run under scripts/with-redis.sh")
	}
	if *n <= 0 || *callers <= 0 || *runs <= 0 || *limit <= 0 {
		log.Fatal("-n, -callers, -runs and -limit must be positive")
	}
	if _, ok := modes[costMode]; !ok {
		log.Fatalf("-mode %q: want take, charge or refund", costMode)
	}
	var ops []string
	var err error
	if *opsFlag != "" {
		if costMode != "take" {
			log.Fatal("-ops measures charges and refunds itself: give no -mode with it")
		}
		if *chunkFlag <= 0 {
			log.Fatal("-chunk must be positive")
		}
		if ops, err = parseOps(*opsFlag); err != nil {
			log.Fatal(err)
		}
	}
	// Redis counts usec in wall-clock time, which grows whenever the client
	// takes its core: kept to one core, the client leaves Redis the other.
	runtime.GOMAXPROCS(1)

	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	if *opsFlag == "" {
		err = run(ctx, rdb, *n, *callers, *runs, *limit)
	} else {
		err = runOps(ctx, rdb, ops, *n, *callers, *runs, *limit, *chunkFlag)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, rdb *redis.Client, n, numCallers, runs, limit int) error {
	server, err := rdb.InfoMap(ctx, "server").Result()
	if err != nil {
		return err
	}
	subjects, err := newSubjects(rdb, limit)
	if err != nil {
		return err
	}

	// Caller names have one length, so that key sizes are comparable.
	callers := make([]string, numCallers)
	for i := range callers {
		callers[i] = fmt.Sprintf("user:%07d", i)
	}
	memNames := make([]string, memCallers)
	for i := range memNames {
		memNames[i] = fmt.Sprintf("user:%07d", numCallers+i)
	}
	everyone := append(slices.Clone(callers), memNames...)
	defer func() {
		for _, s := range subjects {
			if err := deleteKeys(ctx, rdb, s, everyone); err != nil {
				log.Print(err)
			}
		}
	}()

	seq, hot := zipfSequence(n, numCallers, limit)

	rows := make([]row, len(subjects))
	for i, s := range subjects {
		rows[i].name = s.name
		if err := deleteKeys(ctx, rdb, s, memNames); err != nil {
			return err
		}
		if rows[i].mem1, rows[i].memLimit, err = measureMemory(ctx, rdb, s, memNames, limit); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	for k := range runs {
		for i, s := range subjects {
			c, err := measureCost(ctx, rdb, s, callers, seq)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			rows[i].usec = append(rows[i].usec, c.usec)
			rows[i].calls, rows[i].allowed = c.calls, c.allowed
			fmt.Fprintf(os.Stderr, "run %d: %-24s %6.2f µs/decision\n", k+1, s.name, c.usec)
		}
	}

	fmt.Printf("Redis %s, %d CPUs shared by client and server; limit %d per minute; "+
		"%d decisions over %d callers per run (%d callers make more than %d requests), median of %d runs.\n\n",
		server["Server"]["redis_version"], runtime.NumCPU(), limit, n, numCallers, hot, limit, runs)
	fmt.Printf("| Algorithm | Bytes per key after 1 request | after %d | Server µs per decision | min–max | redis.call per decision | Allowed |\n", limit)
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %.2f | %.2f–%.2f | %.2f | %.1f%% |\n",
			r.name, trim(r.mem1), trim(r.memLimit), median(r.usec), slices.Min(r.usec), slices.Max(r.usec),
			r.calls, 100*r.allowed)
	}
	return nil
}

// row is one algorithm's line of the table.
type row struct {
	name           string
	mem1, memLimit float64
	usec           []float64 // per run
	calls, allowed float64   // per decision, from the last run
}

// subject is one algorithm under measurement, as it runs in Redis.
type subject struct {
	name string
	// keys are the Redis keys that hold a caller's state.
	keys func(caller string) []string
	// allow decides one request of cost 1.
	allow func(ctx context.Context, caller string) (bool, error)
	// decide is the timed decision of -mode (allow if nil), and prepare,
	// if not nil, what comes before it, untimed.
	decide, prepare func(ctx context.Context, caller string) (bool, error)
	// load loads the script, so that every measured decision is an EVALSHA.
	load func(ctx context.Context) error
	// lim is the Limiter of a ratekeeper algorithm, nil for the guide's script.
	lim *ratekeeper.Limiter
}

func newSubjects(rdb *redis.Client, limit int) ([]subject, error) {
	store := redisstore.New(rdb)
	l := int64(limit)
	step := time.Minute / time.Duration(l)
	policies := []struct {
		name   string
		policy ratekeeper.Policy
	}{
		{fmt.Sprintf("Token bucket (1 per %v)", step), ratekeeper.TokenBucket{Capacity: l, RefillRate: 1, RefillInterval: step}},
		{"GCRA", ratekeeper.GCRA{Rate: l, Period: time.Minute, Burst: l}},
		{"Fixed window", ratekeeper.FixedWindow{Limit: l, Window: time.Minute}},
		{"Sliding window log", ratekeeper.SlidingWindowLog{Limit: l, Window: time.Minute}},
		{"Sliding window counter", ratekeeper.SlidingWindowCounter{Limit: l, Window: time.Minute}},
		{"Leaky bucket", ratekeeper.LeakyBucket{Capacity: l, LeakRate: float64(l) / 60}},
		// Two policies decided at once: a burst and a longer window.
		{"All: GCRA + fixed window", ratekeeper.All(
			ratekeeper.Named("burst", ratekeeper.GCRA{Rate: l, Period: time.Minute, Burst: l}),
			ratekeeper.Named("hour", ratekeeper.FixedWindow{Limit: 60 * l, Window: time.Hour}))},
	}
	var subjects []subject
	for _, p := range policies {
		lim, err := ratekeeper.New(store, p.policy)
		if err != nil {
			return nil, fmt.Errorf("-limit %d: %w", limit, err)
		}
		subjects = append(subjects, subject{
			name: p.name,
			keys: func(caller string) []string { return store.Keys(caller, lim.Spec()) },
			allow: func(ctx context.Context, caller string) (bool, error) {
				res, err := lim.Allow(ctx, caller)
				return res.Allowed, err
			},
			decide:  modes[costMode].decide(lim),
			prepare: modes[costMode].prepare(lim),
			load: func(ctx context.Context) error {
				_, err := lim.Peek(ctx, "user:warm-up")
				return err
			},
			lim: lim,
		})
	}
	if costMode != "take" {
		return subjects, nil // the guide's script has no charges
	}
	return append(subjects, guideSubject(rdb, limit)), nil
}

// guideScript is the guide's token bucket, measured as a baseline: a
// hash read with HMGET and written with HMSET on every call, allowed or
// not; the client's clock in seconds (ARGV[4]); no expiry.
var guideScript = redis.NewScript(seedscript.Source)

// guideSubject runs guideScript with the token bucket's parameters, on the
// caller's own name as the guide keys it ("user:0001000"), as loadgen's seed
// does, so that both programs measure the same hash.
func guideSubject(rdb *redis.Client, limit int) subject {
	key := func(caller string) string { return caller }
	interval := strconv.FormatFloat(60/float64(limit), 'f', -1, 64)
	return subject{
		name: "Redis guide's token bucket",
		keys: func(caller string) []string { return []string{key(caller)} },
		allow: func(ctx context.Context, caller string) (bool, error) {
			now := strconv.FormatFloat(float64(time.Now().UnixMicro())/1e6, 'f', 6, 64)
			v, err := guideScript.Run(ctx, rdb, []string{key(caller)}, limit, 1, interval, now).Int64Slice()
			if err != nil {
				return false, err
			}
			if len(v) != 2 {
				return false, fmt.Errorf("unexpected reply %v", v)
			}
			return v[0] == 1, nil
		},
		load: func(ctx context.Context) error { return guideScript.Load(ctx, rdb).Err() },
	}
}

// measureMemory returns the average MEMORY USAGE of the callers' keys after
// one request and after limit requests, all of which must be allowed.
func measureMemory(ctx context.Context, rdb *redis.Client, s subject, callers []string, limit int) (after1, afterLimit float64, err error) {
	for _, c := range callers {
		for i := range limit {
			ok, err := s.allow(ctx, c)
			if err != nil {
				return 0, 0, err
			}
			if !ok {
				return 0, 0, fmt.Errorf("request %d of %s denied while filling its key", i+1, c)
			}
			if i == 0 || i == limit-1 {
				for _, k := range s.keys(c) {
					bytes, err := rdb.MemoryUsage(ctx, k, 0).Result()
					if err != nil {
						return 0, 0, fmt.Errorf("MEMORY USAGE %s: %w", k, err)
					}
					if i == 0 {
						after1 += float64(bytes)
					} else {
						afterLimit += float64(bytes)
					}
				}
			}
		}
	}
	return after1 / float64(len(callers)), afterLimit / float64(len(callers)), nil
}

// zipfSequence draws n decisions' callers, the same for every algorithm
// and run, and counts the callers that make more than limit requests.
func zipfSequence(n, numCallers, limit int) (seq []int, hot int) {
	r := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(r, zipfS, zipfV, uint64(numCallers-1))
	seq = make([]int, n)
	perCaller := make([]int, numCallers)
	for i := range seq {
		seq[i] = int(zipf.Uint64())
		perCaller[seq[i]]++
	}
	for _, c := range perCaller {
		if c > limit {
			hot++
		}
	}
	return seq, hot
}

// deleteKeys deletes the callers' keys under s.
func deleteKeys(ctx context.Context, rdb *redis.Client, s subject, callers []string) error {
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range callers {
			p.Del(ctx, s.keys(c)...)
		}
		return nil
	})
	return err
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// trim formats an average of byte counts, without a fraction when whole.
func trim(x float64) string {
	return strconv.FormatFloat(x, 'f', -1, 64)
}
