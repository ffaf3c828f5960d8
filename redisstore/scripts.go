package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algorithm is how one ratekeeper algorithm runs in Redis: the script of
// one request, and that of a batch (batch.lua). For All, script is
// all.lua's and batch is nil.
type algorithm struct {
	script   *redis.Script
	src      string
	batch    *redis.Script
	batchSrc string
	// lease is the script of a lease step (lease.lua), for an algorithm
	// that takes leases; nil for the others.
	lease *algorithm
}

// algorithms are the scripts of the algorithms registered with the driver
// that have a file lua/<name>.lua, by name.
var algorithms = map[string]*algorithm{}

// allScript decides for the policies of an All at once. It holds every
// algorithm's function.
var allScript *algorithm

func init() {
	var every []string
	for _, name := range driver.Algorithms() {
		if _, err := luaFiles.ReadFile("lua/" + name + ".lua"); err != nil {
			continue // an algorithm without a script: Decide refuses it
		}
		src, batchSrc := luaScript([]string{name}, "single"), luaScript([]string{name}, "batch")
		alg := &algorithm{script: redis.NewScript(src), src: src,
			batch: redis.NewScript(batchSrc), batchSrc: batchSrc}
		if strings.Contains(src, "function leases."+name+"(") {
			leaseSrc := luaScript([]string{name}, "lease")
			alg.lease = &algorithm{script: redis.NewScript(leaseSrc), src: leaseSrc}
		}
		algorithms[name] = alg
		every = append(every, name)
	}
	src := luaScript(every, "all")
	allScript = &algorithm{script: redis.NewScript(src), src: src}
}

// luaScript is a script as Redis receives it: lib.lua, the helpers the
// algorithms call, the files of the named algorithms, and the entry file
// (single, batch or all) that reads ARGV and calls them.
func luaScript(names []string, entry string) string {
	var src strings.Builder
	src.WriteString(luaFile("lib"))
	algs := make([]string, len(names))
	for i, name := range names {
		algs[i] = luaFile(name)
	}
	for _, helper := range luaHelpers {
		for _, alg := range algs {
			if strings.Contains(alg, helper+"(") {
				src.WriteString(luaFile(helper))
				break
			}
		}
	}
	for _, alg := range algs {
		src.WriteString(alg)
	}
	src.WriteString(luaFile(entry))
	return src.String()
}

// luaHelpers are the files of functions that algorithms may call, each
// file named after its function.
var luaHelpers = []string{"muldiv", "charge_count", "holds"}

// luaFile returns the embedded file lua/<name>.lua, and a blank line.
func luaFile(name string) string {
	part, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err) // embedded at build time; cannot happen
	}
	return string(part) + "\n"
}

// scriptOf returns the script that decides for spec, or an error for a
// spec not made by driver.Validate or an algorithm without a script.
func scriptOf(spec *driver.ValidSpec) (*algorithm, error) {
	if !spec.Valid() {
		return nil, fmt.Errorf("redisstore: %w: a spec not made by driver.Validate", driver.ErrInvalidSpec)
	}
	if spec.IsAll() {
		for _, p := range spec.Policies() {
			if _, ok := algorithms[p.Algorithm()]; !ok {
				return nil, fmt.Errorf("redisstore: %w: no script for %q", driver.ErrInvalidSpec, p.Algorithm())
			}
		}
		return allScript, nil
	}
	alg, ok := algorithms[spec.Algorithm()]
	if !ok {
		return nil, fmt.Errorf("redisstore: %w: no script for %q", driver.ErrInvalidSpec, spec.Algorithm())
	}
	return alg, nil
}
