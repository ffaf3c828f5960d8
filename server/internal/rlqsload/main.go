// Command rlqsload measures a rate limit quota service (RLQS) against the
// rate limit service (RLS) of the same server, at the same traffic: 8
// simulated Envoys (quotafilter) of demand 1:1:1:1:2:2:4:8, twice the
// rule's rate in all, share one global bucket; the first one's demand
// triples halfway. It reports the share of the rate admitted, the most
// admitted in any window against the rule's bound, how long the first
// Envoy's share took to follow its demand, and the service's CPU time per
// second of traffic, RLQS against one RLS call per request.
//
// scripts/bench-rlqs.sh runs it against ratekeeper-server on a Redis of
// its own.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekeeper/ratekeeper/internal/procstat"
	"github.com/ratekeeper/ratekeeper/server/internal/quotafilter"
)

func main() {
	addr := flag.String("addr", "", "the service's gRPC `address`")
	pid := flag.Int("pid", 0, "the service's process, for its CPU time")
	dur := flag.Duration("dur", 12*time.Second, "each run's length")
	rate := flag.Float64("rate", 10000, "the bucket's rate and burst, per second, as configured")
	interval := flag.Duration("interval", time.Second, "the Envoys' reporting_interval")
	tripleAt := flag.Duration("triple", 0, "when the first Envoy's demand triples (default: half the run); the Envoys report at whole intervals from the start, so a time just past one is the slowest to follow")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "rlqsload: -addr is required")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlqsload:", err)
		os.Exit(1)
	}
	defer conn.Close()
	weights := []float64{1, 1, 1, 1, 2, 2, 4, 8}
	triple := cmp.Or(*tripleAt, *dur/2)

	cpu0 := processCPU(*pid)
	q := runQuota(rlqsv3.NewRateLimitQuotaServiceClient(conn), weights, *rate, *dur, triple, *interval)
	quotaCPU := processCPU(*pid) - cpu0
	cpu0 = processCPU(*pid)
	calls, ok := runRLS(rlsv3.NewRateLimitServiceClient(conn), weights, *rate, *dur, triple)
	rlsCPU := processCPU(*pid) - cpu0

	secs := dur.Seconds()
	fmt.Printf("RLQS, %d Envoys, demand %.0f/s then %.0f/s, one bucket of %.0f/s (burst %.0f), %v:\n", len(weights), 2**rate, 2**rate*(1+2*weights[0]/sum(weights)), *rate, *rate, *dur)
	fmt.Printf("  admitted: %.1f%% of the rate (%.1f%% from 2 s on)\n", 100*float64(len(q.times))/(*rate*secs), 100*q.steady)
	fmt.Printf("  most admitted in any 1 s window: %d; past the bound (burst + rate × window) in any window: %d\n", q.window, q.excess)
	fmt.Printf("  Envoy 0's share, after its demand tripled at %v: %.0f/s, 90%% of it reached in %v (%.1f reporting intervals)\n",
		triple, q.final, q.follow.Round(time.Millisecond), q.follow.Seconds()/interval.Seconds())
	fmt.Printf("RLS, one call per request at the same demand: %d calls (%.0f/s), %d OK\n", calls, float64(calls)/secs, ok)
	if *pid > 0 {
		fmt.Printf("service CPU per second of traffic: RLQS %.0f µs, RLS %.0f µs: %.0f× less\n", quotaCPU/secs, rlsCPU/secs, rlsCPU/max(quotaCPU, 1))
	}
}

func sum(ws []float64) float64 {
	var s float64
	for _, w := range ws {
		s += w
	}
	return s
}

// demandOf is Envoy i's demand per second: d, tripled from triple on for
// Envoy 0.
func demandOf(i int, d float64, triple time.Time) func(time.Time) float64 {
	return func(now time.Time) float64 {
		if i == 0 && !now.Before(triple) {
			return 3 * d
		}
		return d
	}
}

type quotaRun struct {
	times  []time.Time
	steady float64
	window int
	excess int
	final  float64
	follow time.Duration
}

func runQuota(client rlqsv3.RateLimitQuotaServiceClient, weights []float64, rate float64, dur, triple time.Duration, interval time.Duration) quotaRun {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	begin := time.Now()
	var mu sync.Mutex
	var run quotaRun
	type assigned struct {
		at   time.Time
		rate float64
	}
	var first []assigned
	var wg sync.WaitGroup
	for i, w := range weights {
		f := quotafilter.New("api", map[string]string{"name": "global"}, interval)
		if i == 0 {
			f.OnAssign = func(at time.Time, r, _ float64) { mu.Lock(); first = append(first, assigned{at, r}); mu.Unlock() }
		}
		wg.Go(func() { f.Run(ctx, client) })
		demand := demandOf(i, 2*rate*w/sum(weights), begin.Add(triple))
		wg.Go(func() {
			quotafilter.Offer(ctx, uint64(i), demand, func(now time.Time) {
				if f.Admit(now) {
					mu.Lock()
					run.times = append(run.times, now)
					mu.Unlock()
				}
			})
		})
	}
	wg.Wait()
	slices.SortFunc(run.times, time.Time.Compare)
	run.excess, _ = quotafilter.PastTheBound(run.times, rate, begin)
	// The most in any 1 s window.
	var steady int
	for i, at := range run.times {
		j, _ := slices.BinarySearchFunc(run.times, at.Add(time.Second), time.Time.Compare)
		run.window = max(run.window, j-i)
		if at.Sub(begin) >= 2*time.Second {
			steady++
		}
	}
	run.steady = float64(steady) / (rate * (dur - 2*time.Second).Seconds())
	if len(first) > 0 {
		run.final = first[len(first)-1].rate
		at := begin.Add(triple)
		for j := len(first) - 1; j >= 0 && first[j].rate >= 0.9*run.final && first[j].at.After(at); j-- {
			run.follow = first[j].at.Sub(at)
		}
	}
	return run
}

func runRLS(client rlsv3.RateLimitServiceClient, weights []float64, rate float64, dur, triple time.Duration) (calls, ok int64) {
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	begin := time.Now()
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "name", Value: "global"}}}}}
	inflight := make(chan struct{}, 512)
	var n, allowed atomic.Int64
	var wg sync.WaitGroup
	for i, w := range weights {
		demand := demandOf(i, 2*rate*w/sum(weights), begin.Add(triple))
		wg.Go(func() {
			quotafilter.Offer(ctx, uint64(i), demand, func(time.Time) {
				select {
				case inflight <- struct{}{}:
				default:
					return // the service is behind: not offered
				}
				wg.Go(func() {
					defer func() { <-inflight }()
					resp, err := client.ShouldRateLimit(ctx, req)
					if err != nil {
						return
					}
					n.Add(1)
					if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
						allowed.Add(1)
					}
				})
			})
		})
	}
	wg.Wait()
	return n.Load(), allowed.Load()
}

// processCPU is pid's CPU time, user and system, in µs (Linux); 0
// without a pid or when /proc cannot tell.
func processCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	us, _ := procstat.CPU(pid)
	return us
}
