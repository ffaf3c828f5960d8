// Package grpclimit rate-limits grpc-go servers with a ratekeeper.Limiter.
//
// UnaryServerInterceptor and StreamServerInterceptor derive a key from
// each call (by default the client's IP address, see ClientIP), take the
// call's cost from the limiter under that key, and either pass the call on
// or end it with codes.ResourceExhausted, whose status carries a
// google.rpc.RetryInfo (the exact time until the call could pass) and a
// google.rpc.QuotaFailure, and whose trailers carry grpc-retry-pushback-ms,
// which grpc-go's retry policy honours. Every decided call's response
// header carries the ratelimit-policy and ratelimit fields that httplimit
// sends, with the same values. When the store fails or takes longer than
// the store timeout (100 ms by default), the call is served unlimited and
// the failure logged (FailOpen), unless FailClosed asks for
// codes.Unavailable instead:
//
//	lim, err := ratekeeper.New(redisstore.New(client), ratekeeper.TokenBucket{
//		Capacity: 100, RefillRate: 10, RefillInterval: time.Second})
//	if err != nil { ... }
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim)),
//		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim)),
//	)
//
// A stream is admitted when it starts; WithMessageCost also takes a cost
// for every message it receives. A handler learning its cost while
// serving takes it with Charge, or gives part of it back with Refund.
// UnaryClientInterceptor is the other side: it waits out a RetryInfo and
// tries again, within the call's deadline. NewAdapter serves the chains
// built on go-grpc-middleware's ratelimit package.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
)

// DefaultStoreTimeout is how long the interceptors wait for a decision
// unless WithStoreTimeout says otherwise.
const DefaultStoreTimeout = 100 * time.Millisecond

// The metadata keys the interceptors write: the rate limit fields of
// httplimit, lower-cased as gRPC metadata is, in the response header of
// an admitted call; those, retry-after, and the pushback that grpc-go's
// retry policy reads, in the trailers of a denied one.
const (
	PolicyMetadata     = "ratelimit-policy"
	LimitMetadata      = "ratelimit"
	RetryAfterMetadata = "retry-after"
	PushbackMetadata   = "grpc-retry-pushback-ms"
)

// UnaryServerInterceptor returns an interceptor that limits unary calls
// with lim. Each call is keyed (WithKeyFunc), priced (WithCostFunc), and
// decided by the call's limiter (lim, or one that WithLimiterFunc or
// WithMethodLimiters chooses) within the store timeout:
//
//   - allowed: the handler runs, with the rate limit fields in the
//     response header and the decision in its context (ResultFromContext,
//     Charge, Refund);
//   - denied: codes.ResourceExhausted, with RetryInfo and QuotaFailure
//     details, and the fields, retry-after and grpc-retry-pushback-ms in
//     its trailers: a denial sends no header (it is a Trailers-Only
//     response), since grpc-go's retry policy, which waits for the
//     pushback, retries no call whose header it received;
//   - no key or an invalid cost: codes.InvalidArgument, or the status of
//     the KeyFunc's or CostFunc's error if it has one;
//   - the store failed: served, or codes.Unavailable with FailClosed;
//   - exempt (WithExempt): served as it is, without a decision.
//
// The fields are those of httplimit.Middleware, every time rounded up to
// whole seconds:
//
//	ratelimit-policy: "<name>";q=<Limit>;w=<Window, at least 1>
//	ratelimit: "<name>";r=<Remaining, rounded down, at least 0>;t=<seconds>
//	retry-after: <RetryAfter, at least 1> (denied only)
//
// with one item per policy of a ratekeeper.All. t is RetryAfter on a
// denial, ResetAfter otherwise. It panics if lim is nil.
func UnaryServerInterceptor(lim *ratekeeper.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	in := newInterceptor(lim, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		d, err := in.admit(ctx, info.FullMethod, unaryHeader{ctx})
		if err != nil {
			return nil, err
		}
		if d == nil {
			return handler(ctx, req)
		}
		resp, err := handler(context.WithValue(ctx, decisionKey{}, d), req)
		in.refundOn(ctx, d, err)
		return resp, err
	}
}

// StreamServerInterceptor returns an interceptor that limits streams with
// lim as UnaryServerInterceptor limits unary calls: a stream is admitted
// or refused when it starts, at the cost of its CostFunc. With
// WithMessageCost, every message it then receives also takes its cost
// under the same key: a message denied ends RecvMsg with the
// codes.ResourceExhausted status a denied call gets (and the handler
// returns it, as it returns any error of RecvMsg). It panics if lim is
// nil.
func StreamServerInterceptor(lim *ratekeeper.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	in := newInterceptor(lim, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		d, err := in.admit(ctx, info.FullMethod, ss)
		if err != nil {
			return err
		}
		if d == nil {
			return handler(srv, ss)
		}
		ls := &limitedStream{ServerStream: ss, in: in, d: d, ctx: context.WithValue(ctx, decisionKey{}, d)}
		err = handler(srv, ls)
		in.refundOn(ctx, d, err)
		return err
	}
}

// limitedStream gives the handler the decision in its context, and takes
// the cost of each message received when WithMessageCost asks for it.
type limitedStream struct {
	grpc.ServerStream
	in  *interceptor
	d   *decision
	ctx context.Context
}

func (s *limitedStream) Context() context.Context { return s.ctx }

func (s *limitedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.in.msgCost == nil {
		return err
	}
	cost := s.in.msgCost(m)
	res, err := s.in.decide(s.ctx, s.d.lim.lim, s.d.key, cost)
	if err != nil {
		return s.in.failed(s.ctx, s.d.key, err)
	}
	s.in.succeeded()
	if res.Allowed || cost == 0 {
		return nil
	}
	s.SetTrailer(pushback(res))
	return s.in.denied(s.d.lim, s.d.key, res)
}

// A headerSetter is where a decision's fields go: the call's stream.
type headerSetter interface {
	SetHeader(metadata.MD) error
	SetTrailer(metadata.MD)
}

type unaryHeader struct{ ctx context.Context }

func (u unaryHeader) SetHeader(md metadata.MD) error { return grpc.SetHeader(u.ctx, md) }
func (u unaryHeader) SetTrailer(md metadata.MD)      { _ = grpc.SetTrailer(u.ctx, md) }

// interceptor is what both interceptors share: their options, the
// limiters' fields, and the failure log.
type interceptor struct {
	config
	def     *limiterFields
	byLim   sync.Map // *ratekeeper.Limiter -> *limiterFields, for WithLimiterFunc's
	failing atomic.Bool
	mu      sync.Mutex
	logged  map[string]int // failures of each kind since the last decision
}

// limiterFields is a limiter with the fields written for its policies.
type limiterFields struct {
	lim         *ratekeeper.Limiter
	names       []ratelimitfield.Name
	policyField string
}

func newLimiterFields(l *ratekeeper.Limiter) *limiterFields {
	f := &limiterFields{lim: l}
	parts := l.Spec().Policies()
	items := make([]string, len(parts))
	for i, p := range parts {
		f.names = append(f.names, ratelimitfield.NewName(p.Name()))
		items[i] = ratelimitfield.Policy(f.names[i], p.Limit(), p.Window())
	}
	f.policyField = ratelimitfield.List(items)
	return f
}

func newInterceptor(lim *ratekeeper.Limiter, opts []Option) *interceptor {
	if lim == nil {
		panic("grpclimit: an interceptor with a nil Limiter")
	}
	c := config{key: ClientIP(), timeout: DefaultStoreTimeout}
	FailOpen.apply(&c)
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&c)
		}
	}
	in := &interceptor{config: c, def: newLimiterFields(lim), logged: map[string]int{}}
	for _, l := range c.limiters {
		if l != nil {
			in.byLim.Store(l, newLimiterFields(l))
		}
	}
	return in
}

// fieldsOf returns l's fields, made once per limiter.
func (in *interceptor) fieldsOf(l *ratekeeper.Limiter) *limiterFields {
	if l == nil || l == in.def.lim {
		return in.def
	}
	if f, ok := in.byLim.Load(l); ok {
		return f.(*limiterFields)
	}
	f, _ := in.byLim.LoadOrStore(l, newLimiterFields(l))
	return f.(*limiterFields)
}

type decisionKey struct{}

// decision is what the interceptors leave in a call's context: the
// limiter and key of its decision, its cost and Result.
type decision struct {
	in   *interceptor
	lim  *limiterFields
	key  string
	cost int64
	res  ratekeeper.Result
}

// ResultFromContext returns the Result of the decision on the call whose
// context is ctx, for handlers behind the interceptors. ok is false when
// no decision was made (the call is exempt, or the limiter failed open).
func ResultFromContext(ctx context.Context) (res ratekeeper.Result, ok bool) {
	d, ok := ctx.Value(decisionKey{}).(*decision)
	if !ok {
		return ratekeeper.Result{}, false
	}
	return d.res, true
}

// KeyFromContext returns the rate limit key the interceptors derived for
// the call whose context is ctx; ok is false when no decision was made.
func KeyFromContext(ctx context.Context) (key string, ok bool) {
	d, ok := ctx.Value(decisionKey{}).(*decision)
	if !ok {
		return "", false
	}
	return d.key, true
}

// admit decides a call to method. It returns the decision of an admitted
// call, nil for a call served without one (exempt, or failed open), or
// the status error the call ends with.
func (in *interceptor) admit(ctx context.Context, method string, hs headerSetter) (*decision, error) {
	if in.exempt != nil && in.exempt(ctx, method) {
		return nil, nil
	}
	lf := in.def
	if in.limiterFunc != nil {
		lf = in.fieldsOf(in.limiterFunc(ctx, method))
	}
	key, err := in.key(ctx, method)
	if err == nil && key == "" {
		err = errors.New("grpclimit: empty rate limit key")
	}
	if err != nil {
		return nil, in.reject(ctx, err)
	}
	cost := int64(1)
	if in.cost != nil {
		if cost, err = in.cost(ctx, method); err != nil {
			return nil, in.reject(ctx, err)
		}
	}
	res, err := in.decide(ctx, lf.lim, key, cost)
	if err != nil {
		return nil, in.failed(ctx, key, err)
	}
	in.succeeded()
	md := metadata.MD{
		PolicyMetadata: {lf.policyField},
		LimitMetadata:  {limitField(lf, res)},
	}
	if res.Allowed || cost == 0 {
		_ = hs.SetHeader(md) // fails only once the header is sent, by an outer interceptor
		return &decision{in: in, lim: lf, key: key, cost: cost, res: res}, nil
	}
	// A denial is answered in the trailers alone (a Trailers-Only
	// response): a client that received a header could not retry.
	md[RetryAfterMetadata] = []string{ratelimitfield.RetryAfter(res.RetryAfter)}
	md[PushbackMetadata] = pushback(res)[PushbackMetadata]
	hs.SetTrailer(md)
	return nil, in.denied(lf, key, res)
}

// limitField is the value of the ratelimit field for res.
func limitField(lf *limiterFields, res ratekeeper.Result) string {
	if res.Parts == nil {
		return limitItem(lf.names[0], res)
	}
	items := make([]string, len(res.Parts))
	for i, p := range res.Parts {
		items[i] = limitItem(lf.names[i], p)
	}
	return ratelimitfield.List(items)
}

// limitItem is res as an item of the ratelimit field: t is RetryAfter on
// a denial, else ResetAfter, as httplimit writes it.
func limitItem(name ratelimitfield.Name, res ratekeeper.Result) string {
	t := res.ResetAfter
	if !res.Allowed {
		t = res.RetryAfter
	}
	return ratelimitfield.Limit(name, res.Remaining, t)
}

func pushback(res ratekeeper.Result) metadata.MD {
	return metadata.MD{PushbackMetadata: {strconv.FormatInt(ratelimitfield.Milliseconds(res.RetryAfter), 10)}}
}

// denied is the status of a call denied by res: ResourceExhausted, with
// the exact wait in a RetryInfo, and in a QuotaFailure one violation per
// policy that denied, whose subject is the key.
func (in *interceptor) denied(lf *limiterFields, key string, res ratekeeper.Result) error {
	st := status.New(codes.ResourceExhausted, "grpclimit: rate limit exceeded, retry in "+res.RetryAfter.String())
	qf := &errdetails.QuotaFailure{}
	parts := res.Parts
	if parts == nil {
		parts = []ratekeeper.Result{res}
	}
	specs := lf.lim.Spec().Policies()
	for i, p := range parts {
		if p.Allowed || i >= len(specs) {
			continue
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     key,
			Description: fmt.Sprintf("%s: %d per %v", specs[i].Name(), specs[i].Limit(), specs[i].Window()),
		})
	}
	wd, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)}, qf)
	if err != nil { // cannot happen: both details marshal
		return st.Err()
	}
	return wd.Err()
}

// decide asks l, waiting no longer than the store timeout.
func (in *interceptor) decide(ctx context.Context, l *ratekeeper.Limiter, key string, cost int64) (ratekeeper.Result, error) {
	if in.timeout <= 0 {
		return l.AllowN(ctx, key, cost)
	}
	ctx, cancel := context.WithTimeout(ctx, in.timeout)
	defer cancel()
	res, err := l.AllowN(ctx, key, cost)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("grpclimit: no decision within %v: %w", in.timeout, err)
	}
	return res, err
}

// reject is the status of a call that cannot be limited: its key or cost
// cannot be derived, or is invalid. A status the KeyFunc or CostFunc
// returned is kept; any other error is InvalidArgument.
func (in *interceptor) reject(ctx context.Context, err error) error {
	in.log().LogAttrs(ctx, slog.LevelDebug, "grpclimit: call cannot be limited", slog.Any("err", err))
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// failed is the status of a call whose decision failed with err: the
// client's fault (an invalid key or cost), the client gone, or the store
// failed, when the failure policy applies. nil serves the call.
func (in *interceptor) failed(ctx context.Context, key string, err error) error {
	switch {
	case errors.Is(err, ratekeeper.ErrInvalidKey), errors.Is(err, ratekeeper.ErrInvalidCost):
		// The call's fault, not the store's: failing open here would let
		// a client skip the limit with an oversized key.
		return in.reject(ctx, err)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err() // the client has gone
	}
	in.logFailure(ctx, key, err)
	if in.failClosed {
		return status.Error(codes.Unavailable, "grpclimit: rate limiter unavailable")
	}
	return nil
}

// maxKinds bounds the kinds of failure counted; the rest count as one.
const maxKinds = 16

// failureKind names the kind of a store failure, for the log: "timeout",
// or the text of the innermost error (such as "connection refused"), at
// most 100 bytes of it.
func failureKind(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			break
		}
		err = u
	}
	kind := err.Error()
	if len(kind) > 100 {
		kind = kind[:100]
	}
	return kind
}

// logFailure logs the first failure of each kind since the limiter last
// decided, at level Error; the rest are counted, and their number logged
// when the limiter decides again. A store outage is then a few lines in
// the log, not one per call.
func (in *interceptor) logFailure(ctx context.Context, key string, err error) {
	kind := failureKind(err)
	in.mu.Lock()
	if _, ok := in.logged[kind]; !ok && len(in.logged) >= maxKinds {
		kind = "other"
	}
	n := in.logged[kind]
	in.logged[kind] = n + 1
	in.failing.Store(true)
	in.mu.Unlock()
	if n > 0 {
		return
	}
	mode := "open"
	if in.failClosed {
		mode = "closed"
	}
	in.log().LogAttrs(ctx, slog.LevelError, "grpclimit: rate limiter failed",
		slog.String("key", key), slog.Any("err", err), slog.String("kind", kind), slog.String("fail", mode))
}

// succeeded notes a decision: if the limiter was failing, it logs how
// many failures of each kind were not logged, and starts counting again.
func (in *interceptor) succeeded() {
	if !in.failing.Load() {
		return
	}
	in.mu.Lock()
	counts := in.logged
	if !in.failing.Swap(false) {
		in.mu.Unlock()
		return
	}
	in.logged = map[string]int{}
	in.mu.Unlock()
	for kind, n := range counts {
		in.log().LogAttrs(context.Background(), slog.LevelInfo, "grpclimit: rate limiter decides again",
			slog.String("kind", kind), slog.Int("failures", n))
	}
}

func (in *interceptor) log() *slog.Logger {
	if in.logger != nil {
		return in.logger
	}
	return slog.Default()
}
