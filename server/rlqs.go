package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/server/config"
	quotas "github.com/ratekeeper/ratekeeper/server/internal/quota"
)

// Stepper steps quota buckets, a stream's due ones at once: quota.Redis,
// shared by replicas, in one round trip, or quota.Memory.
type Stepper interface {
	StepAll(ctx context.Context, steps []quotas.Step) ([]quotas.Grant, error)
}

// QuotaOptions configure the rate limit quota service.
type QuotaOptions struct {
	// TTL is each assignment's assignment_time_to_live, whole seconds
	// (Envoy reads only its seconds): 1 s when 0.
	TTL time.Duration
	// Slack is how long an assignment may take to reach Envoy: a share
	// stays counted TTL + Slack after it was last sent. 250 ms when 0.
	Slack time.Duration
	// MaxBuckets bounds the buckets one stream may hold: 1,000 when 0.
	MaxBuckets int
	// MaxStreams bounds the streams open at once: 10,000 when 0. A
	// stream past it ends at once with RESOURCE_EXHAUSTED.
	MaxStreams int
	// Unmatched is the answer for a bucket id that no quota bucket
	// matches: Abandon when "".
	Unmatched Unmatched
}

// Unmatched is the answer for a bucket id that no quota bucket matches.
type Unmatched string

const (
	// Abandon sends an abandon_action: Envoy forgets the bucket, and
	// applies its no_assignment_behavior until a request subscribes it
	// again.
	Abandon Unmatched = "abandon"
	// AllowAll assigns blanket_rule ALLOW_ALL, refreshed while the bucket
	// is reported.
	AllowAll Unmatched = "allow_all"
	// DenyAll assigns blanket_rule DENY_ALL, refreshed while the bucket
	// is reported.
	DenyAll Unmatched = "deny_all"
)

// ParseUnmatched reads an Unmatched answer: abandon, allow_all or
// deny_all.
func ParseUnmatched(s string) (Unmatched, error) {
	switch u := Unmatched(s); u {
	case Abandon, AllowAll, DenyAll:
		return u, nil
	}
	return "", fmt.Errorf("rlqs: unmatched buckets get %q: abandon, allow_all or deny_all", s)
}

// Quota is the rate limit quota service (envoy.service.rate_limit_quota.v3),
// dividing each quota bucket's limit among the Envoys that share it.
type Quota struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	svc   *Service
	steps Stepper
	opts  QuotaOptions
	open  atomic.Int64 // streams open
	// unregistered are the metrics recorded when the service has none.
	unregistered quotaMetrics
}

// NewQuota returns the quota service of svc's configuration, stepping
// buckets with steps.
func NewQuota(svc *Service, steps Stepper, opts QuotaOptions) *Quota {
	if opts.TTL < time.Second {
		opts.TTL = time.Second
	}
	opts.TTL = opts.TTL.Truncate(time.Second)
	if opts.Slack <= 0 {
		opts.Slack = 250 * time.Millisecond
	}
	if opts.MaxBuckets <= 0 {
		opts.MaxBuckets = 1000
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 10_000
	}
	if opts.Unmatched == "" {
		opts.Unmatched = Abandon
	}
	return &Quota{svc: svc, steps: steps, opts: opts, unregistered: newQuotaMetrics()}
}

// Limits of a stream's messages.
const (
	maxBucketEntries   = 32
	maxBucketEntrySize = 256
)

// streamBucket is one of a stream's buckets.
type streamBucket struct {
	idKey string // its key in the stream's buckets
	proto *rlqsv3.BucketId
	// rule is its quota bucket under cfg, the configuration it was
	// resolved in, and key its state's key; nil and "" when none matches.
	cfg  *config.Config
	rule *config.QuotaBucket
	key  string
	// requests are those reported (allowed + denied) since measured,
	// when its demand was last measured.
	requests int64
	measured time.Time
	demand   int64     // requests per unit of its rule; -1 until measured
	stepped  int64     // the demand of its last step
	shifted  time.Time // when its demand shifted, until its share settles
	due      bool      // to be stepped now
}

// StreamRateLimitQuotas serves one Envoy's stream: its reports subscribe
// buckets and report their use; every quarter TTL, at once for a bucket
// it subscribes, and at once for one whose demand shifts, the stream is
// sent the buckets' assignments.
func (q *Quota) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	defer q.open.Add(-1)
	if q.open.Add(1) > int64(q.opts.MaxStreams) {
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open, the most this service takes", q.opts.MaxStreams)
	}
	var raw [16]byte
	rand.Read(raw[:])
	s := &quotaStream{q: q, holder: hex.EncodeToString(raw[:]), buckets: map[string]*streamBucket{}, metrics: q.metrics()}
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	ctx := stream.Context()
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	s.metrics.streams.Inc()
	defer func() {
		s.metrics.streams.Dec()
		s.metrics.buckets.Sub(float64(len(s.buckets)))
	}()
	tick := time.NewTicker(q.opts.TTL / 4)
	defer tick.Stop()
	for {
		var due []*streamBucket
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case m := <-reports:
			var err error
			if due, err = s.report(m); err != nil {
				return err
			}
		case <-tick.C:
			for _, b := range s.buckets {
				due = markDue(due, b)
			}
		}
		if len(due) == 0 {
			continue
		}
		resp, err := s.assign(ctx, due)
		if err != nil {
			return err
		}
		if len(resp.BucketAction) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// quotaStream is one stream's state: its holder id in every bucket, its
// domain (that of its first report) and its buckets.
type quotaStream struct {
	q       *Quota
	holder  string
	domain  string
	buckets map[string]*streamBucket
	metrics *quotaMetrics
}

// report takes a report's counts, and returns the buckets to step at
// once: those it subscribes, and those whose demand shifted.
func (s *quotaStream) report(m *rlqsv3.RateLimitQuotaUsageReports) ([]*streamBucket, error) {
	// Not m.Validate(): Envoy's first report of a bucket has a
	// time_elapsed of 0, which its own validation refuses.
	if m.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rlqs: a report without a domain")
	}
	if s.domain == "" {
		s.domain = m.GetDomain()
	} else if m.GetDomain() != s.domain {
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: the domain changed mid-stream, from %q to %q", s.domain, m.GetDomain())
	}
	cfg, label := s.q.config(s.domain)
	s.metrics.reports.WithLabelValues(label).Inc()
	now := time.Now()
	var due []*streamBucket
	for _, u := range m.GetBucketQuotaUsages() {
		key, err := bucketKey(u.GetBucketId())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		b := s.buckets[key]
		if b == nil {
			if len(s.buckets) >= s.q.opts.MaxBuckets {
				continue // past the stream's bound: left to no_assignment_behavior
			}
			b = &streamBucket{idKey: key, proto: u.GetBucketId(), measured: now, demand: -1, stepped: -1}
			s.buckets[key] = b
			s.metrics.buckets.Inc()
			due = markDue(due, b)
			continue // its first report's counts precede any assignment
		}
		b.resolve(cfg, s.domain)
		b.requests = min(b.requests+int64(min(u.GetNumRequestsAllowed(), maxReported))+int64(min(u.GetNumRequestsDenied(), maxReported)), maxReported)
		if b.measure(now, s.q.opts.TTL/4) {
			due = markDue(due, b)
		}
	}
	return due, nil
}

// maxReported bounds the requests a report may count for a bucket, so
// that sums cannot overflow.
const maxReported = 1 << 40

func markDue(due []*streamBucket, b *streamBucket) []*streamBucket {
	if b.due {
		return due
	}
	b.due = true
	return append(due, b)
}

// resolve finds b's quota bucket in cfg, once per configuration.
func (b *streamBucket) resolve(cfg *config.Config, domain string) {
	if cfg == b.cfg {
		return // a new bucket's nil rule is nil cfg's too
	}
	b.cfg, b.rule, b.key = cfg, nil, ""
	if cfg == nil {
		return
	}
	if rule, key := cfg.QuotaBucket(domain, b.proto.GetBucket()); rule != nil {
		b.rule, b.key = rule, "rlqs:"+domain+":"+key
	}
}

// measure takes b's demand from the requests reported since it was last
// measured, once at least every has passed (reports may come faster
// than Envoy's interval), and reports whether it shifted by more than an
// eighth from that of b's last step: then b is stepped at once.
func (b *streamBucket) measure(now time.Time, every time.Duration) bool {
	elapsed := now.Sub(b.measured)
	if b.rule == nil || elapsed < every {
		return false
	}
	b.demand = int64(min(float64(b.requests)*float64(b.rule.Unit)/float64(elapsed), quotas.MaxDemand))
	b.requests, b.measured = 0, now
	if b.stepped >= 0 && quotas.Near(b.demand, b.stepped) {
		return false
	}
	if b.shifted.IsZero() {
		b.shifted = now
	}
	return true
}

// config is the configuration in use, if any, and domain's label.
func (q *Quota) config(domain string) (*config.Config, string) {
	snap := q.svc.current.Load()
	if snap == nil {
		return nil, ""
	}
	if !snap.cfg.HasDomain(domain) {
		return snap.cfg, ""
	}
	return snap.cfg, snap.labels.domain(domain)
}

// metrics are the service's quota metrics, or ones registered nowhere.
func (q *Quota) metrics() *quotaMetrics {
	if m := q.svc.opts.Metrics; m != nil {
		return &m.quota
	}
	return &q.unregistered
}

// assign steps bs, with the configuration in use, in one call of the
// stepper, and returns their actions.
func (s *quotaStream) assign(ctx context.Context, bs []*streamBucket) (*rlqsv3.RateLimitQuotaResponse, error) {
	q := s.q
	resp := &rlqsv3.RateLimitQuotaResponse{}
	domain := s.domain
	cfg, label := q.config(domain)
	qm := s.metrics
	var stepped []*streamBucket
	var steps []quotas.Step
	for _, b := range bs {
		b.due = false
		b.resolve(cfg, domain)
		switch {
		case b.rule != nil:
			stepped = append(stepped, b)
			steps = append(steps, quotas.Step{Key: b.key, Rule: b.rule.Rule(),
				Request: quotas.Request{Holder: s.holder, Demand: b.demand, TTL: q.opts.TTL.Milliseconds(), Slack: q.opts.Slack.Milliseconds()}})
		case q.opts.Unmatched == Abandon:
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
				BucketId: b.proto,
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
					AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
			})
			qm.assignments.WithLabelValues(label, actionAbandon).Inc()
			delete(s.buckets, b.idKey)
			qm.buckets.Dec()
		default:
			rule, action := typev3.RateLimitStrategy_ALLOW_ALL, actionAllow
			if q.opts.Unmatched == DenyAll {
				rule, action = typev3.RateLimitStrategy_DENY_ALL, actionDeny
			}
			resp.BucketAction = append(resp.BucketAction, q.assignment(b.proto, &typev3.RateLimitStrategy{
				Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}))
			qm.assignments.WithLabelValues(label, action).Inc()
		}
	}
	if len(steps) == 0 {
		return resp, nil
	}
	grants, err := q.steps.StepAll(ctx, steps)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "rlqs: %v", err)
	}
	now := time.Now()
	for i, b := range stepped {
		g, r := grants[i], steps[i].Rule
		b.stepped = b.demand
		strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{
			BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
		switch g.Kind {
		case quotas.Deny:
			qm.assignments.WithLabelValues(label, actionDeny).Inc()
		case quotas.Refresh:
			qm.assignments.WithLabelValues(label, actionRefresh).Inc()
			if !b.shifted.IsZero() {
				qm.converge.WithLabelValues(label).Observe(now.Sub(b.shifted).Seconds())
				b.shifted = time.Time{}
			}
		default:
			qm.assignments.WithLabelValues(label, actionNew).Inc()
		}
		if g.Kind != quotas.Deny {
			qm.share.WithLabelValues(label).Observe(float64(g.Hold.Rate) / float64(r.Rate))
			strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
				TokenBucket: &typev3.TokenBucket{
					MaxTokens:     uint32(g.Hold.Tokens),
					TokensPerFill: wrapperspb.UInt32(uint32(g.Hold.Rate)),
					FillInterval:  durationpb.New(b.rule.Unit),
				}}}
		}
		resp.BucketAction = append(resp.BucketAction, q.assignment(b.proto, strategy))
	}
	return resp, nil
}

// assignment is the action assigning strategy to bucket id for the TTL.
func (q *Quota) assignment(id *rlqsv3.BucketId, strategy *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(q.opts.TTL),
				RateLimitStrategy:    strategy,
			}},
	}
}

// bucketKey returns a key of a bucket id's entries that does not depend
// on their order.
func bucketKey(id *rlqsv3.BucketId) (string, error) {
	m := id.GetBucket()
	if len(m) == 0 || len(m) > maxBucketEntries {
		return "", fmt.Errorf("rlqs: a bucket id of %d entries: 1 to %d", len(m), maxBucketEntries)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if len(k) > maxBucketEntrySize || len(v) > maxBucketEntrySize {
			return "", fmt.Errorf("rlqs: a bucket id entry of %d and %d bytes: at most %d each", len(k), len(v), maxBucketEntrySize)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return b.String(), nil
}

// RegisterQuota registers q as envoy.service.rate_limit_quota.v3's
// RateLimitQuotaService on g.
func RegisterQuota(g *grpc.Server, q *Quota) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, q)
}
