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
// "ratekeeper.Store/DecideAll" for several at once.
func (t *Tracer) Store(st server.Store) server.Store {
	return &tracedStore{Store: st, tracer: t.tracer}
}

// tracedStore is a server.Store whose decisions are traced; Reset passes
// through untraced.
type tracedStore struct {
	server.Store
	tracer trace.Tracer
}

// Decide implements ratekeeper.Store.
func (s *tracedStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	ctx, span := s.tracer.Start(ctx, "ratekeeper.Store/Decide", trace.WithAttributes(AttrRequests.Int(1)))
	defer span.End()
	res, err := s.Store.Decide(ctx, key, spec, n)
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

func denied(r driver.Decision) int {
	if r.Allowed {
		return 0
	}
	return 1
}
