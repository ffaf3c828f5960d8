package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/server/internal/certs/certstest"
)

// envOf is a lookup over a map.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// redisFrom is the Redis settings of an environment, with flags on top.
func redisFrom(t *testing.T, env map[string]string, args ...string) redisSettings {
	t.Helper()
	s, err := parseSettings(args, envOf(env), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return s.redis
}

// roundTrip writes and reads a key through a client of r.
func roundTrip(t *testing.T, r redisSettings) error {
	t.Helper()
	c, err := redisClient(r, func(err error) { t.Errorf("certificate reload: %v", err) })
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	key := redistest.Prefix(t) + "k"
	if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
		return err
	}
	return c.Get(ctx, key).Err()
}

func TestEnvoyRedisForms(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // the client's type, or an error's words
	}{
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis:6379"}, "*redis.Client"},
		{map[string]string{"REDIS_URL": "/var/run/redis.sock"}, "*redis.Client"},
		{map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "a:7000,b:7001"}, "*redis.ClusterClient"},
		{map[string]string{"REDIS_TYPE": "SENTINEL", "REDIS_URL": "mymaster,s1:26379,s2:26379"}, "*redis.Client"},
		{map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": "s1:26379"}, "NAME,sentinel1:port"},
		{map[string]string{"REDIS_URL": "a:1,b:2"}, "REDIS_TYPE=cluster or sentinel"},
		{map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "localhost"}, "want host:port"},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_TLS_CLIENT_CERT": "/c.crt", "REDIS_TLS_CLIENT_KEY": "/c.key"}, "not TLS"},
	} {
		c, err := redisClient(redisFrom(t, tc.env), nil)
		if err != nil {
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %s", tc.env, err, tc.want)
			}
			continue
		}
		if got := fmt.Sprintf("%T", c); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.env, got, tc.want)
		}
		c.Close()
	}
}

func TestEnvoyRedisOptions(t *testing.T) {
	r := redisFrom(t, map[string]string{
		"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": "/run/redis.sock", "REDIS_AUTH": "user:pw",
		"REDIS_POOL_SIZE": "7", "REDIS_TIMEOUT": "250ms",
	})
	c, err := redisClient(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.Client).Options()
	if o.Network != "unix" || o.Addr != "/run/redis.sock" || o.Username != "user" || o.Password != "pw" ||
		o.PoolSize != 7 || o.DialTimeout != 250*time.Millisecond || o.ReadTimeout != 250*time.Millisecond || !o.ContextTimeoutEnabled {
		t.Errorf("options %+v", o)
	}
	// A flag wins over REDIS_URL.
	if r := redisFrom(t, map[string]string{"REDIS_URL": "a:1"}, "-redis", "redis://b:2"); r.url != "redis://b:2" {
		t.Errorf("-redis: %q", r.url)
	}
}

// TestSentinelPasswords checks that the primary's password reaches the
// primary, and the sentinels' the sentinels, in the URL form and in
// envoy's, against a real Sentinel.
func TestSentinelPasswords(t *testing.T) {
	s := redistest.StartSentinel(t)
	ctx := context.Background()
	if err := s.Master.Client().ConfigSet(ctx, "requirepass", "primary-pw").Err(); err != nil {
		t.Fatal(err)
	}
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sentinel.Close()
	if err := sentinel.Set(ctx, redistest.SentinelMasterName, "auth-pass", "primary-pw").Err(); err != nil {
		t.Fatal(err)
	}
	name := redistest.SentinelMasterName
	for _, tc := range []struct {
		what string
		r    redisSettings
	}{
		{"URL with the primary's password", redisSettings{url: "redis+sentinel://:primary-pw@" + s.Addr + "?master_name=" + name}},
		{"envoy's form with REDIS_AUTH", redisFrom(t, map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": name + "," + s.Addr, "REDIS_AUTH": "primary-pw"})},
	} {
		if err := roundTrip(t, tc.r); err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	if err := roundTrip(t, redisSettings{url: "redis+sentinel://" + s.Addr + "?master_name=" + name}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("no password: %v, want NOAUTH from the primary", err)
	}

	// A second Sentinel, with a password of its own.
	protected := startSentinel(t, s.Master.Addr, "primary-pw", "sentinel-pw")
	if err := roundTrip(t, redisSettings{url: "redis+sentinel://:primary-pw@" + protected + "?master_name=" + name}); err == nil {
		t.Error("a Sentinel with a password, none given: accepted")
	}
	for _, tc := range []struct {
		what string
		r    redisSettings
	}{
		{"URL with both passwords", redisSettings{url: "redis+sentinel://:primary-pw@" + protected + "?master_name=" + name + "&sentinel_password=sentinel-pw"}},
		{"envoy's form with REDIS_SENTINEL_AUTH", redisFrom(t, map[string]string{"REDIS_TYPE": "sentinel", "REDIS_URL": name + "," + protected, "REDIS_AUTH": "primary-pw", "REDIS_SENTINEL_AUTH": "sentinel-pw"})},
	} {
		if err := roundTrip(t, tc.r); err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
}

// startTLSRedis runs a redis-server that speaks TLS only, and asks its
// clients for a certificate from ca.
func startTLSRedis(t *testing.T, ca *certstest.CA) string {
	t.Helper()
	redistest.Addr(t) // skips outside `make test`, as the other Redis tests
	dir := t.TempDir()
	leaf := ca.Issue(t, "127.0.0.1", "localhost")
	for name, data := range map[string][]byte{"redis.crt": leaf.CertPEM, "redis.key": leaf.KeyPEM, "ca.crt": ca.PEM} {
		writeFile(t, filepath.Join(dir, name), string(data))
	}
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		cmd := exec.Command("redis-server", "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--tls-cert-file", filepath.Join(dir, "redis.crt"), "--tls-key-file", filepath.Join(dir, "redis.key"),
			"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"), "--tls-auth-clients", "yes",
			"--save", "", "--appendonly", "no", "--dir", dir)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			select {
			case <-exited:
				if strings.Contains(out.String(), "TLS") && strings.Contains(out.String(), "not") {
					t.Skipf("redis-server without TLS: %s", out.String())
				}
				t.Logf("redis-server exited: %s", out.String())
			default:
			}
			if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
				c.Close()
				t.Cleanup(func() { cmd.Process.Kill(); <-exited })
				return addr
			}
		}
		cmd.Process.Kill()
		<-exited
	}
	t.Fatal("could not start redis-server with TLS")
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

func TestRedisTLSWithClientCertificate(t *testing.T) {
	ca := certstest.NewCA(t, "redis-ca")
	addr := startTLSRedis(t, ca)
	client := certstest.NewSecret(t, filepath.Join(t.TempDir(), "redis-certs"), ca.Issue(t, "ratelimit"), ca)
	envoyEnv := map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "REDIS_TLS": "true",
		"REDIS_TLS_CLIENT_CERT": client.Cert(), "REDIS_TLS_CLIENT_KEY": client.Key(), "REDIS_TLS_CACERT": client.CA(),
	}
	if err := roundTrip(t, redisFrom(t, envoyEnv)); err != nil {
		t.Errorf("envoy's REDIS_TLS variables: %v", err)
	}
	flags := []string{"-redis", "rediss://" + addr, "-redis-tls-cert", client.Cert(), "-redis-tls-key", client.Key(), "-redis-tls-ca", client.CA()}
	if err := roundTrip(t, redisFrom(t, nil, flags...)); err != nil {
		t.Errorf("rediss:// and the -redis-tls flags: %v", err)
	}
	// Refused: no client certificate; plaintext; a CA that did not sign
	// Redis's certificate.
	noCert := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "REDIS_TLS": "true", "REDIS_TLS_CACERT": client.CA()}
	if err := roundTrip(t, redisFrom(t, noCert)); err == nil {
		t.Error("no client certificate: accepted")
	}
	if err := roundTrip(t, redisSettings{url: addr, timeout: time.Second}); err == nil {
		t.Error("plaintext: accepted")
	}
	other := certstest.NewSecret(t, filepath.Join(t.TempDir(), "other"), ca.Issue(t, "ratelimit"), certstest.NewCA(t, "other"))
	wrongCA := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": addr, "REDIS_TLS": "true",
		"REDIS_TLS_CLIENT_CERT": client.Cert(), "REDIS_TLS_CLIENT_KEY": client.Key(), "REDIS_TLS_CACERT": other.CA()}
	if err := roundTrip(t, redisFrom(t, wrongCA)); err == nil {
		t.Error("a server certificate from an unknown CA: accepted")
	}
	// ... unless only the name is not checked: the chain still is.
	skip := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "localhost:" + strings.Split(addr, ":")[1], "REDIS_TLS": "true",
		"REDIS_TLS_CLIENT_CERT": client.Cert(), "REDIS_TLS_CLIENT_KEY": client.Key(), "REDIS_TLS_CACERT": client.CA(),
		"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}
	if err := roundTrip(t, redisFrom(t, skip)); err != nil {
		t.Errorf("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: %v", err)
	}
}

// startSentinel runs a Sentinel that asks for sentinelPW, monitoring the
// primary at addr (whose password is primaryPW) under
// redistest.SentinelMasterName, until the test ends.
func startSentinel(t *testing.T, primary, primaryPW, sentinelPW string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(primary)
	dir := t.TempDir()
	for attempt := 0; attempt < 5; attempt++ {
		addr := freeAddr(t)
		_, sport, _ := net.SplitHostPort(addr)
		conf := filepath.Join(dir, "sentinel.conf")
		writeFile(t, conf, fmt.Sprintf("bind 127.0.0.1\nport %s\ndir %s\nrequirepass %s\n"+
			"sentinel monitor %s %s %s 1\nsentinel auth-pass %[4]s %[7]s\nsentinel down-after-milliseconds %[4]s 60000\n",
			sport, dir, sentinelPW, redistest.SentinelMasterName, host, port, primaryPW))
		cmd := exec.Command("redis-server", conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: sentinelPW, MaxRetries: -1})
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			got, err := c.GetMasterAddrByName(ctx, redistest.SentinelMasterName).Result()
			cancel()
			if err == nil && len(got) == 2 {
				c.Close()
				t.Cleanup(func() { cmd.Process.Kill(); <-exited })
				return addr
			}
		}
		c.Close()
		cmd.Process.Kill()
		<-exited
	}
	t.Fatal("could not start a Sentinel with a password")
	return ""
}

// TestEnvoyRedisKinds reaches a real Redis through a Unix socket and a
// real Cluster, with envoy's REDIS_SOCKET_TYPE, REDIS_TYPE and REDIS_URL.
func TestEnvoyRedisKinds(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	redistest.StartServerWith(t, "--unixsocket", sock, "--unixsocketperm", "700")
	if err := roundTrip(t, redisFrom(t, map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": sock})); err != nil {
		t.Errorf("REDIS_SOCKET_TYPE=unix: %v", err)
	}
	cluster := os.Getenv("RATEKEEPER_REDIS_CLUSTER")
	if cluster == "" {
		t.Skip("no test Cluster: run `make test`, which starts one")
	}
	if err := roundTrip(t, redisFrom(t, map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": cluster})); err != nil {
		t.Errorf("REDIS_TYPE=cluster: %v", err)
	}
}
