// Package quotafilter is Envoy's rate limit quota filter for one bucket,
// as its source (source/extensions/filters/http/rate_limit_quota/,
// global_client_impl.cc) behaves, over a real RateLimitQuotaService
// stream: the client side of the service's tests and benchmark.
//
//   - A bucket's first request subscribes it (an immediate report) and is
//     decided by no_assignment_behavior, here deny_all.
//   - Reports go every reporting interval, with the requests allowed and
//     denied since the last one, and time_elapsed in whole seconds.
//   - A token_bucket assignment starts a new, full bucket, unless its
//     max_tokens and tokens_per_fill are those of the bucket held, which is
//     then carried over; the fill rate is tokens_per_fill per whole
//     seconds of fill_interval.
//   - An assignment lasts its TTL's whole seconds from receipt; then the
//     bucket reverts to no_assignment_behavior. A blanket rule or an
//     abandon action drops the bucket.
//   - A broken stream is opened again at the next report; assignments
//     held stay until their TTL.
package quotafilter

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Filter is one Envoy's filter for one bucket. Admit may be called from
// any goroutine.
type Filter struct {
	domain   string
	bucket   map[string]string
	interval time.Duration
	// OnAssign, if set before Run, is called with each token bucket
	// received: its tokens_per_fill per second and max_tokens.
	OnAssign func(at time.Time, rate, max float64)

	mu              sync.Mutex
	has             bool
	max, rate       float64 // tokens, and tokens per second
	tokens          float64
	last, ends      time.Time
	allowed, denied uint64
	subscribed      bool
	subscribe       chan struct{} // a first request's report, due
	invalid         []error
}

// New is the filter of bucket in domain, reporting every interval
// (reporting_interval).
func New(domain string, bucket map[string]string, interval time.Duration) *Filter {
	return &Filter{domain: domain, bucket: bucket, interval: interval, subscribe: make(chan struct{}, 1)}
}

// Invalid returns the errors of the service's messages that did not
// validate (go-control-plane's Validate), none if every one did.
func (f *Filter) Invalid() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.invalid
}

// Admit decides one request at now: whether the bucket's assignment
// allows it.
func (f *Filter) Admit(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.subscribed {
		f.subscribed = true
		select {
		case f.subscribe <- struct{}{}:
		default: // one is pending
		}
	}
	if f.has && !now.Before(f.ends) {
		f.has = false
	}
	ok := false
	if f.has {
		f.tokens = min(f.max, f.tokens+f.rate*now.Sub(f.last).Seconds())
		f.last = now
		if f.tokens >= 1 {
			f.tokens--
			ok = true
		}
	}
	if ok {
		f.allowed++
	} else {
		f.denied++
	}
	return ok
}

func (f *Filter) receive(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	qa := a.GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		f.has = false
		if qa == nil {
			f.subscribed = false // abandoned: the next request subscribes again
		}
		return
	}
	seconds := float64(int64(tb.GetFillInterval().AsDuration().Seconds()))
	m, r := float64(tb.GetMaxTokens()), float64(tb.GetTokensPerFill().GetValue())/seconds
	if !f.has || m != f.max || r != f.rate {
		f.max, f.rate, f.tokens, f.last = m, r, m, now
	}
	f.has = true
	f.ends = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	if f.OnAssign != nil {
		f.OnAssign(now, r, m)
	}
}

func (f *Filter) report(elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: f.bucket},
		NumRequestsAllowed: f.allowed, NumRequestsDenied: f.denied,
		TimeElapsed: durationpb.New(elapsed.Truncate(time.Second))}
	f.allowed, f.denied = 0, 0
	return &rlqsv3.RateLimitQuotaUsageReports{Domain: f.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{u}}
}

// Run keeps the filter's stream to client until ctx ends: a report at
// the bucket's first request, then every Interval.
func (f *Filter) Run(ctx context.Context, client rlqsv3.RateLimitQuotaServiceClient) {
	interval := f.interval
	var stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	broken := make(chan rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, 1)
	open := func() {
		s, err := client.StreamRateLimitQuotas(ctx)
		if err != nil {
			return
		}
		stream = s
		go func() {
			for {
				resp, err := s.Recv()
				if err != nil {
					select {
					case broken <- s:
					case <-ctx.Done():
					}
					return
				}
				now := time.Now()
				if err := resp.Validate(); err != nil {
					f.mu.Lock()
					f.invalid = append(f.invalid, err)
					f.mu.Unlock()
				}
				for _, a := range resp.GetBucketAction() {
					f.receive(a, now)
				}
			}
		}()
	}
	var last time.Time
	send := func(now time.Time) {
		if stream == nil {
			open()
		}
		var elapsed time.Duration
		if !last.IsZero() {
			elapsed = now.Sub(last)
		}
		if stream != nil && stream.Send(f.report(elapsed)) != nil {
			stream = nil
		}
		last = now
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-broken:
			if s == stream {
				stream = nil
			}
		case <-f.subscribe:
			send(time.Now())
			tick.Reset(interval)
		case now := <-tick.C:
			send(now)
		}
	}
}

// Offer calls do demand(t) times per second until ctx ends, on 1 ms
// ticks, each tick's share jittered by ±50 % (seeded by seed).
func Offer(ctx context.Context, seed uint64, demand func(time.Time) float64, do func(time.Time)) {
	rng := rand.New(rand.NewPCG(seed, 3))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var carry float64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			carry += demand(now) / 1000 * (0.5 + rng.Float64())
			for ; carry >= 1; carry-- {
				do(now)
			}
		}
	}
}

// PastTheBound replays admissions, sorted, through the rule's own token
// bucket, rate per second with a burst of rate, full at begin: it returns
// how many found it empty, past the rule's bound (burst + rate × window)
// in some window, and the first of them, -1 for none.
func PastTheBound(times []time.Time, rate float64, begin time.Time) (n, first int) {
	first = -1
	level, last := rate, begin
	for i, at := range times {
		level = min(rate, level+rate*at.Sub(last).Seconds())
		last = at
		if level--; level < -1e-6 {
			if n++; first < 0 {
				first = i
			}
			level = 0
		}
	}
	return n, first
}
