package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// cost is what one run of decisions cost the server, per decision.
type cost struct {
	usec    float64 // script time, including the commands it calls
	calls   float64 // commands called from scripts
	allowed float64 // share of decisions allowed
}

// notScripted are commands in commandstats that scripts do not call.
var notScripted = map[string]bool{
	"evalsha": true, "eval": true, "fcall": true, "function": true, "script": true, "config": true, "info": true,
	"hello": true, "client": true, "ping": true, "del": true, "memory": true,
}

// measureCost runs seq's decisions from fresh keys and reads their cost
// from INFO commandstats.
func measureCost(ctx context.Context, rdb *redis.Client, s subject, callers []string, seq []int) (cost, error) {
	if err := deleteKeys(ctx, rdb, s, callers); err != nil {
		return cost{}, err
	}
	if err := s.load(ctx); err != nil {
		return cost{}, err
	}
	decide := s.allow
	if s.decide != nil {
		decide = s.decide
	}
	if s.prepare != nil {
		if err := callEach(ctx, s.prepare, callers, seq); err != nil {
			return cost{}, err
		}
	}
	t, err := timeCalls(ctx, rdb, decide, callers, seq)
	return t.perCall(), err
}

// spent is what a stretch of calls cost the server, in totals.
type spent struct {
	n, allowed  int
	usec, calls float64 // as in cost
}

func (t spent) add(u spent) spent {
	return spent{t.n + u.n, t.allowed + u.allowed, t.usec + u.usec, t.calls + u.calls}
}

// perCall divides the totals by the number of calls.
func (t spent) perCall() cost {
	d := float64(t.n)
	return cost{usec: t.usec / d, calls: t.calls / d, allowed: float64(t.allowed) / d}
}

// callEach calls decide for seq's callers, untimed.
func callEach(ctx context.Context, decide decideFunc, callers []string, seq []int) error {
	for _, i := range seq {
		if _, err := decide(ctx, callers[i]); err != nil {
			return err
		}
	}
	return nil
}

// timeCalls resets the server's statistics, calls decide for seq's
// callers, and reads what they cost from INFO commandstats. Every script
// call must be one of them.
func timeCalls(ctx context.Context, rdb *redis.Client, decide decideFunc, callers []string, seq []int) (spent, error) {
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return spent{}, err
	}
	t := spent{n: len(seq)}
	for _, i := range seq {
		ok, err := decide(ctx, callers[i])
		if err != nil {
			return spent{}, err
		}
		if ok {
			t.allowed++
		}
	}
	info, err := rdb.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return spent{}, err
	}
	var scripts int64
	for name, v := range info["Commandstats"] {
		cmd := strings.TrimPrefix(name, "cmdstat_")
		calls, usec, err := parseCommandStat(v)
		if err != nil {
			return spent{}, fmt.Errorf("%s: %w", name, err)
		}
		switch {
		case cmd == "evalsha" || cmd == "eval" || cmd == "fcall":
			scripts += calls
			t.usec += float64(usec)
		case !notScripted[cmd]:
			t.calls += float64(calls)
		}
	}
	if scripts != int64(len(seq)) {
		return spent{}, fmt.Errorf("%d script calls for %d decisions: is another client using this Redis?", scripts, len(seq))
	}
	return t, nil
}

// parseCommandStat reads calls and usec from a commandstats value such as
// "calls=3,usec=12,usec_per_call=4.00,rejected_calls=0,failed_calls=0".
func parseCommandStat(v string) (calls, usec int64, err error) {
	var seen int
	for field := range strings.SplitSeq(v, ",") {
		name, val, _ := strings.Cut(field, "=")
		var p *int64
		switch name {
		case "calls":
			p = &calls
		case "usec":
			p = &usec
		default:
			continue
		}
		if *p, err = strconv.ParseInt(val, 10, 64); err != nil {
			return 0, 0, err
		}
		seen++
	}
	if seen != 2 {
		return 0, 0, errors.New("no calls or usec in " + strconv.Quote(v))
	}
	return calls, usec, nil
}
