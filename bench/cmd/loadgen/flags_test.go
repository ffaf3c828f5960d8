package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelp checks that -h prints each flag's default once and is not an
// error.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags(-h) = %v, want flag.ErrHelp", err)
	}
	usage := out.String()
	if !strings.Contains(usage, "-redis") {
		t.Fatalf("no usage:\n%s", usage)
	}
	for _, line := range strings.Split(usage, "\n") {
		if n := strings.Count(line, "(default"); n > 1 {
			t.Errorf("a default said %d times: %s", n, line)
		}
	}

	bin := filepath.Join(t.TempDir(), "loadgen")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-h")
	cmd.Env = append(os.Environ(), "RATEKEEPER_REDIS_ADDR=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("loadgen -h: %v, want exit status 0\n%s", err, out)
	}
}

// TestRedisDefault checks where -redis comes from when it is not given.
func TestRedisDefault(t *testing.T) {
	for _, c := range []struct{ env, args, want string }{
		{"", "", "127.0.0.1:6379"},
		{"127.0.0.1:7000", "", "127.0.0.1:7000"},
		{"127.0.0.1:7000", "-redis=localhost:7001", "localhost:7001"},
	} {
		t.Setenv("RATEKEEPER_REDIS_ADDR", c.env)
		var args []string
		if c.args != "" {
			args = []string{c.args}
		}
		cfg, err := parseFlags(args, new(bytes.Buffer))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.addr != c.want {
			t.Errorf("RATEKEEPER_REDIS_ADDR=%q %v: -redis %q, want %q", c.env, args, cfg.addr, c.want)
		}
	}
}
