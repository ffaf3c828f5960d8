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

// Stepper steps quota buckets: quota.Redis, shared by replicas, or
// quota.Memory.
type Stepper interface {
	Step(ctx context.Context, key string, r quotas.Rule, req quotas.Request) (quotas.Grant, error)
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
}

// Quota is the rate limit quota service (envoy.service.rate_limit_quota.v3),
// dividing each quota bucket's limit among the Envoys that share it.
type Quota struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	svc   *Service
	steps Stepper
	opts  QuotaOptions
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
	return &Quota{svc: svc, steps: steps, opts: opts}
}

// Limits of a stream's messages.
const (
	maxBucketEntries   = 32
	maxBucketEntrySize = 256
)

// streamBucket is one of a stream's buckets.
type streamBucket struct {
	idKey    string // its key in the stream's buckets
	proto    *rlqsv3.BucketId
	rule     *config.QuotaBucket
	key      string
	requests int64 // allowed + denied since the last step
	last     time.Time
	stepped  bool
}

// StreamRateLimitQuotas serves one Envoy's stream: its reports subscribe
// buckets and report their use; every quarter TTL, and at once for a
// bucket it subscribes, the stream is sent each bucket's assignment.
func (q *Quota) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	var raw [16]byte
	rand.Read(raw[:])
	holder := hex.EncodeToString(raw[:])
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
	domain := ""
	buckets := map[string]*streamBucket{}
	tick := time.NewTicker(q.opts.TTL / 4)
	defer tick.Stop()
	for {
		var fresh []*streamBucket
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case m := <-reports:
			// Not m.Validate(): Envoy's first report of a bucket has a
			// time_elapsed of 0, which its own validation refuses.
			if m.GetDomain() == "" {
				return status.Error(codes.InvalidArgument, "rlqs: a report without a domain")
			}
			if domain == "" {
				domain = m.GetDomain()
			} else if m.GetDomain() != domain {
				return status.Errorf(codes.InvalidArgument, "rlqs: the domain changed mid-stream, from %q to %q", domain, m.GetDomain())
			}
			var cfg *config.Config
			if snap := q.svc.current.Load(); snap != nil {
				cfg = snap.cfg
			}
			for _, u := range m.GetBucketQuotaUsages() {
				key, id, err := bucketKey(u.GetBucketId())
				if err != nil {
					return status.Error(codes.InvalidArgument, err.Error())
				}
				b := buckets[key]
				if b == nil {
					if len(buckets) >= q.opts.MaxBuckets {
						continue // past the stream's bound: left to no_assignment_behavior
					}
					b = &streamBucket{idKey: key, proto: u.GetBucketId(), last: time.Now()}
					buckets[key] = b
					fresh = append(fresh, b)
				}
				if cfg != nil {
					b.rule, b.key = cfg.QuotaBucket(domain, id)
				}
				b.requests += int64(u.GetNumRequestsAllowed() + u.GetNumRequestsDenied())
			}
		case <-tick.C:
			for _, b := range buckets {
				fresh = append(fresh, b)
			}
		}
		if len(fresh) == 0 {
			continue
		}
		resp, err := q.assign(ctx, domain, holder, fresh, buckets)
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

// assign steps bs and returns their actions.
func (q *Quota) assign(ctx context.Context, domain, holder string, bs []*streamBucket, all map[string]*streamBucket) (*rlqsv3.RateLimitQuotaResponse, error) {
	resp := &rlqsv3.RateLimitQuotaResponse{}
	now := time.Now()
	for _, b := range bs {
		if b.rule == nil {
			resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
				BucketId: b.proto,
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
					AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
			})
			delete(all, b.idKey)
			continue
		}
		r := b.rule.Rule()
		demand := int64(-1)
		if b.stepped {
			elapsed := max(now.Sub(b.last).Milliseconds(), 1)
			demand = b.requests * r.Unit / elapsed
		}
		g, err := q.steps.Step(ctx, "rlqs:"+domain+":"+b.key, r, quotas.Request{Holder: holder, Demand: demand,
			TTL: q.opts.TTL.Milliseconds(), Slack: q.opts.Slack.Milliseconds()})
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "rlqs: %v", err)
		}
		b.requests, b.last, b.stepped = 0, now, true
		strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{
			BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
		if g.Kind != quotas.Deny {
			strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
				TokenBucket: &typev3.TokenBucket{
					MaxTokens:     uint32(g.Hold.Tokens),
					TokensPerFill: wrapperspb.UInt32(uint32(g.Hold.Rate)),
					FillInterval:  durationpb.New(b.rule.Unit),
				}}}
		}
		resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: b.proto,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(q.opts.TTL),
					RateLimitStrategy:    strategy,
				}},
		})
	}
	return resp, nil
}

// bucketKey returns a bucket id's entries, and a key of them that does
// not depend on their order.
func bucketKey(id *rlqsv3.BucketId) (string, map[string]string, error) {
	m := id.GetBucket()
	if len(m) == 0 || len(m) > maxBucketEntries {
		return "", nil, fmt.Errorf("rlqs: a bucket id of %d entries: 1 to %d", len(m), maxBucketEntries)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if len(k) > maxBucketEntrySize || len(v) > maxBucketEntrySize {
			return "", nil, fmt.Errorf("rlqs: a bucket id entry of %d and %d bytes: at most %d each", len(k), len(v), maxBucketEntrySize)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return b.String(), m, nil
}

// RegisterQuota registers q as envoy.service.rate_limit_quota.v3's
// RateLimitQuotaService on g.
func RegisterQuota(g *grpc.Server, q *Quota) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, q)
}
