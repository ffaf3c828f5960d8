package measure

import (
	"bufio"
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CmdStat is one command's line of INFO commandstats.
type CmdStat struct {
	Calls int64 // times the command ran
	Usec  int64 // microseconds it ran for, in all
}

// CommandStats reads INFO commandstats, keyed by lower-case command name
// ("evalsha", "config|resetstat").
func CommandStats(ctx context.Context, c *redis.Client) (map[string]CmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(info)
}

// ParseCommandStats reads the commandstats lines of an INFO reply, keyed
// by lower-case command name, and ignores the rest.
func ParseCommandStats(info string) (map[string]CmdStat, error) {
	stats := make(map[string]CmdStat)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var s CmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				s.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		stats[name] = s
	}
	return stats, sc.Err()
}

// CPUMicros returns the CPU time Redis's main thread has used, in
// microseconds: command execution plus reading, parsing and replying,
// which commandstats leaves out.
func CPUMicros(ctx context.Context, c *redis.Client) (float64, error) {
	fields, err := InfoNumbers(ctx, c, "cpu")
	if err != nil {
		return 0, err
	}
	return MainThreadCPU(fields), nil
}

// MainThreadCPU returns the CPU time of Redis's main thread, in
// microseconds, from the numbers of INFO cpu.
func MainThreadCPU(fields map[string]float64) float64 {
	user, okUser := fields["used_cpu_user_main_thread"]
	sys, okSys := fields["used_cpu_sys_main_thread"]
	if !okUser || !okSys {
		// Before Redis 6.2: the whole process.
		user, sys = fields["used_cpu_user"], fields["used_cpu_sys"]
	}
	return (user + sys) * 1e6
}

// InfoNumbers reads sections of INFO, such as "stats", and returns their
// numeric fields by name.
func InfoNumbers(ctx context.Context, c *redis.Client, sections ...string) (map[string]float64, error) {
	info, err := c.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	return ParseInfoNumbers(info)
}

// ParseInfoNumbers returns the numeric fields of an INFO reply by name.
func ParseInfoNumbers(info string) (map[string]float64, error) {
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
	return fields, sc.Err()
}

// RedisVersion returns the server's redis_version, or "unknown".
func RedisVersion(ctx context.Context, c *redis.Client) string {
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
