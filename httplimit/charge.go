package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/ratekeeper/ratekeeper"
)

// ErrNoDecision is returned by Charge and Refund for a request that
// Middleware did not decide: exempt, failed open, or not behind it.
var ErrNoDecision = errors.New("httplimit: the request was not decided by Middleware")

// Charge takes n from the key Middleware limited r under, for a cost
// learnt while serving it: the tokens a response streamed, the bytes it
// wrote. It is the limiter's Charge (see ratekeeper.Limiter.Charge): n is
// always taken, and the key may go into debt, which denies its later
// requests until time repays it. The charge is made even if the client
// has gone, within the middleware's store timeout. Behind stacked
// middlewares, it charges the innermost one's limiter.
//
//	func(w http.ResponseWriter, r *http.Request) {
//		used := streamCompletion(w, r) // the tokens the answer took
//		httplimit.Charge(r, used)
//	}
func Charge(r *http.Request, n int64) (ratekeeper.Result, error) {
	return afterwards(r, n, (*ratekeeper.Limiter).Charge)
}

// Refund gives back up to n to the key Middleware limited r under, as
// ratekeeper.Limiter.Refund does: for part of a cost reserved up front
// that the request did not use. WithRefundOn refunds a request's whole
// cost by its status.
func Refund(r *http.Request, n int64) (ratekeeper.Result, error) {
	return afterwards(r, n, (*ratekeeper.Limiter).Refund)
}

// afterwards calls op, Charge or Refund, on r's decision: its limiter
// and key.
func afterwards(r *http.Request, n int64, op func(*ratekeeper.Limiter, context.Context, string, int64) (ratekeeper.Result, error)) (ratekeeper.Result, error) {
	d, ok := r.Context().Value(decisionKey{}).(*decision)
	if !ok {
		return ratekeeper.Result{}, ErrNoDecision
	}
	ctx, cancel := d.m.afterwards(r.Context())
	defer cancel()
	return op(d.m.lim, ctx, d.key, n)
}

// WithRefundOn refunds the cost of an allowed request when the handler
// answers it with a status for which refund returns true, so that such
// requests do not count: failures, say, with
//
//	httplimit.WithRefundOn(func(status int) bool { return status >= 500 })
//
// The status is the first the handler writes (200 if it writes a body
// without one). A refund that fails is logged; the response is not
// changed.
func WithRefundOn(refund func(status int) bool) Option {
	return optionFunc(func(c *config) { c.refundOn = refund })
}

// afterwards is the context of a store call made after the decision: it
// outlives the client, but not the store timeout.
func (m *middleware) afterwards(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithoutCancel(ctx)
	if m.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, m.timeout)
}

// serveRefunding serves an allowed request, refunding its cost if the
// handler's status asks for it.
func (m *middleware) serveRefunding(w http.ResponseWriter, r *http.Request, next http.Handler, key string, cost int64) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if sw.status == 0 || !m.refundOn(sw.status) {
		return
	}
	if _, err := Refund(r, cost); err != nil { // r holds this decision
		m.log().LogAttrs(r.Context(), slog.LevelError, "httplimit: refund failed",
			slog.String("key", key), slog.Int64("cost", cost), slog.Int("status", sw.status), slog.Any("err", err))
	}
}

// statusWriter records the status a handler answers with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming handlers flush through the recorder.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
