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
	script *script
	batch  *script
	// lease is the script of a lease step (lease.lua), for an algorithm
	// that takes leases; nil for the others.
	lease *algorithm
}

// script is one Lua script, in the two forms Redis runs: a function of a
// library loaded once per server (FUNCTION LOAD, Redis 7) and called with
// FCALL; and, where Redis has no functions, the script itself, by
// EVALSHA, or by EVAL when Redis lacks it. A script's top level, which
// defines its functions, runs on every EVALSHA, but only once for a
// library, when it is loaded: FCALL costs Redis about a quarter less (see
// docs/performance.md).
type script struct {
	sha *redis.Script // the script, for EVALSHA and EVAL
	src string
	// fn is the function's name, and the library's: "ratekeeper_" and
	// the script's SHA-1, so that versions of redisstore that differ in
	// their scripts share a server without replacing each other's.
	fn string
	// lib is the library: the script's definitions at its top level,
	// and its entry file as the body of the function fn.
	lib string
}

// newScript makes the script of defs, the functions, and entry, the code
// that reads KEYS and ARGV and calls them.
func newScript(defs, entry string) *script {
	src := defs + entry
	sha := redis.NewScript(src)
	fn := "ratekeeper_" + sha.Hash()
	return &script{sha: sha, src: src, fn: fn,
		lib: "#!lua name=" + fn + "\n" + defs +
			"redis.register_function('" + fn + "', function(KEYS, ARGV)\n" + entry + "end)\n"}
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
		alg := &algorithm{script: luaScript([]string{name}, "single"), batch: luaScript([]string{name}, "batch")}
		if strings.Contains(alg.script.src, "function leases."+name+"(") {
			alg.lease = &algorithm{script: luaScript([]string{name}, "lease")}
		}
		algorithms[name] = alg
		every = append(every, name)
	}
	allScript = &algorithm{script: luaScript(every, "all")}
}

// luaScript is a script as Redis receives it: lib.lua, the helpers the
// algorithms call, the files of the named algorithms, and the entry file
// (single, batch, all or lease) that reads ARGV and calls them.
func luaScript(names []string, entry string) *script {
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
	return newScript(src.String(), luaFile(entry))
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
