// Command envoyoracle answers with envoyproxy/ratelimit's own configuration
// loader, for the tests of package config: it loads every file of a
// directory as envoy does, then looks up descriptors. It reads a JSON
// request on stdin and writes a JSON answer on stdout. The tests build it
// in a module of its own, so envoy's dependencies never reach the server's.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	pb_struct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
)

type entry struct{ Key, Value string }

type query struct {
	Domain  string
	Entries []entry
}

type request struct {
	Dir     string
	Queries []query
}

type limit struct {
	Found           bool
	RequestsPerUnit uint32
	Unit            string
	Unlimited       bool
	Shadow          bool
	Quota           bool
	Name            string
	Replaces        []string
	Detailed        bool
	Shared          []string
	FullKey         string
}

type answer struct {
	Error   string
	Results []limit
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ans := run(req)
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func run(req request) (ans answer) {
	defer func() {
		if e := recover(); e != nil {
			ans = answer{Error: fmt.Sprint(e)}
		}
	}()
	entries, err := os.ReadDir(req.Dir)
	if err != nil {
		return answer{Error: err.Error()}
	}
	var files []config.RateLimitConfigToLoad
	for _, e := range entries {
		name := filepath.Join(req.Dir, e.Name())
		b, err := os.ReadFile(name)
		if err != nil {
			return answer{Error: err.Error()}
		}
		files = append(files, config.RateLimitConfigToLoad{Name: name, ConfigYaml: config.ConfigFileContentToYaml(name, string(b))})
	}
	sm := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.NewSettings())
	c := config.NewRateLimitConfigImpl(files, sm, false)
	for _, q := range req.Queries {
		d := &pb_struct.RateLimitDescriptor{}
		for _, e := range q.Entries {
			d.Entries = append(d.Entries, &pb_struct.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
		}
		rl := c.GetLimit(context.Background(), q.Domain, d)
		if rl == nil {
			ans.Results = append(ans.Results, limit{})
			continue
		}
		ans.Results = append(ans.Results, limit{
			Found:           true,
			RequestsPerUnit: rl.Limit.RequestsPerUnit,
			Unit:            rl.Limit.Unit.String(),
			Unlimited:       rl.Unlimited,
			Shadow:          rl.ShadowMode,
			Quota:           rl.QuotaMode,
			Name:            rl.Name,
			Replaces:        rl.Replaces,
			Detailed:        rl.DetailedMetric,
			Shared:          rl.ShareThresholdKeyPattern,
			FullKey:         rl.FullKey,
		})
	}
	return ans
}
