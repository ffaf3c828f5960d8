package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/ratekeeper/ratekeeper"
)

// ErrNoReservation is returned by Settle for a request that Middleware
// did not reserve an estimate for: without WithReserve, exempt, failed
// open, or not behind it.
var ErrNoReservation = errors.New("httplimit: the request holds no reservation")

// WithReserve makes Middleware reserve an estimate of each request's
// cost, taken whole or denied as a cost is (see ratekeeper.Limiter.Reserve),
// in place of WithCostFunc's cost: a request whose real cost is known
// only once it has been served, such as the tokens of a language model's
// answer. The handler then calls Settle with the real cost, which charges
// the difference (the key may go into debt) or refunds it. Reserving
// first, rather than checking and then charging, keeps concurrent
// requests from all passing the check before any is charged.
//
// A handler that never calls Settle keeps the estimate as the request's
// cost; Middleware logs it at level Debug. With WithRefundOn, a request
// answered with a status it names and not settled gives its whole
// estimate back. An estimate below zero, or above what the policy can
// ever admit, is answered by the ErrorHandler.
func WithReserve(estimate func(*http.Request) int64) Option {
	return optionFunc(func(c *config) { c.reserve = estimate })
}

// Settle settles the reservation Middleware made for r (see WithReserve)
// at actual, its real cost: it charges actual − estimate, into debt if
// need be, or refunds estimate − actual, as ratekeeper.Reservation.Settle
// does, within the middleware's store timeout even if the client has
// gone. It fails with ErrNoReservation for a request without a
// reservation, and with ratekeeper.ErrSettled when called twice.
//
//	func(w http.ResponseWriter, r *http.Request) {
//		used := streamCompletion(w, r) // the tokens the answer took
//		if _, err := httplimit.Settle(r, used); err != nil { ... }
//	}
func Settle(r *http.Request, actual int64) (ratekeeper.Result, error) {
	d, ok := r.Context().Value(decisionKey{}).(*decision)
	if !ok || d.reservation == nil {
		return ratekeeper.Result{}, ErrNoReservation
	}
	ctx, cancel := d.m.afterwards(r.Context())
	defer cancel()
	return d.reservation.Settle(ctx, actual)
}

// serveReserved serves a request holding a reservation, then logs a
// reservation left unsettled, or cancels it if the status asks for a
// refund (WithRefundOn).
func (m *middleware) serveReserved(w http.ResponseWriter, r *http.Request, next http.Handler, res *ratekeeper.Reservation) {
	sw := &statusWriter{ResponseWriter: w}
	next.ServeHTTP(sw, r)
	if res.Settled() {
		return
	}
	if m.refundOn != nil && sw.status != 0 && m.refundOn(sw.status) {
		ctx, cancel := m.afterwards(r.Context())
		defer cancel()
		if err := res.Cancel(ctx); err == nil || errors.Is(err, ratekeeper.ErrSettled) {
			return
		} else {
			m.log().LogAttrs(r.Context(), slog.LevelError, "httplimit: refund failed",
				slog.String("key", res.Key()), slog.Int64("cost", res.Estimate()), slog.Int("status", sw.status), slog.Any("err", err))
			return
		}
	}
	m.log().LogAttrs(r.Context(), slog.LevelDebug, "httplimit: reservation never settled; its estimate is kept",
		slog.String("key", res.Key()), slog.Int64("estimate", res.Estimate()))
}

// reserve asks the limiter for a reservation, waiting no longer than the
// store timeout, as decide does.
func (m *middleware) reserveDecide(ctx context.Context, key string, estimate int64) (*ratekeeper.Reservation, ratekeeper.Result, error) {
	var res *ratekeeper.Reservation
	result, err := m.bounded(ctx, func(ctx context.Context) (ratekeeper.Result, error) {
		var err error
		res, err = m.lim.Reserve(ctx, key, estimate)
		if err != nil {
			return ratekeeper.Result{}, err
		}
		return res.Result(), nil
	})
	return res, result, err
}
