package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestVersion: -version prints the module's version, "devel" in a test
// binary, and exits 0 without a configuration.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"-version"}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("-version: exit %d, %s", code, errOut.String())
	}
	if got := out.String(); got != "ratekeeper-server devel\n" {
		t.Errorf("-version printed %q", got)
	}
}

// TestServiceFlagsChecked: a store budget or a key bound of 0 is refused.
func TestServiceFlagsChecked(t *testing.T) {
	for _, args := range [][]string{{"-store-timeout", "0s"}, {"-memstore-max-keys", "0"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append(args, "-config", "x.yaml"), noEnv, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), args[0]) {
			t.Errorf("%v: exit %d, %q; want 2 and an error naming %s", args, code, errOut.String(), args[0])
		}
	}
}

// TestShutdownLogged: stopping the service says so, before and after.
func TestShutdownLogged(t *testing.T) {
	cfg := t.TempDir() + "/web.yaml"
	writeFile(t, cfg, oneConfig)
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-config", cfg, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, noEnv, &bytes.Buffer{}, log)
	}()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), "msg=serving"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10 s:\n%s", log.String())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not stopped 10 s after its context ended")
	}
	if s := log.String(); !strings.Contains(s, "shutting down") || !strings.Contains(s, "ratekeeper-server stopped") {
		t.Errorf("the log does not say it shuts down and stopped:\n%s", s)
	}
}

// TestMemstoreMaxKeys: -memstore-max-keys bounds the in-process store.
func TestMemstoreMaxKeys(t *testing.T) {
	st, err := openStore(redisSettings{}, "rk:", 1234, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	m, ok := st.store.(*memstore.Store)
	if !ok {
		t.Fatalf("the in-process store is a %T", st.store)
	}
	if m.MaxKeys() != 1234 {
		t.Errorf("the in-process store bounds %d keys, want 1234", m.MaxKeys())
	}
}

// TestLeasesSettings: -leases and RATEKEEPER_LEASES set leases for every
// rule, the flag winning; anything but a duration of 1ms to a minute, or
// 0, is refused.
func TestLeasesSettings(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "RATEKEEPER_LEASES" && v != "" {
				return v, true
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		args []string
		env  string
		want time.Duration
		err  string
	}{
		{[]string{"-config", "x.yaml"}, "", 0, ""},
		{[]string{"-config", "x.yaml", "-leases", "50ms"}, "", 50 * time.Millisecond, ""},
		{[]string{"-config", "x.yaml"}, "20ms", 20 * time.Millisecond, ""},
		{[]string{"-config", "x.yaml", "-leases", "0"}, "20ms", 0, ""},
		{[]string{"-config", "x.yaml"}, "soon", 0, "RATEKEEPER_LEASES"},
		{[]string{"-config", "x.yaml", "-leases", "2m"}, "", 0, "-leases 2m0s"},
		{[]string{"-config", "x.yaml", "-leases", "10us"}, "", 0, "-leases 10µs"},
	} {
		s, err := parseSettings(tc.args, env(tc.env), io.Discard)
		if err == nil {
			err = s.validate()
		}
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%v with %q: %v, want an error naming %s", tc.args, tc.env, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%v with %q: %v", tc.args, tc.env, err)
		case tc.err == "" && s.leases != tc.want:
			t.Errorf("%v with %q: leases %v, want %v", tc.args, tc.env, s.leases, tc.want)
		}
	}
}
