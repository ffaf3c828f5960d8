package redisstore

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/seedscript"
)

// modeBlocks matches the functions of the modes a lone decision does not
// run: charges, refunds and leases, each from its comment to its end.
var modeBlocks = regexp.MustCompile(`(?ms)^(?:--[^\n]*\n)*function (?:charges|refunds|leases)\.\w+\(.*?^end\n`)

// BenchmarkScriptForms measures the Redis time of one lone token bucket
// decision (INFO commandstats, µs per call) in each form a script can
// take: an empty EVALSHA; the script by EVALSHA, which defines every
// mode's functions on each call; a script with only the decision's; the
// script's library, loaded once with FUNCTION LOAD, called with FCALL
// (what redisstore sends); and the seed's script. One caller, one key, on a server of its own; the forms
// alternate, rounds times. Run it alone:
//
//	./scripts/with-redis.sh go test -run '^$' -bench ScriptForms -benchtime 1x ./redisstore/
func BenchmarkScriptForms(b *testing.B) {
	srv := redistest.StartServer(b)
	client := srv.Client()
	ctx := context.Background()
	s := luaScript([]string{driver.AlgorithmTokenBucket}, "single")
	decideOnly := modeBlocks.ReplaceAllString(s.src, "")
	if strings.Contains(decideOnly, "function charges.") || len(decideOnly) == len(s.src) {
		b.Fatal("the decision's script still holds the other modes' functions")
	}
	if err := client.FunctionLoadReplace(ctx, s.lib).Err(); err != nil {
		b.Fatalf("FUNCTION LOAD: %v", err)
	}
	// A bucket that never runs dry: every call allowed, and written.
	args := []any{1, "", serverClockSlack, int64(1e15), int64(1e15), int64(1e6), 0, int(driver.Take)}
	seedArgs := []any{1e9, 1e9, 1.0, 0.0}
	type form struct {
		name, cmd string
		call      func(key string) error
	}
	script := func(src string) func(string) error {
		s := redis.NewScript(src)
		return func(key string) error { return s.Run(ctx, client, []string{key}, args...).Err() }
	}
	empty := redis.NewScript("return 1")
	seedScript := redis.NewScript(seedscript.Source)
	forms := []form{
		{"empty EVALSHA", "evalsha", func(key string) error { return empty.Run(ctx, client, []string{key}).Err() }},
		{"the script", "evalsha", script(s.src)},
		{"the decision's functions only", "evalsha", script(decideOnly)},
		{"FUNCTION LOAD + FCALL", "fcall", func(key string) error {
			return client.Do(ctx, append([]any{"FCALL", s.fn, 1, key}, args...)...).Err()
		}},
		{"seed", "evalsha", func(key string) error {
			seedArgs[3] = float64(time.Now().UnixMicro()) / 1e6
			return seedScript.Run(ctx, client, []string{"seed:" + key}, seedArgs...).Err()
		}},
	}
	const calls, rounds = 20000, 5
	usec := make([][]float64, len(forms))
	for range b.N {
		for range rounds {
			for i, f := range forms {
				if err := f.call("warm"); err != nil {
					b.Fatalf("%s: %v", f.name, err)
				}
				client.ConfigResetStat(ctx)
				for j := range calls {
					if err := f.call("k" + strconv.Itoa(j%100)); err != nil {
						b.Fatalf("%s: %v", f.name, err)
					}
				}
				usec[i] = append(usec[i], usecPerCall(b, client, f.cmd))
			}
		}
	}
	seed := median(usec[len(forms)-1])
	for i, f := range forms {
		m := median(usec[i])
		b.Logf("%-32s %5.2f µs per call (÷ seed %.2f); rounds %v", f.name, m, m/seed, usec[i])
		b.ReportMetric(m, strings.ReplaceAll(f.name, " ", "_")+"_µs")
	}
}

// usecPerCall reads INFO commandstats' usec_per_call of cmd.
func usecPerCall(b *testing.B, client *redis.Client, cmd string) float64 {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=\d+,usec=\d+,usec_per_call=([\d.]+)`).FindStringSubmatch(info)
	if m == nil {
		b.Fatalf("no %s in %s", cmd, info)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// median is the middle of xs (the higher of the two for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
