package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook (client.AddHook) that counts what a client
// sends: commands alone, pipelines, and the commands in those pipelines.
type Counter struct {
	Commands, Pipelines, Pipelined atomic.Int64
}

// Sent returns the number of commands sent, alone or pipelined.
func (c *Counter) Sent() int64 { return c.Commands.Load() + c.Pipelined.Load() }

// DialHook counts nothing.
func (*Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts a command sent alone.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Commands.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts a pipeline and its commands.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Pipelines.Add(1)
		c.Pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
