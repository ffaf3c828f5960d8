package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// readyScript is a script that may write (it has a shebang and no
// no-writes flag) and touches no key: Redis refuses to run it while it
// refuses writes, out of memory under noeviction (OOM) or as a replica
// (READONLY), as it would refuse the decision scripts.
var readyScript = redis.NewScript("#!lua\nreturn 1")

// Ready reports whether Redis would decide now: every master (one, unless
// over a Cluster) answers, and accepts a script that may write. It is
// the service's readiness probe. Its success also ends the state in which
// calls fail at once with ErrUnreachable, so that the first decision
// after Redis returns is tried, not failed; a failure that says Redis is
// gone starts a probe, as a decision's would.
func (s *Store) Ready(ctx context.Context) error {
	var err error
	if c, ok := s.client.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return readyScript.Run(ctx, c, nil).Err()
		})
	} else {
		err = readyScript.Run(ctx, s.client, nil).Err()
	}
	if err != nil {
		s.breaker.failed(err)
		return err
	}
	s.breaker.reachable()
	return nil
}
