package ratekeeper

import "time"

// SetLeaseClock makes l's leases read their holder's time from now, for
// tests of a holder whose clock disagrees with the store's.
func SetLeaseClock(l *Limiter, now func() time.Time) {
	l.leases.mu.Lock()
	l.leases.now = now
	l.leases.mu.Unlock()
}

// LeasedKeys returns how many keys hold a lease of l's.
func LeasedKeys(l *Limiter) int {
	l.leases.mu.Lock()
	defer l.leases.mu.Unlock()
	return len(l.leases.keys)
}
