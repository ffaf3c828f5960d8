package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
)

// demoKey is the one key the demo limits: every visitor shares it, as in
// the original token bucket demo, so two browsers (or two servers on one
// Redis) drain the same bucket.
const demoKey = "demo:request"

// maxBodyBytes bounds request bodies; a configuration is a few dozen bytes.
const maxBodyBytes = 16 << 10

// storeTimeout bounds each call to the store: long enough for a Redis
// across a network or under load, short enough that one that has stopped
// answering fails requests within a second rather than holding them (one
// that refuses connections fails them at once).
const storeTimeout = time.Second

//go:embed web
var webFiles embed.FS

// server is the demo's HTTP handler. The limiter is swapped whole when the
// configuration changes, so every request sees one consistent limiter.
type server struct {
	be      *backend
	store   ratekeeper.Store // be.store, its calls counted
	calls   *atomic.Int64    // the store's calls; nil if not counted
	logger  *slog.Logger
	handler http.Handler // mux, behind the cross-origin check
	mux     *http.ServeMux
	mu      sync.Mutex // serializes configuration changes
	current atomic.Pointer[limiter]
}

// limiter is one configuration and everything built from it.
type limiter struct {
	cfg  config
	lim  *ratekeeper.Limiter
	test http.Handler // POST /test, behind httplimit.Middleware
	job  http.Handler // POST /job, behind the same
	// decisions counts the requests of POST /test it decided, and
	// callsAt the store's calls when it was built: the page shows what
	// leases save.
	decisions atomic.Int64
	callsAt   int64
	pageCalls atomic.Int64 // the page's own: peeks and resets
}

func newServer(be *backend, cfg config, logger *slog.Logger) (*server, error) {
	s := &server{be: be, logger: logger, mux: http.NewServeMux()}
	s.store, s.calls = counting(be.store)
	l, err := s.build(cfg)
	if err != nil {
		return nil, err
	}
	s.current.Store(l)

	web, err := fs.Sub(webFiles, "web")
	if err != nil {
		return nil, err
	}
	static := http.StripPrefix("/static", http.FileServerFS(web))
	s.mux.Handle("/{$}", allow(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, web, "index.html")
	}), http.MethodGet))
	s.mux.Handle("/static/", allow(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No directory listings, and a JSON 404 like every other.
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		if st, err := fs.Stat(web, name); err != nil || st.IsDir() || !fs.ValidPath(name) {
			writeError(w, http.StatusNotFound, "not found: "+r.URL.Path)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	}), http.MethodGet))
	s.mux.Handle("/test", allow(http.HandlerFunc(s.handleTest), http.MethodPost))
	s.mux.Handle("/job", allow(http.HandlerFunc(s.handleJob), http.MethodPost))
	s.mux.Handle("/config", allow(http.HandlerFunc(s.handleConfig), http.MethodPost))
	s.mux.Handle("/algorithms", allow(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, algorithms)
	}), http.MethodGet))
	s.mux.Handle("/state", allow(http.HandlerFunc(s.handleState), http.MethodGet))
	s.mux.Handle("/reset", allow(http.HandlerFunc(s.handleReset), http.MethodPost))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not found: "+r.URL.Path)
	})
	// Browsers send any other site's form posts here too: refuse the
	// requests that change the policy or the key unless they come from
	// this page.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.logger.Warn(fmt.Sprintf("cross-origin %s %s refused", r.Method, r.URL.Path), "origin", r.Header.Get("Origin"))
		writeError(w, http.StatusForbidden, "cross-origin request refused: change the demo from its own page")
	}))
	s.handler = cop.Handler(s.mux)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	h := w.Header()
	// Everything the page needs comes from this server: nothing else may
	// load, not even by accident.
	h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.handler.ServeHTTP(w, r)
}

// allow answers 405 Method Not Allowed, with an Allow header, to methods
// other than the given ones (GET implies HEAD).
func allow(h http.Handler, methods ...string) http.Handler {
	if slices.Contains(methods, http.MethodGet) {
		methods = append(methods, http.MethodHead)
	}
	allowed := strings.Join(methods, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", allowed)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: use %s", r.Method, allowed))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// build makes the limiter of cfg, with its /test handler.
func (s *server) build(cfg config) (*limiter, error) {
	lim, err := newLimiter(s.store, cfg)
	if err != nil {
		return nil, err
	}
	l := &limiter{cfg: cfg, lim: lim}
	if s.calls != nil {
		l.callsAt = s.calls.Load()
	}
	reply := func(status int) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.decisions.Add(1)
			res, _ := httplimit.ResultFromContext(r.Context())
			writeJSON(w, status, testReply{Decision: newDecision(res), Config: cfg})
		})
	}
	limit := httplimit.Middleware(lim,
		httplimit.WithKeyFunc(func(*http.Request) (string, error) { return demoKey, nil }),
		httplimit.WithDeniedHandler(reply(http.StatusTooManyRequests)),
		httplimit.WithFailureHandler(func(w http.ResponseWriter, _ *http.Request, _ http.Handler, err error) {
			// A demo serving requests unlimited would show nothing: say
			// why. The middleware has logged the cause.
			writeError(w, http.StatusServiceUnavailable, s.storeDown())
		}),
		httplimit.WithLogger(s.logger),
		httplimit.WithStoreTimeout(storeTimeout),
	)
	l.test = limit(reply(http.StatusOK))
	l.job = limit(s.jobHandler(cfg))
	return l, nil
}

// Decision is a Result in the page's units: times in milliseconds. (It is
// exported only so that GET /state can embed it as a pointer.)
type Decision struct {
	Allowed      bool    `json:"allowed"`
	Remaining    float64 `json:"remaining"`
	Limit        int64   `json:"limit"`
	RetryAfterMs float64 `json:"retry_after_ms"`
	ResetAfterMs float64 `json:"reset_after_ms"`
}

func newDecision(res ratekeeper.Result) Decision {
	return Decision{
		Allowed:      res.Allowed,
		Remaining:    res.Remaining,
		Limit:        res.Limit,
		RetryAfterMs: ms(res.RetryAfter),
		ResetAfterMs: ms(res.ResetAfter),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// testReply is the body of POST /test: the original demo's allowed, remaining
// and config, and the rest of the Result.
type testReply struct {
	Decision
	Config config `json:"config"`
}

func (s *server) handleTest(w http.ResponseWriter, r *http.Request) {
	s.current.Load().test.ServeHTTP(w, r)
}

// stateReply is the body of GET /state. While the store fails it still
// tells the backend and the policy, with StoreOK false and no level.
type stateReply struct {
	*Decision
	WindowMs  float64 `json:"window_ms"`
	Backend   string  `json:"backend"`
	RedisAddr string  `json:"redis_addr,omitempty"`
	StoreOK   bool    `json:"store_ok"`
	Error     string  `json:"error,omitempty"`
	Algorithm string  `json:"algorithm"`
	Config    config  `json:"config"`
	// Decisions are the requests of POST /test decided under the
	// current policy, and StoreCalls the calls its limiter made to the
	// store meanwhile (-1 when not counted): with leases, far fewer.
	Decisions  int64 `json:"decisions"`
	StoreCalls int64 `json:"store_calls"`
}

func (s *server) handleState(w http.ResponseWriter, r *http.Request) {
	l := s.current.Load()
	reply := stateReply{
		WindowMs:   ms(l.lim.Spec().Window()),
		Backend:    s.be.kind,
		RedisAddr:  s.be.addr,
		Algorithm:  l.cfg.Algorithm,
		Config:     l.cfg,
		Decisions:  l.decisions.Load(),
		StoreCalls: -1,
	}
	if s.calls != nil {
		reply.StoreCalls = s.calls.Load() - l.callsAt - l.pageCalls.Load()
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	l.pageCalls.Add(1)
	res, err := l.lim.Peek(ctx, demoKey)
	if err != nil {
		reply.Error = s.storeFailure("peek", err)
		writeJSON(w, http.StatusServiceUnavailable, reply)
		return
	}
	d := newDecision(res)
	reply.Decision, reply.StoreOK = &d, true
	writeJSON(w, http.StatusOK, reply)
}

func (s *server) handleReset(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	l := s.current.Load()
	l.pageCalls.Add(1)
	if err := l.lim.Reset(ctx, demoKey); err != nil {
		s.storeFailed(w, "reset", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Success bool `json:"success"`
	}{true})
}

// configReply is the body of a successful POST /config.
type configReply struct {
	Success bool   `json:"success"`
	Config  config `json:"config"`
}

func (s *server) handleConfig(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooLarge.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	mediaType := ""
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mediaType, _, err = mime.ParseMediaType(ct); err != nil {
			writeError(w, http.StatusBadRequest, "malformed Content-Type: "+err.Error())
			return
		}
	}
	switch {
	case mediaType == "", mediaType == "application/x-www-form-urlencoded",
		mediaType == "application/json", strings.HasSuffix(mediaType, "+json"):
	default:
		writeError(w, http.StatusUnsupportedMediaType,
			fmt.Sprintf("unsupported Content-Type %q: send application/json or application/x-www-form-urlencoded", mediaType))
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.current.Load()
	l, err := s.parse(body, mediaType, old.cfg)
	if err != nil {
		var cerr *configError
		if errors.As(err, &cerr) {
			writeJSON(w, http.StatusBadRequest, errorReply{Error: cerr.msg, Field: cerr.field})
			return
		}
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if !l.cfg.equal(old.cfg) {
		s.current.Store(l)
		// The old limiter's leases go back once the requests still on it
		// are done.
		time.AfterFunc(storeTimeout, func() { old.lim.Close() })
		// A bucket drained under the old parameters would make the new
		// ones look wrong: start from full.
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		defer cancel()
		err := old.lim.Reset(ctx, demoKey)
		if err == nil && l.cfg.Algorithm != old.cfg.Algorithm {
			err = l.lim.Reset(ctx, demoKey)
		}
		if err != nil {
			msg := s.storeFailure("reset after a policy change", err)
			writeError(w, http.StatusServiceUnavailable, "The policy is applied, but the demo key could not be refilled: "+msg)
			return
		}
	}
	writeJSON(w, http.StatusOK, configReply{Success: true, Config: l.cfg})
}

func (s *server) parse(body []byte, mediaType string, cur config) (*limiter, error) {
	fields, err := decodeConfig(body, mediaType)
	if err != nil {
		return nil, err
	}
	cfg, err := parseConfig(fields, cur)
	if err != nil {
		return nil, err
	}
	if cfg.equal(cur) {
		return s.current.Load(), nil
	}
	return s.build(cfg)
}

// storeFailed answers 503 for a failed call to the store.
func (s *server) storeFailed(w http.ResponseWriter, op string, err error) {
	writeError(w, http.StatusServiceUnavailable, s.storeFailure(op, err))
}

// storeFailure logs a failed call to the store, and says in plain words
// what is down, for the page; the cause goes to the log only.
func (s *server) storeFailure(op string, err error) string {
	s.logger.Warn("store call failed", "op", op, "backend", s.be.kind, "err", err)
	return s.storeDown()
}

// storeDown says in plain words that the store is down.
func (s *server) storeDown() string {
	if s.be.kind == backendRedis {
		return fmt.Sprintf("Redis at %s is not answering, so no request can be decided until it is back.", s.be.addr)
	}
	return "The in-process store failed, so no request can be decided."
}
