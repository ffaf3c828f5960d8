package conformance

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// A raceCase is a race of many requests of one cost on one fresh key, on
// the real clock: it admits exactly allowed requests and leaves exactly
// remaining, whoever wins. The policy must not refill during a test.
type raceCase struct {
	name      string
	policy    ratekeeper.Policy
	cost      int64
	allowed   int
	remaining float64
}

var raceCases = []raceCase{
	{"tb10_1per1h_cost1", ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Hour}, 1, 10, 0},
	// 3 requests take 9 tokens; the 10th token is never enough.
	{"tb10_1per1h_cost3", ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Hour}, 3, 3, 1},
	{"gcra1per1h_b10_cost1", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 10}, 1, 10, 0},
	{"gcra1per1h_b10_cost3", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 10}, 3, 3, 1},
	{"fw10per1h_cost1", ratekeeper.FixedWindow{Limit: 10, Window: time.Hour}, 1, 10, 0},
	{"fw10per1h_cost3", ratekeeper.FixedWindow{Limit: 10, Window: time.Hour}, 3, 3, 1},
	{"swl10per1h_cost1", ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Hour}, 1, 10, 0},
	{"swl10per1h_cost3", ratekeeper.SlidingWindowLog{Limit: 10, Window: time.Hour}, 3, 3, 1},
	// Windows are aligned to the hour: a race across the boundary still
	// admits 10, as the previous window's weight rounds up.
	{"swc10per1h_cost1", ratekeeper.SlidingWindowCounter{Limit: 10, Window: time.Hour}, 1, 10, 0},
	{"swc10per1h_cost3", ratekeeper.SlidingWindowCounter{Limit: 10, Window: time.Hour}, 3, 3, 1},
	// Several policies: the first binds, then the tighter of the two
	// (the hour leaves 1, the day 16), then the second.
	{"all_fw10_gcra20_cost1", ratekeeper.All(ratekeeper.FixedWindow{Limit: 10, Window: time.Hour},
		ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 20}), 1, 10, 0},
	{"all_hour10_day25_cost3", ratekeeper.All(
		ratekeeper.Named("hour", ratekeeper.FixedWindow{Limit: 10, Window: time.Hour}),
		ratekeeper.Named("day", ratekeeper.SlidingWindowLog{Limit: 25, Window: 24 * time.Hour})), 3, 3, 1},
	{"all_tb20_swc7_cost1", ratekeeper.All(ratekeeper.TokenBucket{Capacity: 20, RefillRate: 1, RefillInterval: time.Hour},
		ratekeeper.SlidingWindowCounter{Limit: 7, Window: time.Hour}), 1, 7, 0},
	// The leaky bucket drains all along, which Remaining shows: it races
	// in TestLeakyBucketConcurrentDecisions.
}

const raceTimeout = 30 * time.Second

// race releases goroutines all at once, each making one request of cost
// through lims[i%len(lims)], and returns how many were allowed and denied.
// Any error fails t.
func race(t *testing.T, lims []*ratekeeper.Limiter, goroutines int, key string, cost int64) (allowed, denied int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), raceTimeout)
	defer cancel()
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range goroutines {
		wg.Go(func() {
			<-release
			res, err := lims[i%len(lims)].AllowN(ctx, key, cost)
			switch {
			case err != nil:
				t.Errorf("AllowN(%d): %v", cost, err)
			case res.Allowed:
				admitted.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	close(release)
	wg.Wait()
	return int(admitted.Load()), int(refused.Load())
}

// checkRemaining peeks at key after a race.
func checkRemaining(t *testing.T, lim *ratekeeper.Limiter, key string, want float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := lim.Peek(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remaining != want {
		t.Errorf("%v remaining after the race, want %v", res.Remaining, want)
	}
}

func TestConcurrentDecisions(t *testing.T) {
	for _, tc := range raceCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("memstore", func(t *testing.T) {
				store := memstore.New()
				defer store.Close()
				lim := newLimiter(t, store, tc.policy)
				if allowed, denied := race(t, []*ratekeeper.Limiter{lim}, 1000, "k", tc.cost); allowed != tc.allowed || denied != 1000-tc.allowed {
					t.Errorf("of 1000 requests, %d allowed and %d denied; want %d allowed", allowed, denied, tc.allowed)
				}
				checkRemaining(t, lim, "k", tc.remaining)
			})
			t.Run("redis", func(t *testing.T) {
				addr, prefix := redistest.Addr(t), redistest.Prefix(t)
				// Separate clients: separate connections, interleaved by the server.
				var lims []*ratekeeper.Limiter
				for range 4 {
					client := redis.NewClient(&redis.Options{Addr: addr})
					t.Cleanup(func() { client.Close() })
					lims = append(lims, newLimiter(t, redisstore.New(client, redisstore.WithKeyPrefix(prefix)), tc.policy))
				}
				forget(t, lims[0], "k")
				if allowed, denied := race(t, lims, 200, "k", tc.cost); allowed != tc.allowed || denied != 200-tc.allowed {
					t.Errorf("of 200 requests, %d allowed and %d denied; want %d allowed", allowed, denied, tc.allowed)
				}
				checkRemaining(t, lims[0], "k", tc.remaining)
			})
		})
	}
}

// Environment of the child processes of TestMultiProcess.
const (
	envChildCase   = "RATEKEEPER_CONFORMANCE_CHILD_CASE"
	envChildPrefix = "RATEKEEPER_CONFORMANCE_CHILD_PREFIX"
)

const (
	processes          = 4
	goroutinesPerChild = 50
)

// TestMultiProcess races several processes, each with its own
// connections, on one Redis key: between them they admit exactly what the
// policy allows.
func TestMultiProcess(t *testing.T) {
	redistest.Addr(t)
	for _, tc := range raceCases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := redistest.Prefix(t)
			client := redistest.Client(t)
			lim := newLimiter(t, redisstore.New(client, redisstore.WithKeyPrefix(prefix)), tc.policy)
			forget(t, lim, "k")

			ctx, cancel := context.WithTimeout(context.Background(), raceTimeout)
			defer cancel()
			children := make([]*child, processes)
			for i := range children {
				children[i] = startChild(ctx, t, tc.name, prefix)
			}
			// Release them together, once all are connected: the end of
			// their stdin is the signal.
			for _, c := range children {
				c.waitFor("ready")
			}
			for _, c := range children {
				c.stdin.Close()
			}
			total := 0
			for _, c := range children {
				total += c.allowed()
			}
			if total != tc.allowed {
				t.Errorf("%d processes of %d goroutines allowed %d in all, want %d",
					processes, goroutinesPerChild, total, tc.allowed)
			}
			checkRemaining(t, lim, "k", tc.remaining)
		})
	}
}

// child is a running copy of the test binary, in TestMultiProcessChild.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Scanner
	lines  []string     // its stdout so far
	stderr bytes.Buffer // written by exec until Wait returns
}

func startChild(ctx context.Context, t *testing.T, caseName, prefix string) *child {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcessChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildCase+"="+caseName, envChildPrefix+"="+prefix)
	c := &child{t: t, cmd: cmd}
	cmd.Stderr = &c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Reap it whatever happens; by then the context has ended, which
	// kills it if it still runs.
	t.Cleanup(func() { cmd.Wait() })
	c.stdin, c.stdout = stdin, bufio.NewScanner(stdout)
	return c
}

// waitFor reads the child's stdout up to a line with the given prefix,
// and returns the rest of that line.
func (c *child) waitFor(prefix string) string {
	c.t.Helper()
	for c.stdout.Scan() {
		line := c.stdout.Text()
		c.lines = append(c.lines, line)
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	c.fatal(fmt.Sprintf("ended before writing %q", prefix))
	return ""
}

// allowed returns the count the child reports, once it has exited well.
func (c *child) allowed() int {
	c.t.Helper()
	n, err := strconv.Atoi(c.waitFor("allowed "))
	if err != nil {
		c.fatal(err.Error())
	}
	for c.stdout.Scan() {
		c.lines = append(c.lines, c.stdout.Text())
	}
	if err := c.cmd.Wait(); err != nil {
		c.t.Fatalf("child process: %v\n%s", err, c.output())
	}
	return n
}

// fatal ends the child and fails the test with all that the child wrote.
func (c *child) fatal(msg string) {
	c.t.Helper()
	c.stdin.Close()
	for c.stdout.Scan() {
		c.lines = append(c.lines, c.stdout.Text())
	}
	err := c.cmd.Wait()
	c.t.Fatalf("child process: %s (exit: %v)\n%s", msg, err, c.output())
}

// output is what the child wrote; call it only after Wait.
func (c *child) output() string {
	return "stdout:\n" + strings.Join(c.lines, "\n") + "\nstderr:\n" + c.stderr.String()
}

// TestMultiProcessChild is one of TestMultiProcess's child processes: it
// says "ready", waits for the end of its stdin, races its goroutines, and
// writes how many were allowed.
func TestMultiProcessChild(t *testing.T) {
	name := os.Getenv(envChildCase)
	if name == "" {
		t.Skip("run by TestMultiProcess in its child processes")
	}
	i := slices.IndexFunc(raceCases, func(tc raceCase) bool { return tc.name == name })
	if i < 0 {
		t.Fatalf("no race case %q", name)
	}
	tc := raceCases[i]
	client := redistest.Client(t) // connects, so that "ready" means it
	lim := newLimiter(t, redisstore.New(client, redisstore.WithKeyPrefix(os.Getenv(envChildPrefix))), tc.policy)
	fmt.Println("ready")
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		t.Fatal(err)
	}
	allowed, _ := race(t, []*ratekeeper.Limiter{lim}, goroutinesPerChild, "k", tc.cost)
	fmt.Println("allowed", allowed)
}
