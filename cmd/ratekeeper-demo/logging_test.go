package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// TestRepeatHandler checks that a message repeated within the interval is
// logged once, and that the next one past it counts what was dropped.
func TestRepeatHandler(t *testing.T) {
	var buf bytes.Buffer
	clock := testutil.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newRepeatHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}), 10*time.Second, clock.Now)
	logger := slog.New(h).With("component", "test")
	for range 5 {
		logger.Warn("store call failed", "op", "peek")
		logger.Info("another message")
		clock.Advance(time.Second)
	}
	clock.Advance(10 * time.Second)
	logger.Warn("store call failed", "op", "decide")
	want := `level=WARN msg="store call failed" component=test op=peek
level=INFO msg="another message" component=test
level=WARN msg="store call failed" component=test op=decide repeated=4
`
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// TestRedisLogger checks that go-redis's lines come out in slog's format,
// their repeats counted as one message whatever their arguments.
func TestRedisLogger(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{newLogger(&buf)}
	for port := range 3 {
		l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, port)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "time=") ||
		!strings.Contains(lines[0], `level=WARN msg="go-redis: connection pool: failed to dial after … attempts: …" detail="redis: connection pool: failed to dial after 5 attempts: 0"`) {
		t.Errorf("log:\n%s", buf.String())
	}
}
