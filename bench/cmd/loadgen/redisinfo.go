package main

import (
	"bufio"
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct {
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats, keyed by lower-case command name
// ("evalsha", "config|resetstat").
func commandStats(ctx context.Context, c *redis.Client) (map[string]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := make(map[string]cmdStat)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var s cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[name] = s
	}
	return stats, sc.Err()
}

// serverTime returns the usec and the number of calls of a library's own
// commands in stats; see lib.cmds and lib.nested.
func serverTime(l lib, stats map[string]cmdStat) (usec float64, calls int64) {
	for _, name := range l.cmds {
		s := stats[name]
		u, n := float64(s.usec), s.calls
		if script, ok := l.nested[name]; ok && n > 0 {
			// Take out the script's own calls at the average cost per call.
			inner := min(stats[script].calls, n)
			u -= u * float64(inner) / float64(n)
			n -= inner
		}
		usec += u
		calls += n
	}
	return usec, calls
}

// cpuMicros returns the CPU time Redis's main thread has used, in
// microseconds: command execution plus reading, parsing and replying,
// which commandstats leaves out.
func cpuMicros(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	fields := make(map[string]float64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			fields[k] = f
		}
	}
	user, okUser := fields["used_cpu_user_main_thread"]
	sys, okSys := fields["used_cpu_sys_main_thread"]
	if !okUser || !okSys {
		// Before Redis 6.2: the whole process.
		user, sys = fields["used_cpu_user"], fields["used_cpu_sys"]
	}
	return (user + sys) * 1e6, sc.Err()
}

// redisVersion returns the server's redis_version.
func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
