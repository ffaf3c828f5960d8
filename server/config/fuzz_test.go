package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad checks that no input makes the loader panic, and that what it
// accepts can be looked up.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "compat", "*.yaml"))
	seeds = append(seeds, filepath.Join("..", "examples", "config.yaml"))
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(lookupYAML))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := build([]file{{"fuzz.yaml", data}})
		if err != nil {
			return
		}
		for _, d := range c.Domains() {
			c.Lookup(d, []Entry{{"key", "value"}, {"path", "/api/x"}})
			c.Lookup(d, []Entry{{"remote_address", ""}})
		}
	})
}
