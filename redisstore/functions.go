package redisstore

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// functions is how a store's scripts reach Redis: as functions (FCALL)
// of libraries that Redis keeps once loaded, or, where Redis refuses
// them, by EVALSHA. Each library is loaded on a server the first time a
// call there finds its function missing: on a new server, after a
// restart without persistence, after FUNCTION FLUSH. The call itself is
// then sent again by EVALSHA, so that it never depends on the load.
type functions struct {
	// off: Redis refused FCALL or FUNCTION LOAD (a server older than 7,
	// or an ACL), or the client is one whose servers a load cannot reach
	// by key: scripts go by EVALSHA from then on.
	off atomic.Bool
}

// newFunctions returns the functions of a store over client: on for a
// client of one server (Sentinel's included) and for a Cluster's.
func newFunctions(client redis.UniversalClient) *functions {
	f := &functions{}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		f.off.Store(true)
	}
	return f
}

// first is the form a call is sent in first.
func (f *functions) first() form {
	if f.off.Load() {
		return evalsha
	}
	return fcall
}

// missing reports whether err, an FCALL's of s on key, says that the
// function did not run, and the call must go again by EVALSHA: either it
// is missing, and its library is loaded on the key's server; or Redis
// refuses functions, and the store stops using them; or Redis refuses
// writes (OOM under noeviction, or a replica: READONLY). A function that
// may write is refused before it runs, where a script is refused only
// at its first write, so that a peek or a denial, which write nothing,
// are still answered.
func (f *functions) missing(ctx context.Context, client redis.UniversalClient, err error, s *script, key string) bool {
	switch {
	case hasErrorPrefix(err, "OOM") || hasErrorPrefix(err, "READONLY"):
		return true
	case refusesFunctions(err):
		f.off.Store(true)
		return true
	case isNoFunction(err):
		if refusesFunctions(load(ctx, client, s, key)) {
			f.off.Store(true)
		}
		return true
	}
	return false
}

// load loads s's library on the server of key. A library already there
// is no error: another client loaded it first.
func load(ctx context.Context, client redis.UniversalClient, s *script, key string) error {
	var node redis.Cmdable = client
	if c, ok := client.(*redis.ClusterClient); ok {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = m
	}
	err := node.FunctionLoad(ctx, s.lib).Err()
	if replySays(err, "already exists") {
		return nil
	}
	return err
}
