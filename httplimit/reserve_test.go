package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

func budget() ratekeeper.FixedWindow { return ratekeeper.FixedWindow{Limit: 10000, Window: time.Hour} }

func usedOf(t *testing.T, lim *ratekeeper.Limiter) float64 {
	t.Helper()
	res, err := lim.Peek(t.Context(), "ip:192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	return float64(res.Limit) - res.Remaining
}

// TestReserveSettle: the middleware reserves the estimate, the handler
// settles the real cost, once.
func TestReserveSettle(t *testing.T) {
	lim, _ := memLimiter(t, budget())
	h := Middleware(lim, WithReserve(func(*http.Request) int64 { return 1000 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if res, _ := ResultFromContext(r.Context()); res.Remaining != 9000 {
				t.Errorf("the handler sees %v left, want 9000 after the estimate", res.Remaining)
			}
			res, err := Settle(r, 600)
			if err != nil || res.Remaining != 9400 {
				t.Errorf("Settle(600) = %v left, %v; want 9400", res.Remaining, err)
			}
			if _, err := Settle(r, 600); !errors.Is(err, ratekeeper.ErrSettled) {
				t.Errorf("second Settle: %v, want ErrSettled", err)
			}
		}))
	if w := serveAt(h, "/"); w.Code != http.StatusOK {
		t.Fatalf("status %d", w.Code)
	}
	if u := usedOf(t, lim); u != 600 {
		t.Errorf("used %v, want the settled 600", u)
	}
	if _, err := Settle(httptest.NewRequest("GET", "/", nil), 1); !errors.Is(err, ErrNoReservation) {
		t.Errorf("Settle of an undecided request: %v, want ErrNoReservation", err)
	}
}

// TestReserveUnsettled: a handler that never settles keeps the estimate,
// and the middleware says so at level Debug; with WithRefundOn, a failed
// request gives it back.
func TestReserveUnsettled(t *testing.T) {
	lim, _ := memLimiter(t, budget())
	var logs testutil.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	status := http.StatusOK
	h := Middleware(lim, WithLogger(logger), WithReserve(func(*http.Request) int64 { return 700 }),
		WithRefundOn(func(code int) bool { return code >= 500 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	serveAt(h, "/")
	if u := usedOf(t, lim); u != 700 {
		t.Errorf("used %v, want the unsettled estimate 700", u)
	}
	recs := logs.JSONRecords(t)
	if len(recs) != 1 || recs[0]["level"] != "DEBUG" || !strings.Contains(recs[0]["msg"].(string), "never settled") || recs[0]["estimate"] != float64(700) {
		t.Errorf("logs %v, want one debug line of the unsettled estimate", recs)
	}
	status = http.StatusBadGateway
	serveAt(h, "/")
	if u := usedOf(t, lim); u != 700 {
		t.Errorf("used %v after a failed request, want its estimate refunded (700)", u)
	}
}

// TestReserveDenied: an estimate that does not fit is denied, and takes
// nothing; one that can never fit is the client's error.
func TestReserveDenied(t *testing.T) {
	lim, _ := memLimiter(t, budget())
	estimate := int64(9500)
	served := 0
	h := Middleware(lim, WithLogger(quiet), WithReserve(func(*http.Request) int64 { return estimate }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	serveAt(h, "/")
	estimate = 1000
	if w := serveAt(h, "/"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("an estimate beyond what is left: %d, want 429 with Retry-After", w.Code)
	}
	estimate = -1
	if w := serveAt(h, "/"); w.Code != http.StatusBadRequest {
		t.Errorf("a negative estimate: %d, want 400", w.Code)
	}
	if u := usedOf(t, lim); u != 9500 || served != 1 {
		t.Errorf("used %v, served %d; want 9500, 1", u, served)
	}
}

// TestConcurrency: a request that finds every slot of its key held is
// answered 429 and takes nothing from the rate limit; with a wait, it is
// served once a slot is free.
func TestConcurrency(t *testing.T) {
	lim, store := memLimiter(t, slow(100))
	sem, err := ratekeeper.NewConcurrency(store, ratekeeper.Concurrency{Limit: 1, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	entered, leave := make(chan struct{}), make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-leave
		}
	})
	now := Middleware(lim, WithConcurrency(sem))(handler)
	waits := Middleware(lim, WithConcurrency(sem), WithConcurrencyWait(10*time.Second))(handler)

	var wg sync.WaitGroup
	wg.Go(func() { serveAt(now, "/slow") })
	<-entered
	w := serveAt(now, "/")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("a second request in progress: %d, want 429", w.Code)
	}
	if p := decodeProblem(t, w); !strings.Contains(p["detail"].(string), "in progress") {
		t.Errorf("problem %v", p)
	}
	if res, _ := lim.Peek(t.Context(), "ip:192.0.2.1"); res.Remaining != 99 {
		t.Errorf("%v left, want 99: the refused request took from the rate limit", res.Remaining)
	}
	var waited *httptest.ResponseRecorder
	wg.Go(func() { waited = serveAt(waits, "/") })
	for sem.Waiting("ip:192.0.2.1") != 1 {
		time.Sleep(time.Millisecond)
	}
	close(leave)
	wg.Wait()
	if waited.Code != http.StatusOK {
		t.Errorf("a request that waited for the slot: %d, want 200", waited.Code)
	}
	if w := serveAt(now, "/"); w.Code != http.StatusOK {
		t.Errorf("a request once every slot is free: %d, want 200", w.Code)
	}
}
