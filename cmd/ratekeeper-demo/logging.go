package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// repeatEvery is how often one message may be logged: while Redis is down,
// every request and every poll of every page fails the same way.
const repeatEvery = 10 * time.Second

// newLogger returns the demo's one logger: slog's text format on w, with
// repeated messages rate-limited.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(newRepeatHandler(slog.NewTextHandler(w, nil), repeatEvery, time.Now))
}

// repeatHandler passes the first record of each message, then drops the
// same message for a while, and counts what it dropped on the next one it
// passes.
type repeatHandler struct {
	next  slog.Handler
	state *repeatState // shared by the handlers WithAttrs and WithGroup derive
}

type repeatState struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	seen  map[string]*repeats
}

type repeats struct {
	last    time.Time // when the message was last passed
	dropped int       // since then
}

// maxMessages bounds the memory of messages seen; past it, it starts over.
const maxMessages = 1000

func newRepeatHandler(next slog.Handler, every time.Duration, now func() time.Time) *repeatHandler {
	return &repeatHandler{next: next, state: &repeatState{every: every, now: now, seen: make(map[string]*repeats)}}
}

// Enabled implements slog.Handler.
func (h *repeatHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle implements slog.Handler.
func (h *repeatHandler) Handle(ctx context.Context, r slog.Record) error {
	dropped, ok := h.state.admit(r.Level.String() + " " + r.Message)
	if !ok {
		return nil
	}
	if dropped > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("repeated", dropped))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *repeatHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &repeatHandler{next: h.next.WithAttrs(attrs), state: h.state}
}

// WithGroup implements slog.Handler.
func (h *repeatHandler) WithGroup(name string) slog.Handler {
	return &repeatHandler{next: h.next.WithGroup(name), state: h.state}
}

// admit reports whether a record of key may pass now, and how many were
// dropped since the last that did.
func (s *repeatState) admit(key string) (dropped int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := s.seen[key]
	if r == nil {
		if len(s.seen) >= maxMessages {
			clear(s.seen)
		}
		s.seen[key] = &repeats{last: now}
		return 0, true
	}
	if now.Sub(r.last) < s.every {
		r.dropped++
		return 0, false
	}
	dropped = r.dropped
	r.last, r.dropped = now, 0
	return dropped, true
}

// redisLogger routes go-redis's own log lines into the demo's logger. The
// message is the format with its verbs elided, so that repeats count as
// one however their arguments vary; the full line is its detail.
type redisLogger struct{ logger *slog.Logger }

var formatVerb = regexp.MustCompile(`%[-+# 0-9.*]*[a-zA-Z]`)

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	msg := formatVerb.ReplaceAllString(strings.TrimPrefix(format, "redis: "), "…")
	l.logger.WarnContext(ctx, "go-redis: "+msg, "detail", fmt.Sprintf(format, v...))
}
