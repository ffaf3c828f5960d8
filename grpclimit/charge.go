package grpclimit

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
)

// ErrNoDecision is returned by Charge and Refund for a call that the
// interceptors did not decide: exempt, failed open, or not behind them.
var ErrNoDecision = errors.New("grpclimit: the call was not decided by the interceptors")

// Charge takes n from the key the interceptors limited the call whose
// context is ctx under, for a cost learnt while serving it: the rows a
// query read, the tokens an answer took. It is the limiter's Charge (see
// ratekeeper.Limiter.Charge): n is always taken, and the key may go into
// debt, which denies its later calls until time repays it. The charge is
// made even if the client has gone, within the store timeout.
//
//	func (s *server) Query(ctx context.Context, req *pb.QueryRequest) (*pb.QueryReply, error) {
//		rows, err := s.db.Query(ctx, req)
//		grpclimit.Charge(ctx, int64(len(rows)))
//		...
//	}
func Charge(ctx context.Context, n int64) (ratekeeper.Result, error) {
	return afterwards(ctx, n, (*ratekeeper.Limiter).Charge)
}

// Refund gives back up to n to the key the interceptors limited the call
// whose context is ctx under, as ratekeeper.Limiter.Refund does: for part
// of a cost reserved up front that the call did not use. WithRefundOn
// refunds a call's whole cost by its status.
func Refund(ctx context.Context, n int64) (ratekeeper.Result, error) {
	return afterwards(ctx, n, (*ratekeeper.Limiter).Refund)
}

func afterwards(ctx context.Context, n int64, op func(*ratekeeper.Limiter, context.Context, string, int64) (ratekeeper.Result, error)) (ratekeeper.Result, error) {
	d, ok := ctx.Value(decisionKey{}).(*decision)
	if !ok {
		return ratekeeper.Result{}, ErrNoDecision
	}
	ctx, cancel := d.in.afterwards(ctx)
	defer cancel()
	return op(d.lim.lim, ctx, d.key, n)
}

// afterwards is the context of a store call made after the decision: it
// outlives the client, but not the store timeout.
func (in *interceptor) afterwards(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithoutCancel(ctx)
	if in.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, in.timeout)
}

// refundOn refunds d's cost if WithRefundOn names the status of err, the
// handler's answer.
func (in *interceptor) refundOn(ctx context.Context, d *decision, err error) {
	if in.refund == nil || d.cost == 0 || !in.refund[status.Code(err)] {
		return
	}
	actx, cancel := in.afterwards(ctx)
	defer cancel()
	if _, rerr := d.lim.lim.Refund(actx, d.key, d.cost); rerr != nil {
		in.log().LogAttrs(ctx, slog.LevelError, "grpclimit: refund failed",
			slog.String("key", d.key), slog.Int64("cost", d.cost),
			slog.String("code", status.Code(err).String()), slog.Any("err", rerr))
	}
}
