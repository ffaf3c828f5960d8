// Ratekeeper-demo serves a web page for trying ratekeeper's algorithms. It
// limits one demo key that every visitor shares, shows the limiter's level
// live as it refills, and lets you change the policy, send single
// requests, bursts and steady streams, and read the rate limit headers of
// each answer.
//
// Usage:
//
//	ratekeeper-demo [-addr 127.0.0.1:8090] [-redis URL]
//
// The limits live in the Redis named by -redis or REDIS_URL (redis:// or
// rediss://, with a username and password if needed); the demo exits if
// that Redis cannot be reached. With neither, it tries
// redis://localhost:6379 and, if nothing answers there, keeps the limits
// in process. The listen address is -addr, else :$PORT (every interface,
// as platforms that set PORT expect), else 127.0.0.1:8090: loopback only,
// and beside ratekeeper-server, whose HTTP port is envoy's 8080.
//
// The HTTP API, compatible with the token bucket demo it grew from:
//
//	GET  /        the page
//	POST /test    one request against the limit: {"allowed", "remaining", "config", ...}, 200 or 429
//	POST /job     a job of cost=N, known when it is done: admitted as /test, then charged N (into debt if need be)
//	POST /config  change the policy (JSON or form): {"success", "config"} or 400 {"success":false, "error", "field"}
//	GET  /state   the current level, without consuming: remaining, limit, retry and reset times, backend
//	GET  /algorithms  each algorithm with its fields: name, label, hint, kind, range and default
//	POST /reset   refill the demo key
//
// POST /config changes the fields it names, of the current algorithm unless
// it names another. While the store is down, every call answers 503 with an
// error that says so; GET /state still gives the backend and the policy,
// with "store_ok": false. POST requests from other sites' pages are refused
// (403). The log is slog's text format on stderr, go-redis's lines
// included, each message at most once every 10 s.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // calendar windows' time zones, on a system without them

	"github.com/redis/go-redis/v9"
)

// Server timeouts: generous for a page and small JSON bodies, short enough
// that idle or stalled clients cannot hold connections for long.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 10 * time.Second
)

func main() {
	logger := newLogger(os.Stderr)
	// go-redis logs on its own (failed dials, closed connections): into the
	// same format, and with the same limit on repeats.
	redis.SetLogger(redisLogger{logger})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, logger)
	stop()
	if err != nil {
		logger.Error(err.Error())
		os.Exit(1)
	}
}

// run serves the demo until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, logger *slog.Logger) error {
	flags := flag.NewFlagSet("ratekeeper-demo", flag.ContinueOnError)
	addr := flags.String("addr", "", "listen `address` (default :$PORT, or "+defaultAddr+")")
	// No default from REDIS_URL here: -h would print its password.
	redisURL := flags.String("redis", "", "Redis `URL`, such as redis://user:password@host:6379/0 or rediss://... (default $REDIS_URL)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flags.Args())
	}
	if *addr == "" {
		*addr = defaultAddr
		if port := getenv("PORT"); port != "" {
			*addr = ":" + port
		}
	}
	if *redisURL == "" {
		*redisURL = getenv("REDIS_URL")
	}

	be, err := connect(ctx, *redisURL, defaultRedisURL, logger)
	if err != nil {
		return err
	}
	defer be.close()
	if be.kind == backendRedis {
		logger.Info("limits kept in Redis", "addr", be.addr)
	}
	srv, err := newServer(be, defaultConfig(), logger)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	logger.Info("serving on "+pageURL(ln.Addr()), "listen", listening(ln.Addr()))
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// defaultAddr is where the demo listens unless told: loopback only, since
// it is a toy that anyone who reaches it may reconfigure.
const defaultAddr = "127.0.0.1:8090"

// listening says exactly what a listener accepts: its address, and
// whether that is every interface.
func listening(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return a.String() + " (every interface)"
	}
	return a.String()
}

// pageURL is the address to open in a browser.
func pageURL(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		_, port, _ := net.SplitHostPort(a.String())
		return "http://localhost:" + port
	}
	return "http://" + tcp.String()
}

// errorReply is the body of every error: the original token bucket demo's
// shape, with the field at fault when there is one.
type errorReply struct {
	Success bool   `json:"success"`
	Error   string `json:"error"`
	Field   string `json:"field,omitempty"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorReply{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // an error here means the client has gone
}
