// Package httplimit rate-limits net/http handlers with a ratekeeper.Limiter.
//
// Middleware derives a key from each request (by default the client's IP
// address, see ClientIP), takes the request's cost from the limiter under
// that key, and either passes the request on or answers 429 Too Many
// Requests with a Retry-After header and an RFC 9457 problem body. Every
// decided response carries the RateLimit-Policy and RateLimit fields of
// the IETF draft and the legacy X-RateLimit-* fields. A request whose key
// cannot be derived gets 400 Bad Request, never a shared bucket. When the
// store fails or takes longer than the store timeout (100 ms by default),
// the request is served unlimited and the failure logged (FailOpen),
// unless FailClosed asks for 503 Service Unavailable instead:
//
//	lim, err := ratekeeper.New(redisstore.New(client), ratekeeper.TokenBucket{
//		Capacity: 100, RefillRate: 10, RefillInterval: time.Second})
//	if err != nil { ... }
//	limit := httplimit.Middleware(lim,
//		httplimit.WithKeyFunc(httplimit.ClientIP("10.0.0.0/8"))) // our load balancers
//	http.ListenAndServe(":8080", limit(mux))
//
// The middleware is a func(http.Handler) http.Handler, so chi's and
// gorilla/mux's Use take it as it is.
//
// For outbound requests, Transport keeps an http.Client under a limiter
// that a fleet shares: each request waits for its turn, so that together
// the processes stay under a third party's limit.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
)

// DefaultStoreTimeout is how long Middleware waits for a decision unless
// WithStoreTimeout says otherwise.
const DefaultStoreTimeout = 100 * time.Millisecond

// A CostFunc returns the cost of a request, in units of the limiter's
// policy. An error means the request cannot be priced; Middleware answers
// it with its ErrorHandler. A cost of 0 makes a request free: it is served
// and reports the current state without consuming anything.
type CostFunc func(*http.Request) (int64, error)

// An ErrorHandler answers a request that cannot be limited because its key
// or cost cannot be derived from it, or is invalid (such as a key longer
// than ratekeeper.MaxKeyLen, or a cost larger than the policy can ever
// admit). err says why. The default answers 400 Bad Request with an
// application/problem+json body whose detail is err's text, so a KeyFunc
// should return errors fit for clients to read.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// A FailureHandler answers a request when the limiter failed: its store
// returned an error or no decision within the store timeout. It serves the
// request by calling next.ServeHTTP(w, r), or answers it itself. The
// failure has already been logged.
type FailureHandler func(w http.ResponseWriter, r *http.Request, next http.Handler, err error)

// Middleware returns a middleware that limits requests with l. Each request
// is keyed (WithKeyFunc), priced (WithCostFunc), and decided by l within
// the store timeout:
//
//   - allowed: the request is served, with the rate limit fields set and
//     the Result in its context (ResultFromContext);
//   - denied: 429 Too Many Requests with Retry-After (WithDeniedHandler);
//   - no key or invalid cost: 400 Bad Request (WithErrorHandler);
//   - the store failed: served, or 503 with FailClosed;
//   - exempt (WithExempt): served as it is, without a decision.
//
// The fields are, with name the limiter's Name, and every time rounded up
// to whole seconds so that a client waiting for it never comes too early:
//
//	RateLimit-Policy: "<name>";q=<Limit>;w=<Window, at least 1>
//	RateLimit: "<name>";r=<Remaining, rounded down, at least 0>;t=<see below>
//	X-RateLimit-Limit: <Limit>
//	X-RateLimit-Remaining: <Remaining, rounded down, at least 0>
//	X-RateLimit-Reset: <Unix epoch seconds when the limiter is full again>
//	Retry-After: <RetryAfter, at least 1> (429 only)
//
// "<name>" is an RFC 9651 String: '"' and '\' are escaped by a backslash,
// and every byte a String cannot hold (control characters, non-ASCII),
// and '%', is written %xx in lower-case hex, as in a Display String
// ("café" is "caf%c3%a9").
//
// A limiter of several policies (ratekeeper.All) lists one item per
// policy, by the policy's name, in both RateLimit-Policy and RateLimit,
// each from that policy's own Result (Result.Parts); the X-RateLimit-*
// fields and Retry-After describe the binding policy, and a 429 body
// names every policy that denied.
//
// t is the draft's time until more quota is available: on a denial,
// RetryAfter, when this request could pass; otherwise ResetAfter, when
// the whole quota is back (0 if it is). A Result does not say when the
// next partial refill comes, and ResetAfter is never earlier than it: a
// client waiting t seconds always finds more quota.
//
// RateLimit-Policy and RateLimit are added to the fields already set, so
// that stacked middlewares (a burst limit around a daily one, say, with
// distinct names) list every policy, as the draft's lists allow; the
// X-RateLimit-* fields describe the innermost limiter.
func Middleware(l *ratekeeper.Limiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("httplimit: Middleware with a nil Limiter")
	}
	c := config{
		key:     ClientIP(),
		onError: badRequest,
		style:   HeadersBoth,
		timeout: DefaultStoreTimeout,
	}
	FailOpen.apply(&c)
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&c)
		}
	}
	m := &middleware{config: c, lim: l}
	parts := l.Spec().Policies()
	items := make([]string, len(parts))
	for i, p := range parts {
		m.names = append(m.names, ratelimitfield.NewName(p.Name()))
		items[i] = ratelimitfield.Policy(m.names[i], p.Limit(), p.Window())
	}
	m.policyField = ratelimitfield.List(items)
	if m.denied == nil {
		m.denied = http.HandlerFunc(m.tooManyRequests)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			m.serve(w, r, next)
		})
	}
}

type middleware struct {
	config
	lim         *ratekeeper.Limiter
	names       []ratelimitfield.Name // each policy's, as the fields write it
	policyField string
}

type decisionKey struct{}

// decision is what Middleware leaves in a request's context: the key it
// used and the Result of its decision, for the handler behind it.
type decision struct {
	m           *middleware
	key         string
	res         ratekeeper.Result
	reservation *ratekeeper.Reservation // with WithReserve
}

// ResultFromContext returns the Result of the decision on the request
// whose context is ctx, for handlers behind Middleware and for denied
// handlers. ok is false when no decision was made (for instance while the
// limiter fails).
func ResultFromContext(ctx context.Context) (res ratekeeper.Result, ok bool) {
	d, ok := ctx.Value(decisionKey{}).(*decision)
	if !ok {
		return ratekeeper.Result{}, false
	}
	return d.res, true
}

// KeyFromContext returns the rate limit key Middleware derived for the
// request whose context is ctx (by its KeyFunc), for handlers behind it
// and for denied handlers: the key to charge a cost learnt while
// serving, or to log. ok is false when no decision was made.
func KeyFromContext(ctx context.Context) (key string, ok bool) {
	d, ok := ctx.Value(decisionKey{}).(*decision)
	if !ok {
		return "", false
	}
	return d.key, true
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.exempt != nil && m.exempt(r) {
		next.ServeHTTP(w, r)
		return
	}
	key, err := m.key(r)
	if err == nil && key == "" {
		err = errors.New("httplimit: empty rate limit key")
	}
	if err != nil {
		m.reject(w, r, err)
		return
	}
	cost := int64(1)
	switch {
	case m.reserve != nil:
		cost = m.reserve(r)
	case m.cost != nil:
		if cost, err = m.cost(r); err != nil {
			m.reject(w, r, err)
			return
		}
	}
	if m.sem != nil {
		release, ok := m.acquireSlot(w, r, next, key)
		if !ok {
			return
		}
		defer release()
	}
	var (
		res         ratekeeper.Result
		reservation *ratekeeper.Reservation
	)
	if m.reserve != nil {
		reservation, res, err = m.reserveDecide(r.Context(), key, cost)
	} else {
		res, err = m.decide(r.Context(), key, cost)
	}
	switch {
	case errors.Is(err, ratekeeper.ErrInvalidKey), errors.Is(err, ratekeeper.ErrInvalidCost):
		// The request's fault, not the store's: failing open here would let
		// a client skip the limit with an oversized key.
		m.reject(w, r, err)
		return
	case err != nil && r.Context().Err() != nil:
		return // the client has gone: nobody to answer
	case err != nil:
		m.log().LogAttrs(r.Context(), slog.LevelError, "httplimit: rate limiter failed",
			slog.String("key", key), slog.Any("err", err), slog.String("fail", m.failMode))
		m.onFailure(w, r, next, err)
		return
	}
	m.setFields(w.Header(), res, time.Now())
	r = r.WithContext(context.WithValue(r.Context(), decisionKey{}, &decision{m: m, key: key, res: res, reservation: reservation}))
	if reservation != nil && res.Allowed {
		m.serveReserved(w, r, next, reservation)
		return
	}
	if res.Allowed || cost == 0 {
		if m.refundOn != nil && res.Allowed && cost > 0 {
			m.serveRefunding(w, r, next, key, cost)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	w.Header().Set(ratelimitfield.RetryAfterField, ratelimitfield.RetryAfter(res.RetryAfter))
	m.denied.ServeHTTP(w, r)
}

// decide asks the limiter, waiting no longer than the store timeout. The
// call runs on the request's goroutine: a Store returns by the end of its
// context, so the deadline alone bounds the wait.
func (m *middleware) decide(ctx context.Context, key string, cost int64) (ratekeeper.Result, error) {
	return m.bounded(ctx, func(ctx context.Context) (ratekeeper.Result, error) {
		return m.lim.AllowN(ctx, key, cost)
	})
}

// bounded makes the store call f within the store timeout.
func (m *middleware) bounded(ctx context.Context, f func(context.Context) (ratekeeper.Result, error)) (ratekeeper.Result, error) {
	if m.timeout <= 0 {
		return f(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	res, err := f(ctx)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("httplimit: no decision within %v: %w", m.timeout, err)
	}
	return res, err
}

func (m *middleware) reject(w http.ResponseWriter, r *http.Request, err error) {
	m.log().LogAttrs(r.Context(), slog.LevelDebug, "httplimit: request cannot be limited", slog.Any("err", err))
	m.onError(w, r, err)
}

func (m *middleware) log() *slog.Logger {
	if m.logger != nil {
		return m.logger
	}
	return slog.Default()
}
