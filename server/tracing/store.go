package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/server"
)

// The attributes of a store span.
const (
	// AttrRequests is the number of keys the store decided in the call.
	AttrRequests = attribute.Key("ratekeeper.requests")
	// AttrDenied is how many of them it denied.
	AttrDenied = attribute.Key("ratekeeper.denied")
)

// Store returns st with each of its decisions traced in a span, a child of
// the span in the call's context: "ratekeeper.Store/Decide" for one key,
// "ratekeeper.Store/DecideAll" for several at once, and
// "ratekeeper.Store/Charge", "/Refund" and "/Lease". The result is a
// driver.Charger exactly when st is, and a driver.Leaser exactly when st
// is (memstore's and redisstore's are both).
func (t *Tracer) Store(st server.Store) server.Store {
	ts := &tracedStore{Store: st, tracer: t.tracer}
	c, charges := st.(driver.Charger)
	l, leases := st.(driver.Leaser)
	switch {
	case charges && leases:
		return &tracedLeaser{tracedCharger: &tracedCharger{tracedStore: ts, charger: c}, leaser: l}
	case charges:
		return &tracedCharger{tracedStore: ts, charger: c}
	}
	return ts
}

// tracedStore is a server.Store whose decisions are traced; Reset passes
// through untraced.
type tracedStore struct {
	server.Store
	tracer trace.Tracer
}

// Decide implements ratekeeper.Store.
func (s *tracedStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.traced(ctx, "ratekeeper.Store/Decide", func(ctx context.Context) (driver.Decision, error) {
		return s.Store.Decide(ctx, key, spec, n)
	})
}

// traced runs a call on one key in a span of that name.
func (s *tracedStore) traced(ctx context.Context, name string, call func(context.Context) (driver.Decision, error)) (driver.Decision, error) {
	ctx, span := s.tracer.Start(ctx, name, trace.WithAttributes(AttrRequests.Int(1)))
	defer span.End()
	res, err := call(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	span.SetAttributes(AttrDenied.Int(denied(res)))
	return res, nil
}

// DecideAll implements server.Store.
func (s *tracedStore) DecideAll(ctx context.Context, reqs []driver.Request) ([]driver.Decision, error) {
	ctx, span := s.tracer.Start(ctx, "ratekeeper.Store/DecideAll", trace.WithAttributes(AttrRequests.Int(len(reqs))))
	defer span.End()
	results, err := s.Store.DecideAll(ctx, reqs)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return results, err
	}
	n := 0
	for _, r := range results {
		n += denied(r)
	}
	span.SetAttributes(AttrDenied.Int(n))
	return results, nil
}

// tracedCharger is a tracedStore whose store is a driver.Charger.
type tracedCharger struct {
	*tracedStore
	charger driver.Charger
}

// Charge implements driver.Charger.
func (s *tracedCharger) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.traced(ctx, "ratekeeper.Store/Charge", func(ctx context.Context) (driver.Decision, error) {
		return s.charger.Charge(ctx, key, spec, n)
	})
}

// Refund implements driver.Charger.
func (s *tracedCharger) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.traced(ctx, "ratekeeper.Store/Refund", func(ctx context.Context) (driver.Decision, error) {
		return s.charger.Refund(ctx, key, spec, n)
	})
}

// tracedLeaser is a tracedCharger whose store is also a driver.Leaser.
type tracedLeaser struct {
	*tracedCharger
	leaser driver.Leaser
}

// Lease implements driver.Leaser.
func (s *tracedLeaser) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	var g driver.LeaseGrant
	_, err := s.traced(ctx, "ratekeeper.Store/Lease", func(ctx context.Context) (driver.Decision, error) {
		var err error
		g, err = s.leaser.Lease(ctx, key, spec, req)
		return g.Decision, err
	})
	return g, err
}

var (
	_ server.Store   = (*tracedStore)(nil)
	_ driver.Charger = (*tracedCharger)(nil)
	_ driver.Leaser  = (*tracedLeaser)(nil)
)

func denied(r driver.Decision) int {
	if r.Allowed {
		return 0
	}
	return 1
}
