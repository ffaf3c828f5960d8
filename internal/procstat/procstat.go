// Package procstat reads a process's CPU time from /proc (Linux), for
// the benchmarks that measure a server from outside it.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is the unit of /proc/PID/stat's CPU times, USER_HZ, which
// is 100 on every Linux architecture Go runs on.
const clockTicks = 100

// CPU returns the CPU time process pid has used, user and system, in
// microseconds.
func CPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parse(string(b))
}

// parse reads utime and stime, fields 14 and 15 of a /proc/PID/stat
// line; the command name, field 2, is in parentheses and may hold
// spaces, so the count starts after its closing one.
func parse(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // from field 3 on
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	return (utime + stime) * 1e6 / clockTicks, nil
}
