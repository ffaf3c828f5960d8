package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper/bench/internal/measure"
)

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-targets", "a=127.0.0.1:1, b=localhost:2", "-baseline", "b,a", "-conc", "1,8", "-keys", "50", "-conns", "2", "-pids", "b=42"}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.targets) != 2 || cfg.targets[1] != (target{"b", "localhost:2", 42}) || cfg.targets[0].pid != 0 ||
		strings.Join(cfg.baselines, ",") != "b,a" || len(cfg.conc) != 2 || cfg.conc[1] != 8 ||
		cfg.keys != 50 || cfg.conns != 2 || cfg.domain != "bench" || cfg.descs != 1 {
		t.Errorf("parseFlags = %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-addr", "127.0.0.1:8081"}, new(bytes.Buffer))
	if err != nil || len(cfg.targets) != 1 || cfg.baselines[0] != "rls" {
		t.Errorf("-addr: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"-h"}, new(bytes.Buffer)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	for _, args := range [][]string{
		{},
		{"-addr", "127.0.0.1:1", "-targets", "a=127.0.0.1:2"},
		{"-addr", "10.1.2.3:8081"},
		{"-targets", "a=127.0.0.1:1,a=127.0.0.1:2"},
		{"-targets", "a127.0.0.1:1"},
		{"-targets", "a=127.0.0.1:1", "-baseline", "b"},
		{"-addr", "127.0.0.1:1", "-redis", "192.0.2.1:6379"},
		{"-addr", "127.0.0.1:1", "-conc", "0"},
		{"-addr", "127.0.0.1:1", "-keys", "0"},
		{"-addr", "127.0.0.1:1", "-conns", "0"},
		{"-addr", "127.0.0.1:1", "-descs", "0"},
		{"-addr", "127.0.0.1:1", "-rounds", "0"},
		{"-addr", "127.0.0.1:1", "extra"},
		{"-addr", "127.0.0.1:1", "-pids", "other=1"},
		{"-addr", "127.0.0.1:1", "-pids", "rls=x"},
	} {
		if _, err := parseFlags(args, new(bytes.Buffer)); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

// runs makes samples of the given rates, one per round.
func runs(p99 time.Duration, reads float64, rates ...float64) []sample {
	ss := make([]sample, len(rates))
	for i, r := range rates {
		ss[i] = sample{calls: 1000, rate: r, p50: p99 / 2, p99: p99, overLimit: 10,
			redisCmds: 2 * reads * 1000, redisReads: reads * 1000, redisCPU: 15000, serviceCPU: -1, clientCPU: 40000,
			cmds: map[string]cmdDelta{"evalsha": {reads * 1000, 5000}}}
	}
	return ss
}

// TestReport checks the table's medians and ratios, which are medians of
// per-round ratios, and the goals.
func TestReport(t *testing.T) {
	cfg := config{
		targets:   []target{{name: "noop"}, {name: "envoy"}, {name: "envoy-best"}, {name: "ratekeeper"}},
		baselines: []string{"envoy-best", "noop"},
		conc:      []int{1, 128},
		redis:     "127.0.0.1:6379",
	}
	res := newResults(map[cell][]sample{
		{1, "noop"}:         runs(time.Millisecond, 0, 5000, 6000, 4000),
		{1, "envoy"}:        runs(time.Millisecond, 1, 2000, 2400, 1000),
		{1, "envoy-best"}:   runs(time.Millisecond, 1, 2500, 2000, 2000),
		{1, "ratekeeper"}:   runs(time.Millisecond, 1, 3500, 3600, 3000),
		{128, "noop"}:       runs(8*time.Millisecond, 0, 40000, 40000, 40000),
		{128, "envoy"}:      runs(20*time.Millisecond, 0.8, 15000, 15000, 15000),
		{128, "envoy-best"}: runs(20*time.Millisecond, 0.5, 14000, 14000, 14000),
		{128, "ratekeeper"}: runs(10*time.Millisecond, 0.1, 30000, 28000, 29000),
	})
	var out bytes.Buffer
	printTable(&out, cfg, res)
	printCommands(&out, cfg, res)
	printGoals(&out, cfg, res)
	got := out.String()
	for _, want := range []string{
		"| callers | service | decisions/s | × envoy-best | × noop | p50 µs | p99 µs | OVER_LIMIT | service CPU µs/call | Redis CPU µs/call | rlsload CPU µs/call | Redis commands/call | Redis reads/call | errors |",
		// Ratios 1.4, 1.8, 1.5 to envoy-best: median 1.5.
		"| 1 | ratekeeper | 3,500 | 1.50 | 0.70 | 500 | 1000 | 1.00% | - | 15.0 | 40.0 | 2.00 | 1.00 | 0 |",
		"| 1 | envoy-best | 2,000 | - | 0.50 | ",
		"| 128 | ratekeeper | 29,000 | 2.07 | 0.72 | 5000 | 10000 | 1.00% | - | 15.0 | 40.0 | 0.20 | 0.10 | 0 |",
		"| 128 | ratekeeper | EVALSHA 0.100 (5.0 µs) |",
		"| 1 | noop | none |",
		"| decisions/s at 128 callers ≥ 2× envoy-best, p99 no worse | 2.07×; p99 10000 µs vs 20000 µs | yes |",
		"| decisions/s at 128 callers ≥ 0.65× noop | 0.72× | yes |",
		// Against envoy: 1.75, 1.5, 3.0; against envoy-best: 1.4, 1.8,
		// 1.5: the smaller median.
		"| decisions/s at 1 caller ≥ 1.3× envoy's better setting | 1.50× | yes |",
		"| Redis round trips (reads) per RLS call ≤ 1, at every concurrency | 1.000 at most | yes |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no line with %q in\n%s", want, got)
		}
	}

	// Without the four targets, no goals.
	out.Reset()
	cfg.targets = cfg.targets[:3]
	printGoals(&out, cfg, res)
	if out.Len() != 0 {
		t.Errorf("goals without ratekeeper:\n%s", out.String())
	}
}

func TestRedisCountsSince(t *testing.T) {
	before := redisCounts{cmds: 100, reads: 50, cpu: 1000, perCmd: map[string]measure.CmdStat{"incrby": {Calls: 10, Usec: 7}, "info": {Calls: 5}}}
	after := redisCounts{cmds: 123, reads: 63, cpu: 1500, perCmd: map[string]measure.CmdStat{"incrby": {Calls: 20, Usec: 27}, "expire": {Calls: 10, Usec: 5}, "ping": {Calls: 2}, "info": {Calls: 6}}}
	cmds, reads, cpu, per := after.since(before)
	if cmds != 22 || reads != 10 || cpu != 500 || len(per) != 3 || per["incrby"] != (cmdDelta{10, 20}) || per["expire"] != (cmdDelta{10, 5}) {
		t.Errorf("since = %v, %v, %v, %v", cmds, reads, cpu, per)
	}
}

// overEvery answers OVER_LIMIT to every request for value "v0", and OK to
// the rest, with one status per descriptor.
type overEvery struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (overEvery) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, d := range req.GetDescriptors() {
		code := rlsv3.RateLimitResponse_OK
		if d.GetEntries()[0].GetValue() == "v0" {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = code
		}
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: code})
	}
	return resp, nil
}

// TestRun drives two in-process services briefly, end to end without
// Redis.
func TestRun(t *testing.T) {
	var targets []string
	for _, name := range []string{"a", "b"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(srv, overEvery{})
		go srv.Serve(lis)
		defer srv.Stop()
		targets = append(targets, name+"="+lis.Addr().String())
	}
	cfg, err := parseFlags([]string{"-targets", strings.Join(targets, ","), "-conc", "1,4", "-dur", "40ms",
		"-warmup", "0", "-rounds", "2", "-keys", "2", "-conns", "2", "-pids", "a=" + strconv.Itoa(os.Getpid())}, new(bytes.Buffer))
	if err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	if err := run(cfg, &out, &progress); err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	got := out.String()
	for _, want := range []string{"| 1 | a | ", "| 4 | b | ", "| × a |"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in\n%s", want, got)
		}
	}
	// Half the values are v0: about half the calls are OVER_LIMIT, none
	// is an error, and without -redis nothing is said of Redis.
	// Both services run in this process, whose CPU time a's row gives.
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "| 4 | a |") && strings.TrimSpace(strings.Split(line, "|")[8]) == "-" {
			t.Errorf("row %q: no service CPU time", line)
		}
		if !strings.HasPrefix(line, "| 4 | b |") {
			continue
		}
		f := strings.Split(line, "|")
		over, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(f[7]), "%"), 64)
		if errs, reads := strings.TrimSpace(f[13]), strings.TrimSpace(f[12]); err != nil || over < 20 || over > 80 || errs != "0" || reads != "-" {
			t.Errorf("row %q: OVER_LIMIT %v (%v), errors %s, reads %s", line, over, err, errs, reads)
		}
	}
}
