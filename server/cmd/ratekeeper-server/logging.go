package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
)

// newLogger logs at level ("debug", "info", "warn", "error", or envoy's
// logrus names: trace, warning, fatal, panic; any case) in format
// ("text" or "json").
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "trace", "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn", "warning":
		l = slog.LevelWarn
	case "error", "fatal", "panic":
		l = slog.LevelError
	default:
		return nil, fmt.Errorf("log level %q: debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// logIgnored logs, once, each of envoy's variables that is set and not
// needed, with why.
func logIgnored(logger *slog.Logger, ignored []envsettings.Ignored) {
	for _, ig := range ignored {
		logger.Info("environment: not needed, ignored", "variable", ig.Name, "why", ig.Why)
	}
}

// redisLogger routes go-redis's own log lines to the debug level.
type redisLogger struct{ logger *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
