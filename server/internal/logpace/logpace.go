// Package logpace paces the log lines of a recurring error: at most one
// a second, each counting the lines left out since the one before, so
// that an outage, or a failure per request, does not flood the log
// however much traffic there is.
package logpace

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Interval is the least time between two lines of one Pacer.
const Interval = time.Second

// NotLogged is the attribute that counts the lines a Pacer left out
// since the last one it wrote.
const NotLogged = "errors_not_logged"

// Pacer writes one kind of line at most once per Interval. The zero
// value is ready to use; it is safe for concurrent use.
type Pacer struct {
	mu      sync.Mutex
	last    time.Time
	written bool
	skipped int
}

// Log writes msg with args and NotLogged to logger at level, if no line
// was written in the Interval before now; otherwise it counts the line
// as left out.
func (p *Pacer) Log(logger *slog.Logger, level slog.Level, now time.Time, msg string, args ...any) {
	p.mu.Lock()
	if p.written && now.Sub(p.last) < Interval {
		p.skipped++
		p.mu.Unlock()
		return
	}
	skipped := p.skipped
	p.last, p.written, p.skipped = now, true, 0
	p.mu.Unlock()
	logger.Log(context.Background(), level, msg, append(args, NotLogged, skipped)...)
}
