package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

func TestMain(m *testing.M) {
	// The tests break Redis on purpose: go-redis would log every failed
	// dial, and bury the failures of a test in noise.
	redis.SetLogger(discardLogger{})
	os.Exit(redistest.Run(m))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

var quiet = slog.New(slog.DiscardHandler)

// margin is how much later than its deadline a call may return: generous,
// for a loaded machine under the race detector, where a hang would take
// seconds.
const margin = time.Second

// policies returns one policy per algorithm, each admitting limit
// requests at once and refilling so slowly that nothing comes back during
// a test.
func policies(limit int64) []ratekeeper.Policy {
	return []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: limit, RefillRate: 1, RefillInterval: time.Hour},
		ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: limit},
		ratekeeper.FixedWindow{Limit: limit, Window: time.Hour},
		ratekeeper.SlidingWindowLog{Limit: limit, Window: time.Hour},
		ratekeeper.SlidingWindowCounter{Limit: limit, Window: time.Hour},
		ratekeeper.LeakyBucket{Capacity: limit, LeakRate: 0.001},
	}
}

func newLimiter(t testing.TB, store ratekeeper.Store, p ratekeeper.Policy) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// served marks the responses of the handler behind the middleware, to
// tell a request served without a decision from one the middleware
// dropped.
var served = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Served", "yes")
	w.WriteHeader(http.StatusOK)
})

// An answer is how the middleware answered a request.
type answer int

const (
	decided    answer = iota // a decision: served (200) or denied (429), with RateLimit fields
	failedOpen               // served without a decision
	failedShut               // 503 without a decision
	otherAnswer
)

func classify(w *httptest.ResponseRecorder) answer {
	decision := w.Header().Get("RateLimit") != ""
	reached := w.Header().Get("X-Served") != ""
	switch {
	case decision && (w.Code == http.StatusOK && reached || w.Code == http.StatusTooManyRequests && !reached):
		return decided
	case !decision && w.Code == http.StatusOK && reached:
		return failedOpen
	case !decision && w.Code == http.StatusServiceUnavailable && !reached:
		return failedShut
	}
	return otherAnswer
}

// serve sends one request from a client of its own through h, with a
// context that outlives the store timeout: the middleware must answer it.
func serve(h http.Handler, client int) (*httptest.ResponseRecorder, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.RemoteAddr = net.JoinHostPort(fmt.Sprintf("198.51.100.%d", client%250+1), "4321")
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	return w, time.Since(start)
}

// isTimeout reports whether err says a call ran out of time: its
// context's deadline, or go-redis's timeout on the connection when it
// follows context deadlines.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// checkGoroutines waits for the number of goroutines to come back to
// within slack of baseline, and prints them all if it does not.
func checkGoroutines(t *testing.T, baseline int) {
	t.Helper()
	const slack = 2
	var n int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= baseline+slack {
			return
		}
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Errorf("%d goroutines 5 s after the load stopped, %d before it started:\n%s", n, baseline, buf)
}

// A loadKind is one of the three ways the load calls the limiter.
type loadKind int

const (
	httpOpen loadKind = iota
	httpClosed
	direct
	kinds
)

func (k loadKind) String() string {
	return [...]string{"FailOpen middleware", "FailClosed middleware", "direct Allow"}[k]
}

// A sample is one call of the load.
type sample struct {
	kind       loadKind
	start, end time.Time
	ok         bool   // a decision was made
	failed     bool   // the expected answer to a failure
	err        error  // a direct call's
	unexpected string // neither: what happened
}

// pingUntilUp PINGs Redis through client until it answers, and returns
// when it first did, or the zero time after 5 s. go-redis's pool, after
// PoolSize failed dials, dials again only once a second: this is when the
// client itself works again.
func pingUntilUp(client *redis.Client) time.Time {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return time.Now()
		}
	}
	return time.Time{}
}

// TestRedisKilledUnderLoad kills Redis under load from the middleware,
// failing open and closed, and from direct calls; then restarts it empty.
func TestRedisKilledUnderLoad(t *testing.T) {
	for _, pipelining := range []bool{true, false} {
		t.Run("pipelining="+strconv.FormatBool(pipelining), func(t *testing.T) {
			killUnderLoad(t, pipelining)
		})
	}
}

func killUnderLoad(t *testing.T, pipelining bool) {
	const (
		storeTimeout = 200 * time.Millisecond // the middleware's
		callTimeout  = 200 * time.Millisecond // the direct calls' contexts
		outage       = time.Second
		workers      = 32
	)
	srv := redistest.StartServer(t)
	baseline := runtime.NumGoroutine()
	client := redis.NewClient(&redis.Options{
		Addr: srv.Addr,
		// Short timeouts, so that calls abandoned by their callers end
		// soon.
		DialTimeout:  100 * time.Millisecond,
		ReadTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { client.Close() })
	// Generous enough that denials are rare; a denial is a decision too.
	lim := newLimiter(t, redisstore.New(client, redisstore.WithAutoPipelining(pipelining)),
		ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
	handlers := [...]http.Handler{
		httpOpen: httplimit.Middleware(lim, httplimit.FailOpen,
			httplimit.WithStoreTimeout(storeTimeout), httplimit.WithLogger(quiet))(served),
		httpClosed: httplimit.Middleware(lim, httplimit.FailClosed,
			httplimit.WithStoreTimeout(storeTimeout), httplimit.WithLogger(quiet))(served),
	}
	call := func(kind loadKind, worker int) sample {
		s := sample{kind: kind, start: time.Now()}
		if kind == direct {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_, err := lim.Allow(ctx, "direct"+strconv.Itoa(worker))
			cancel()
			s.end = time.Now()
			s.ok, s.failed, s.err = err == nil, err != nil, err
			return s
		}
		w, _ := serve(handlers[kind], worker)
		s.end = time.Now()
		switch classify(w) {
		case decided:
			s.ok = true
		case failedOpen:
			s.failed = kind == httpOpen
		case failedShut:
			s.failed = kind == httpClosed
		}
		if !s.ok && !s.failed {
			s.unexpected = fmt.Sprintf("status %d, RateLimit %q, served %t",
				w.Code, w.Header().Get("RateLimit"), w.Header().Get("X-Served") != "")
		}
		return s
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	samples := make([][]sample, workers)
	decisions := make([]atomic.Int64, workers)
	for i := range workers {
		wg.Go(func() {
			kind := loadKind(i % int(kinds))
			for !stop.Load() {
				s := call(kind, i)
				if s.ok {
					decisions[i].Add(1)
				}
				samples[i] = append(samples[i], s)
				time.Sleep(time.Millisecond)
			}
		})
	}

	// Load for 300 ms, and until every worker has made a decision (a
	// machine busy with other tests may take longer to start them all).
	time.Sleep(300 * time.Millisecond)
	allDecided := func() bool {
		for i := range decisions {
			if decisions[i].Load() == 0 {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !allDecided() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	killed := time.Now()
	srv.Stop()
	down := time.Now() // the process is gone, and its port closed
	time.Sleep(outage)
	up := time.Now()
	srv.Restart()
	back := time.Now() // Redis answers again
	clientUp := make(chan time.Time, 1)
	go func() { clientUp <- pingUntilUp(client) }()
	// Poll for the first decision made once Redis is back.
	var recovered time.Time
	for {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := lim.Allow(ctx, "probe")
		cancel()
		if err == nil {
			recovered = time.Now()
			break
		}
		if time.Since(back) > 5*time.Second {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("no decision 5 s after Redis came back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	// After PoolSize failed dials, go-redis stops dialing and tries once
	// a second, which alone may hold decisions back for a second: the
	// limiter's recovery counts from Redis's return or the client's first
	// answer since (a PING through the client's pool), whichever is later.
	reconnected := <-clientUp
	if reconnected.Before(back) {
		reconnected = back
	}
	recovery := recovered.Sub(reconnected)
	if recovery >= time.Second {
		t.Errorf("the first decision came %v after Redis was back and the client reconnected, want < 1 s", recovery)
	}
	var all []sample
	for _, s := range samples {
		all = append(all, s...)
	}
	var before, during, after, afterFailed [kinds]int
	var slowest [kinds]time.Duration
	reported := 0
	report := func(format string, args ...any) {
		if reported++; reported <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, s := range all {
		elapsed := s.end.Sub(s.start)
		slowest[s.kind] = max(slowest[s.kind], elapsed)
		bound := storeTimeout + margin
		if s.kind == direct {
			bound = callTimeout + margin
		}
		if elapsed > bound {
			report("%v at %v: returned after %v, beyond its deadline + %v", s.kind, s.start.Sub(killed), elapsed, margin)
		}
		if s.unexpected != "" {
			report("%v at %v: unexpected answer: %s", s.kind, s.start.Sub(killed), s.unexpected)
		}
		switch {
		case s.end.Before(killed) && s.ok:
			before[s.kind]++
		case s.start.After(down) && s.end.Before(up):
			// Redis is down from start to end: nothing can decide.
			if s.ok {
				report("%v at %v: a decision while Redis was down", s.kind, s.start.Sub(killed))
			}
			during[s.kind]++
		case s.start.After(recovered):
			if s.ok {
				after[s.kind]++
			} else {
				// Redis is back: a call may still run out of time on a
				// loaded machine, but nothing else may go wrong.
				afterFailed[s.kind]++
				if s.err != nil && !isTimeout(s.err) {
					report("%v at %v, %v after decisions resumed: %v",
						s.kind, s.start.Sub(killed), s.start.Sub(recovered), s.err)
				}
			}
		}
	}
	for k := range kinds {
		t.Logf("%v: %d decisions before the kill, %d failures while down, %d decisions and %d failures after recovery; slowest %v",
			k, before[k], during[k], after[k], afterFailed[k], slowest[k])
		if before[k] == 0 || during[k] == 0 || after[k] == 0 {
			t.Errorf("%v: %d decisions before the kill, %d calls while down, %d decisions after recovery; want some of each",
				k, before[k], during[k], after[k])
		}
	}
	t.Logf("%d calls; first decision %v after Redis was back, %v after the client reconnected",
		len(all), recovered.Sub(back), recovery)

	client.Close()
	checkGoroutines(t, baseline)
}

// TestScriptFlushUnderLoad flushes the script cache every few
// milliseconds while goroutines decide with every algorithm, with and
// without auto-pipelining: a script reloads without an error, and runs
// exactly once per decision, so each key admits exactly its limit.
func TestScriptFlushUnderLoad(t *testing.T) {
	const (
		limit    = 50
		maxKeys  = 10_000 // per algorithm, far more than 2 s can exhaust
		duration = 2 * time.Second
		perStore = 2 // goroutines per algorithm and store
	)
	srv := redistest.StartServer(t)
	client := srv.Client()
	stores := []*redisstore.Store{
		redisstore.New(client),
		redisstore.New(client, redisstore.WithAutoPipelining(false)),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The goroutines of an algorithm decide on one key until it denies,
	// then move on to the next: admissions go on for the whole run,
	// between and during flushes, whatever the pace of each algorithm.
	type tally struct {
		current         atomic.Int64 // the key being exhausted
		allowed, denied [maxKeys]atomic.Int64
	}
	pols := policies(limit)
	tallies := make([]tally, len(pols))
	var errs atomic.Int64
	var wg sync.WaitGroup
	begin := time.Now()
	for i, p := range pols {
		tl := &tallies[i]
		for _, store := range stores {
			lim := newLimiter(t, store, p)
			for range perStore {
				wg.Go(func() {
					for time.Since(begin) < duration {
						k := tl.current.Load()
						if k == maxKeys {
							return
						}
						res, err := lim.Allow(ctx, "k"+strconv.FormatInt(k, 10))
						switch {
						case err != nil:
							if errs.Add(1) <= 5 {
								t.Errorf("%s: %v", lim.Spec().Algorithm(), err)
							}
						case res.Allowed:
							tl.allowed[k].Add(1)
						default:
							tl.denied[k].Add(1)
							tl.current.CompareAndSwap(k, k+1)
						}
					}
				})
			}
		}
	}
	flushes := 0
	for time.Since(begin) < duration {
		if err := client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		flushes++
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()

	if n := errs.Load(); n > 0 {
		t.Errorf("%d errors", n)
	}
	decisions, exhausted := 0, 0
	for i, p := range pols {
		spec, _ := p.Spec()
		tl := &tallies[i]
		// Keys before the current one were exhausted; the current one
		// may have been cut short.
		last := min(tl.current.Load(), maxKeys-1)
		if last == 0 {
			t.Errorf("%s: not one key exhausted in %v", spec.Algorithm, duration)
		}
		exhausted += int(last)
		for k := range last + 1 {
			allowed, denied := tl.allowed[k].Load(), tl.denied[k].Load()
			decisions += int(allowed + denied)
			if allowed > limit || k < last && allowed != limit {
				t.Errorf("%s, key k%d: %d allowed, %d denied; want exactly %d allowed",
					spec.Algorithm, k, allowed, denied, limit)
			}
		}
	}
	noscript := errorCount(ctx, t, client, "NOSCRIPT")
	t.Logf("%d decisions, %d keys exhausted, %d flushes, %d NOSCRIPT replies", decisions, exhausted, flushes, noscript)
	if noscript == 0 {
		t.Error("no call met NOSCRIPT: the flushes never hit the load")
	}
}

// errorCount returns how many error replies with prefix Redis has sent.
func errorCount(ctx context.Context, t *testing.T, client *redis.Client, prefix string) int {
	t.Helper()
	info, err := client.Info(ctx, "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		// errorstat_NOSCRIPT:count=12
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+prefix+":count="); ok {
			n, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatalf("INFO errorstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// TestClientPause holds every command in Redis for 2 s (CLIENT PAUSE):
// calls give up at their context's deadline, whether go-redis follows
// context deadlines or not and with auto-pipelining on or off, and the
// middleware answers at its store timeout; once the pause ends, decisions
// resume.
func TestClientPause(t *testing.T) {
	const (
		callTimeout = 100 * time.Millisecond
		pause       = 2 * time.Second
	)
	srv := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type variant struct {
		name string
		lim  *ratekeeper.Limiter
	}
	var variants []variant
	for _, contextTimeouts := range []bool{false, true} {
		for _, pipelining := range []bool{true, false} {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: contextTimeouts})
			t.Cleanup(func() { client.Close() })
			lim := newLimiter(t, redisstore.New(client, redisstore.WithAutoPipelining(pipelining)),
				ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
			// Scripts loaded and a connection open: only the pause is new.
			if _, err := lim.Allow(ctx, "warm"); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("ContextTimeoutEnabled=%t, pipelining=%t", contextTimeouts, pipelining)
			variants = append(variants, variant{name, lim})
		}
	}
	middlewares := []struct {
		name string
		h    http.Handler
		want answer
	}{
		{"FailOpen", httplimit.Middleware(variants[0].lim, httplimit.FailOpen,
			httplimit.WithStoreTimeout(callTimeout), httplimit.WithLogger(quiet))(served), failedOpen},
		{"FailClosed", httplimit.Middleware(variants[0].lim, httplimit.FailClosed,
			httplimit.WithStoreTimeout(callTimeout), httplimit.WithLogger(quiet))(served), failedShut},
	}

	sent := time.Now()
	if err := srv.Client().Do(ctx, "CLIENT", "PAUSE", strconv.Itoa(int(pause/time.Millisecond)), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	// Redis is paused from now until some time between held and ends.
	held, ends := sent.Add(pause), time.Now().Add(pause)
	// Calls start until well before the pause ends; those that end
	// before it must fail.
	last := held.Add(-callTimeout - 300*time.Millisecond)
	var wg sync.WaitGroup
	var calls atomic.Int64
	for _, v := range variants {
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(last) {
					callCtx, cancel := context.WithTimeout(context.Background(), callTimeout)
					start := time.Now()
					_, err := v.lim.Allow(callCtx, "k")
					elapsed := time.Since(start)
					cancel()
					calls.Add(1)
					if elapsed > callTimeout+margin {
						t.Errorf("%s: returned after %v, beyond its deadline %v + %v", v.name, elapsed, callTimeout, margin)
					}
					if time.Now().Before(held) && !isTimeout(err) {
						t.Errorf("%s: %v while Redis was paused, want a timeout", v.name, err)
						return
					}
				}
			})
		}
	}
	for _, m := range middlewares {
		for i := range 4 {
			wg.Go(func() {
				for time.Now().Before(last) {
					w, elapsed := serve(m.h, i)
					calls.Add(1)
					if elapsed > callTimeout+margin {
						t.Errorf("%s middleware: answered after %v, beyond its store timeout %v + %v", m.name, elapsed, callTimeout, margin)
					}
					if got := classify(w); time.Now().Before(held) && got != m.want {
						t.Errorf("%s middleware: status %d, RateLimit %q while Redis was paused", m.name, w.Code, w.Header().Get("RateLimit"))
						return
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d calls during the pause", calls.Load())

	// Decisions resume, for every client and middleware, within a margin
	// of the pause's end.
	time.Sleep(time.Until(ends))
	resumed := ends.Add(margin)
	for _, v := range variants {
		wg.Go(func() {
			var err error
			if !pollUntil(resumed, func() bool {
				callCtx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				_, err = v.lim.Allow(callCtx, "k")
				return err == nil
			}) {
				t.Errorf("%s: no decision %v after the pause ended: %v", v.name, margin, err)
			}
		})
	}
	for _, m := range middlewares {
		wg.Go(func() {
			var w *httptest.ResponseRecorder
			if !pollUntil(resumed, func() bool {
				w, _ = serve(m.h, 0)
				return classify(w) == decided
			}) {
				t.Errorf("%s middleware: %v after the pause ended, status %d, RateLimit %q",
					m.name, margin, w.Code, w.Header().Get("RateLimit"))
			}
		})
	}
	wg.Wait()
}

// pollUntil calls ok until it returns true, and reports whether it did by
// deadline.
func pollUntil(deadline time.Time, ok func() bool) bool {
	for !ok() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// TestRestartedEmpty restarts Redis empty after a key was exhausted: the
// key starts again full, and the first call, on a dead connection and
// without the script in Redis, returns no error.
func TestRestartedEmpty(t *testing.T) {
	const limit = 3
	for _, pipelining := range []bool{true, false} {
		for _, p := range policies(limit) {
			spec, _ := p.Spec()
			t.Run(fmt.Sprintf("%s/pipelining=%t", spec.Algorithm, pipelining), func(t *testing.T) {
				srv := redistest.StartServer(t)
				lim := newLimiter(t, redisstore.New(srv.Client(), redisstore.WithAutoPipelining(pipelining)), p)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				for i := range limit + 1 {
					res, err := lim.Allow(ctx, "k")
					if err != nil {
						t.Fatal(err)
					}
					if want := i < limit; res.Allowed != want {
						t.Fatalf("request %d: allowed %t, want %t", i+1, res.Allowed, want)
					}
				}
				srv.Stop()
				srv.Restart()
				res, err := lim.Allow(ctx, "k")
				if err != nil {
					t.Fatalf("first call after the restart: %v", err)
				}
				if !res.Allowed || res.Remaining != limit-1 {
					t.Errorf("first call after the restart: %+v, want allowed with %d remaining", res, limit-1)
				}
			})
		}
	}
}
