package redisstore

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ratekeeper/ratekeeper/driver"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// TestGoldenScripts compares every script, exactly as Redis receives it,
// with its copy under testdata/, so that a reviewer reads what Redis runs:
// <algorithm>.lua decides one request, <algorithm>.batch.lua a batch, and
// all.lua an All. go test -run Golden -update rewrites them.
func TestGoldenScripts(t *testing.T) {
	scripts := map[string]string{"all.lua": allScript.script.src}
	for name, alg := range algorithms {
		scripts[name+".lua"] = alg.script.src
		scripts[name+".batch.lua"] = alg.batch.src
	}
	for _, name := range driver.Algorithms() {
		if _, ok := algorithms[name]; !ok && name != "no_script" {
			t.Errorf("algorithm %s has no script", name)
		}
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join("testdata", "*.lua"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range scripts {
			if err := os.WriteFile(filepath.Join("testdata", name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, src := range scripts {
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Errorf("%v: run go test -run Golden -update", err)
			continue
		}
		if string(golden) != src {
			t.Errorf("testdata/%s differs from the script Redis receives: run go test -run Golden -update", name)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.lua"))
	for _, f := range files {
		if _, ok := scripts[filepath.Base(f)]; !ok {
			t.Errorf("%s is no script's: run go test -run Golden -update", f)
		}
	}
	if !slices.IsSorted(driver.Algorithms()) {
		t.Error("driver.Algorithms is not sorted")
	}
}
