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
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
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

// An Option configures Middleware.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// A FailurePolicy is an Option choosing what happens to requests while the
// limiter fails: FailOpen or FailClosed. WithFailureHandler gives any other
// answer.
type FailurePolicy int

const (
	// FailOpen serves requests unlimited while the limiter fails. It is the
	// default: the limiter protects the API, and an outage of its store
	// should not become an outage of the API. Every failure is logged at
	// level Error, so the gap in protection does not go unnoticed.
	FailOpen FailurePolicy = iota
	// FailClosed answers 503 Service Unavailable, with an
	// application/problem+json body, while the limiter fails: for
	// endpoints where an unlimited request costs more than a refused one,
	// such as logins or expensive calls to third parties.
	FailClosed
)

func (p FailurePolicy) apply(c *config) {
	if p == FailClosed {
		c.onFailure, c.failMode = failClosed, "closed"
	} else {
		c.onFailure, c.failMode = failOpen, "open"
	}
}

// HeaderStyle selects the rate limit fields Middleware sends.
type HeaderStyle int

// Header styles, for WithHeaderStyle. Retry-After is sent on every 429
// whatever the style: it is plain HTTP, and clients rely on it.
const (
	// HeadersNone sends no rate limit fields.
	HeadersNone HeaderStyle = 0
	// HeadersIETF sends RateLimit-Policy and RateLimit, as defined by
	// draft-ietf-httpapi-ratelimit-headers-10.
	HeadersIETF HeaderStyle = 1
	// HeadersLegacy sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (in Unix epoch seconds).
	HeadersLegacy HeaderStyle = 2
	// HeadersBoth sends both sets; it is the default.
	HeadersBoth = HeadersIETF | HeadersLegacy
)

type config struct {
	key       KeyFunc
	cost      CostFunc
	denied    http.Handler
	onError   ErrorHandler
	onFailure FailureHandler
	failMode  string // for the log
	style     HeaderStyle
	timeout   time.Duration
	logger    *slog.Logger
}

// WithKeyFunc sets how requests are keyed (default: ClientIP(), the peer's
// address). The key names the bucket a request draws from, so build it
// from what identifies a client: see ClientIP and HeaderKey, or compose
// your own, such as "api:" + r.Pattern + ":" + user.
func WithKeyFunc(f KeyFunc) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.key = f
		}
	})
}

// WithCostFunc sets the cost of each request (default: 1).
func WithCostFunc(f CostFunc) Option {
	return optionFunc(func(c *config) { c.cost = f })
}

// WithDeniedHandler sets the handler for denied requests. It is called
// with the rate limit fields and Retry-After already set, and the Result
// in the request's context (see ResultFromContext); it should answer 429
// Too Many Requests. The default answers 429 with an
// application/problem+json body of the draft's "quota-exceeded" type.
func WithDeniedHandler(h http.Handler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.denied = h
		}
	})
}

// WithErrorHandler sets how requests that cannot be limited are answered
// (default: 400 Bad Request; see ErrorHandler). Use it, for instance, to
// answer 401 to requests without credentials.
func WithErrorHandler(h ErrorHandler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.onError = h
		}
	})
}

// WithFailureHandler sets how requests are answered while the limiter
// fails, in place of FailOpen or FailClosed.
func WithFailureHandler(h FailureHandler) Option {
	return optionFunc(func(c *config) {
		if h != nil {
			c.onFailure, c.failMode = h, "custom"
		}
	})
}

// WithHeaderStyle selects the rate limit fields sent (default:
// HeadersBoth).
func WithHeaderStyle(s HeaderStyle) Option {
	return optionFunc(func(c *config) { c.style = s })
}

// WithStoreTimeout bounds the wait for each decision (default
// DefaultStoreTimeout); past it, the limiter has failed and the failure
// policy applies. The bound holds even with a store that ignores context
// deadlines. d <= 0 removes it, leaving only the request's context.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithLogger sets the logger of limiter failures (level Error) and of
// requests that cannot be limited (level Debug, as clients can cause them
// at will). The default is slog.Default() at the time of logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// Middleware returns a middleware that limits requests with l. Each request
// is keyed (WithKeyFunc), priced (WithCostFunc), and decided by l within
// the store timeout:
//
//   - allowed: the request is served, with the rate limit fields set and
//     the Result in its context (ResultFromContext);
//   - denied: 429 Too Many Requests with Retry-After (WithDeniedHandler);
//   - no key or invalid cost: 400 Bad Request (WithErrorHandler);
//   - the store failed: served, or 503 with FailClosed.
//
// The fields are, with name the limiter's Name, and every time rounded up
// to whole seconds so that a client waiting for it never comes too early:
//
//	RateLimit-Policy: "<name>";q=<Limit>;w=<Window, at least 1>
//	RateLimit: "<name>";r=<Remaining, rounded down>;t=<see below>
//	X-RateLimit-Limit: <Limit>
//	X-RateLimit-Remaining: <Remaining, rounded down>
//	X-RateLimit-Reset: <Unix epoch seconds when the limiter is full again>
//	Retry-After: <RetryAfter, at least 1> (429 only)
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
	spec := l.Spec()
	parts := spec.Parts
	if parts == nil {
		parts = []ratekeeper.Spec{spec}
	}
	items := make([]string, len(parts))
	for i, p := range parts {
		m.sfNames = append(m.sfNames, sfString(p.Name))
		items[i] = fmt.Sprintf("%s;q=%d;w=%d", m.sfNames[i], p.Limit, max(1, ceilSeconds(p.Window)))
	}
	m.policyField = strings.Join(items, ", ")
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
	sfNames     []string // each policy's name as a Structured Field String
	policyField string
}

type resultKey struct{}

// ResultFromContext returns the Result of the decision on the request
// whose context is ctx, for handlers behind Middleware and for denied
// handlers. ok is false when no decision was made (for instance while the
// limiter fails).
func ResultFromContext(ctx context.Context) (res ratekeeper.Result, ok bool) {
	res, ok = ctx.Value(resultKey{}).(ratekeeper.Result)
	return res, ok
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := m.key(r)
	if err == nil && key == "" {
		err = errors.New("httplimit: empty rate limit key")
	}
	if err != nil {
		m.reject(w, r, err)
		return
	}
	cost := int64(1)
	if m.cost != nil {
		if cost, err = m.cost(r); err != nil {
			m.reject(w, r, err)
			return
		}
	}
	res, err := m.decide(r.Context(), key, cost)
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
	r = r.WithContext(context.WithValue(r.Context(), resultKey{}, res))
	if res.Allowed || cost == 0 {
		next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(1, ceilSeconds(res.RetryAfter)), 10))
	m.denied.ServeHTTP(w, r)
}

// decide asks the limiter, waiting no longer than the store timeout. The
// call runs in its own goroutine so that the bound holds even for a store
// blocked somewhere that does not watch ctx: the Store interface does not
// promise to, and a hung store must not hang the request.
func (m *middleware) decide(ctx context.Context, key string, cost int64) (ratekeeper.Result, error) {
	if m.timeout <= 0 {
		return m.lim.AllowN(ctx, key, cost)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	type reply struct {
		res ratekeeper.Result
		err error
	}
	done := make(chan reply, 1)
	go func() {
		res, err := m.lim.AllowN(ctx, key, cost)
		done <- reply{res, err}
	}()
	select {
	case rep := <-done:
		return rep.res, rep.err
	case <-ctx.Done():
		return ratekeeper.Result{}, fmt.Errorf("httplimit: no decision within %v: %w", m.timeout, ctx.Err())
	}
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

func (m *middleware) setFields(h http.Header, res ratekeeper.Result, now time.Time) {
	if m.style&HeadersIETF != 0 {
		h.Add("RateLimit-Policy", m.policyField)
		if res.Parts == nil {
			h.Add("RateLimit", rateLimitItem(m.sfNames[0], res))
		} else {
			items := make([]string, len(res.Parts))
			for i, p := range res.Parts {
				items[i] = rateLimitItem(m.sfNames[i], p)
			}
			h.Add("RateLimit", strings.Join(items, ", "))
		}
	}
	if m.style&HeadersLegacy != 0 {
		reset := now.Add(res.ResetAfter)
		epoch := reset.Unix()
		if reset.Nanosecond() > 0 {
			epoch++
		}
		h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatFloat(math.Floor(res.Remaining), 'f', 0, 64))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(epoch, 10))
	}
}

// rateLimitItem is res as an item of the RateLimit field. t is the
// draft's time until more quota is available (see Middleware).
func rateLimitItem(sfName string, res ratekeeper.Result) string {
	t := res.ResetAfter
	if !res.Allowed {
		t = res.RetryAfter
	}
	remaining := strconv.FormatFloat(math.Floor(res.Remaining), 'f', 0, 64)
	return sfName + ";r=" + remaining + ";t=" + strconv.FormatInt(ceilSeconds(t), 10)
}

func (m *middleware) tooManyRequests(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFromContext(r.Context())
	violated := []string{res.Policy}
	if res.Parts != nil {
		violated = violated[:0]
		for _, p := range res.Parts {
			if !p.Allowed {
				violated = append(violated, p.Policy)
			}
		}
	}
	writeProblem(w, problem{
		Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:    "Request cannot be satisfied as assigned quota has been exceeded",
		Status:   http.StatusTooManyRequests,
		Detail:   "The " + strconv.Quote(res.Policy) + " rate limit is exhausted; retry after " + w.Header().Get("Retry-After") + " s.",
		Violated: violated,
	})
}

func badRequest(w http.ResponseWriter, _ *http.Request, err error) {
	writeProblem(w, problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusBadRequest),
		Status: http.StatusBadRequest,
		Detail: err.Error(),
	})
}

func failOpen(w http.ResponseWriter, r *http.Request, next http.Handler, _ error) {
	next.ServeHTTP(w, r)
}

// failClosed keeps the cause out of the body: it describes the
// infrastructure, not the request.
func failClosed(w http.ResponseWriter, _ *http.Request, _ http.Handler, _ error) {
	writeProblem(w, problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable,
		Detail: "The rate limiter is unavailable.",
	})
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// ceilSeconds rounds d up to whole seconds; negative durations count as 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString renders s as a Structured Field String (RFC 9651), which holds
// printable ASCII only: other bytes become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
