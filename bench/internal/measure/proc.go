package measure

import "syscall"

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
