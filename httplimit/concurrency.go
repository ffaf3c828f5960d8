package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// WithConcurrency limits how many requests of one key are in progress at
// once, across every server sharing sem's store: each request holds one
// of sem's slots of its key (the KeyFunc's) from before its rate limit
// decision until its handler returns. A request that finds every slot
// held is answered 429 Too Many Requests at once, by default, with an
// application/problem+json body naming sem, and takes nothing from the
// rate limit; WithConcurrencyWait makes it wait for a slot instead. A
// request that the rate limit then denies gives its slot back at once.
//
// While sem's store fails, the failure policy applies: FailOpen serves
// the request without a slot (and still asks the rate limit), FailClosed
// answers 503, and a FailureHandler is called with the handler behind
// Middleware.
func WithConcurrency(sem *ratekeeper.Semaphore) Option {
	return optionFunc(func(c *config) { c.sem = sem })
}

// WithConcurrencyWait makes a request that finds every slot of
// WithConcurrency held wait for one, first come first served among the
// requests this server holds, for up to d (and no longer than the
// request's context) before it is answered 429. d <= 0 (the default)
// answers at once.
func WithConcurrencyWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.semWait = d })
}

// acquireSlot takes a slot of key for r, or answers r; ok reports
// whether to go on serving it, with release to call once served.
func (m *middleware) acquireSlot(w http.ResponseWriter, r *http.Request, next http.Handler, key string) (release func(), ok bool) {
	var err error
	if m.semWait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), m.semWait)
		release, err = m.sem.Acquire(ctx, key)
		cancel()
		if err != nil && r.Context().Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = ratekeeper.ErrNoSlots // the wait, not the client, ended
		}
	} else {
		ctx, cancel := r.Context(), context.CancelFunc(func() {})
		if m.timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, m.timeout)
		}
		release, err = m.sem.TryAcquire(ctx, key)
		cancel()
	}
	switch {
	case err == nil:
		return release, true
	case errors.Is(err, ratekeeper.ErrNoSlots):
		m.tooManyInFlight(w)
		return nil, false
	case errors.Is(err, ratekeeper.ErrInvalidKey):
		m.reject(w, r, err)
		return nil, false
	case r.Context().Err() != nil:
		return nil, false // the client has gone
	}
	m.log().LogAttrs(r.Context(), slog.LevelError, "httplimit: concurrency limiter failed",
		slog.String("key", key), slog.Any("err", err), slog.String("fail", m.failMode))
	if m.failMode == "open" {
		return func() {}, true
	}
	m.onFailure(w, r, next, err)
	return nil, false
}

// tooManyInFlight answers a request that found every slot held.
func (m *middleware) tooManyInFlight(w http.ResponseWriter) {
	writeProblem(w, problem{
		Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:    "Request cannot be satisfied as assigned quota has been exceeded",
		Status:   http.StatusTooManyRequests,
		Detail:   "The " + strconv.Quote(m.sem.Name()) + " limit of " + strconv.FormatInt(m.sem.Limit(), 10) + " requests in progress is reached; retry once one has finished.",
		Violated: []string{m.sem.Name()},
	})
}
