package prebuilt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLookup hands Lookup this very test binary, whose package and race
// setting are known, and files that are not it.
func TestLookup(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	race := Race(self)
	const env = "RATEKEEPER_PREBUILT_TEST_BIN"

	t.Setenv(env, "")
	if p, info, err := Lookup(env, self.Path, race); p != "" || info != nil || err != nil {
		t.Errorf("unset: %q %v %v, want nothing and no error", p, info, err)
	}

	t.Setenv(env, exe)
	p, info, err := Lookup(env, self.Path, race)
	if err != nil || p != exe || info == nil || info.Path != self.Path {
		t.Fatalf("this test binary: %q %v %v", p, info, err)
	}

	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExec, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, pkg string
		race            bool
		want            string
	}{
		{"another package", exe, ServerPackage, race, "not of " + ServerPackage},
		{"the other race setting", exe, self.Path, !race, "race detector"},
		{"missing", filepath.Join(t.TempDir(), "none"), self.Path, race, "no such file"},
		{"not a Go binary", notGo, self.Path, race, notGo},
		{"not executable", notExec, self.Path, race, "not an executable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(env, c.path)
			p, _, err := Lookup(env, c.pkg, c.race)
			if err == nil || p != "" {
				t.Fatalf("%q, %v: want an error", p, err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), env) {
				t.Errorf("error %q: want it to name %s and say %q", err, env, c.want)
			}
		})
	}
}

// TestSetting reads this test binary's own settings.
func TestSetting(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Setting(self, "GOOS"); !ok || v == "" {
		t.Errorf("GOOS: %q %t", v, ok)
	}
	if _, ok := Setting(self, "no-such-setting"); ok {
		t.Error("a setting that does not exist was found")
	}
}
