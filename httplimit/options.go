package httplimit

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

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
	exempt    func(*http.Request) bool
	refundOn  func(status int) bool
	reserve   func(*http.Request) int64
	sem       *ratekeeper.Semaphore
	semWait   time.Duration
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
// policy applies. It is the deadline of the decision's context, which
// every Store honours. d <= 0 removes it, leaving only the request's
// context.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithLogger sets the logger of limiter failures (level Error) and of
// requests that cannot be limited (level Debug, as clients can cause them
// at will). The default is slog.Default() at the time of logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithExempt exempts the requests for which exempt returns true: they are
// served as they are, without a decision, a cost or rate limit fields.
// Use it for health checks and static files behind a middleware that
// wraps a whole mux, rather than a CostFunc that returns 0 (which still
// asks the store):
//
//	httplimit.WithExempt(func(r *http.Request) bool {
//		return r.URL.Path == "/healthz" || strings.HasPrefix(r.URL.Path, "/static/")
//	})
//
// exempt sees the request as the client sent it: match on what the
// client cannot use to skip the limit of other routes (a path that your
// mux routes only to the exempt handler, say).
func WithExempt(exempt func(*http.Request) bool) Option {
	return optionFunc(func(c *config) { c.exempt = exempt })
}
