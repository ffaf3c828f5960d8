package quota

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed quota.lua
var stepSource string

var stepScript = redis.NewScript(stepSource)

// Redis keeps quota buckets' states in Redis, one hash per bucket, and
// steps them with quota.lua, the model of State.Step, on Redis's clock:
// replicas that share it share the buckets. In a Cluster, each bucket is
// one key, on one master.
type Redis struct {
	Client redis.UniversalClient
	// Prefix comes before every bucket's key.
	Prefix string
	// Now, when set, is the time of each step instead of Redis's
	// clock (tests).
	Now func() time.Time
}

// Step makes req's step on the bucket at key under r.
func (s *Redis) Step(ctx context.Context, key string, r Rule, req Request) (Grant, error) {
	gs, err := s.StepAll(ctx, []Step{{Key: key, Rule: r, Request: req}})
	if err != nil {
		return Grant{}, err
	}
	return gs[0], nil
}

// StepAll makes steps in one round trip (a pipeline, which a Cluster
// client splits by master) and returns their grants, in order. After an
// error, some steps may have been made: their holds count, unsent, until
// they end, which only lowers what the others may hold.
func (s *Redis) StepAll(ctx context.Context, steps []Step) ([]Grant, error) {
	for _, st := range steps {
		if err := st.Rule.Check(); err != nil {
			return nil, err
		}
	}
	now := ""
	if s.Now != nil {
		now = strconv.FormatInt(s.Now().UnixMilli(), 10)
	}
	args := func(st Step) []any {
		return []any{now, st.Rule.Rate, st.Rule.Unit, st.Rule.Burst,
			st.Request.Holder, max(min(st.Request.Demand, MaxDemand), -1), st.Request.TTL, st.Request.Slack}
	}
	cmds := make([]*redis.Cmd, len(steps))
	_, err := s.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, st := range steps {
			cmds[i] = stepScript.EvalSha(ctx, p, []string{s.Prefix + st.Key}, args(st)...)
		}
		return nil
	})
	if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return nil, fmt.Errorf("quota: %d steps: %w", len(steps), err)
	}
	grants := make([]Grant, len(steps))
	for i, st := range steps {
		cmd := cmds[i]
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			// Not loaded yet on its server: Run loads it.
			cmd = stepScript.Run(ctx, s.Client, []string{s.Prefix + st.Key}, args(st)...)
		}
		reply, err := cmd.Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("quota: step of %q: %w", st.Key, err)
		}
		if len(reply) != 3 {
			return nil, fmt.Errorf("quota: step of %q: a reply of %d integers", st.Key, len(reply))
		}
		grants[i] = Grant{Kind: Kind(reply[0]), Hold: Hold{Tokens: reply[1], Rate: reply[2]}}
	}
	return grants, nil
}
