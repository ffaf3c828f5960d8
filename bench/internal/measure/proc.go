package measure

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// SelfCPU returns the CPU time this process has used, user and system, in
// microseconds: what a load generator costs the machine it shares with
// what it measures.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// clockTicks is the unit of /proc/PID/stat's CPU times, USER_HZ, which
// is 100 on every Linux architecture Go runs on.
const clockTicks = 100

// ProcessCPU returns the CPU time process pid has used, user and system,
// in microseconds, from /proc (Linux).
func ProcessCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime, fields 14 and 15 of a
// /proc/PID/stat line; the command name, field 2, is in parentheses and
// may hold spaces, so the count starts after its closing one.
func parseProcStat(stat string) (float64, error) {
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
