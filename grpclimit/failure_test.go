package grpclimit_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestFailure: while the store fails, calls are served (FailOpen) or end
// with Unavailable (FailClosed) within the store timeout; the first
// failure of each kind is logged, the others counted until the limiter
// decides again, and then logged anew.
func TestFailure(t *testing.T) {
	t.Parallel()
	hang, refused := failingLimiter(t, true), failingLimiter(t, false)
	healthy := newLimiter(t, memstore.New(), ratekeeper.FixedWindow{Limit: 100, Window: time.Hour})
	for _, mode := range []grpclimit.FailurePolicy{grpclimit.FailOpen, grpclimit.FailClosed} {
		t.Run(map[grpclimit.FailurePolicy]string{grpclimit.FailOpen: "open", grpclimit.FailClosed: "closed"}[mode], func(t *testing.T) {
			t.Parallel()
			var logs testutil.SyncBuffer
			// The limiter of a call is named by its metadata.
			pick := grpclimit.WithLimiterFunc(func(ctx context.Context, _ string) *ratekeeper.Limiter {
				switch metadata.ValueFromIncomingContext(ctx, "store")[0] {
				case "hang":
					return hang
				case "refused":
					return refused
				}
				return healthy
			})
			c := serve(t, &testServer{}, interceptors(healthy, mode, pick,
				grpclimit.WithStoreTimeout(50*time.Millisecond),
				grpclimit.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil)))))
			want := codes.OK
			if mode == grpclimit.FailClosed {
				want = codes.Unavailable
			}
			call := func(store string, want codes.Code) {
				t.Helper()
				ctx := metadata.AppendToOutgoingContext(context.Background(), "store", store)
				start := time.Now()
				_, err := unary(ctx, c)
				if status.Code(err) != want {
					t.Fatalf("store %s: %v, want %v", store, err, want)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("store %s: %v, beyond the store timeout", store, d)
				}
			}
			for range 2 {
				for range 3 {
					call("hang", want)
					call("refused", want)
				}
				call("healthy", codes.OK)
			}
			// Each round logs each kind of failure once at its first, and
			// how many of each there were when the healthy call decides.
			// (A refused dial may first be a timeout, when go-redis's
			// retries outlast the store timeout.)
			var errs, failures int
			logged, recovering := map[string]bool{}, false
			for _, rec := range logs.JSONRecords(t) {
				kind, _ := rec["kind"].(string)
				switch rec["msg"] {
				case "grpclimit: rate limiter failed":
					if recovering {
						logged, recovering = map[string]bool{}, false
					}
					if logged[kind] {
						t.Errorf("kind %q logged twice in one outage", kind)
					}
					logged[kind] = true
					errs++
				case "grpclimit: rate limiter decides again":
					recovering = true
					if !logged[kind] {
						t.Errorf("recovery of kind %q, never logged", kind)
					}
					failures += int(rec["failures"].(float64))
				}
			}
			if failures != 12 || errs < 4 || errs > 6 {
				t.Errorf("%d failures logged as %d lines; want 12 as 4 to 6:\n%s", failures, errs, logs.String())
			}
		})
	}
}

// TestAdapter: go-grpc-middleware's own ratelimit interceptors, given an
// Adapter, limit as ratekeeper does, with the same header and trailer.
func TestAdapter(t *testing.T) {
	t.Parallel()
	fixed := memstore.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) })
	lim := newLimiter(t, memstore.New(fixed), ratekeeper.FixedWindow{Limit: 2, Window: time.Hour})
	var _ ratelimit.Limiter = grpclimit.NewAdapter(lim)
	adapter := grpclimit.NewAdapter(lim, grpclimit.WithKeyFunc(grpclimit.MetadataKey("user")))
	c := serve(t, &testServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(adapter)),
		grpc.ChainStreamInterceptor(ratelimit.StreamServerInterceptor(adapter)),
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "user", "ann")
	var header, trailer metadata.MD
	if _, err := unary(ctx, c, grpc.Header(&header)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("ratelimit"); !equal(got, []string{`"fixed_window";r=1;t=3600`}) {
		t.Errorf("ratelimit %q", got)
	}
	s, err := c.StreamingInputCall(ctx)
	if err == nil {
		_, err = s.CloseAndRecv()
	}
	if err != nil {
		t.Fatal(err)
	}
	_, err = unary(ctx, c, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if got := trailer.Get("grpc-retry-pushback-ms"); !equal(got, []string{"3600000"}) {
		t.Errorf("grpc-retry-pushback-ms %q", got)
	}
	if _, err := unary(context.Background(), c); status.Code(err) != codes.ResourceExhausted {
		// go-grpc-middleware makes every refusal ResourceExhausted.
		t.Errorf("call without a key: %v", err)
	}
}
