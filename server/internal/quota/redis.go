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
	if err := r.Check(); err != nil {
		return Grant{}, err
	}
	now := ""
	if s.Now != nil {
		now = strconv.FormatInt(s.Now().UnixMilli(), 10)
	}
	demand := max(min(req.Demand, MaxDemand), -1)
	reply, err := stepScript.Run(ctx, s.Client, []string{s.Prefix + key}, now, r.Rate, r.Unit, r.Burst,
		req.Holder, demand, req.TTL, req.Slack).Int64Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("quota: step of %q: %w", key, err)
	}
	if len(reply) != 3 {
		return Grant{}, fmt.Errorf("quota: step of %q: a reply of %d integers", key, len(reply))
	}
	return Grant{Kind: Kind(reply[0]), Hold: Hold{Tokens: reply[1], Rate: reply[2]}}, nil
}
