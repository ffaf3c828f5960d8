package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/server/internal/certs"
	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
)

// redisSettings say where Redis is and how to reach it: a URL (-redis)
// or envoy's REDIS_* variables.
//
// The URL forms:
//
//	host:port, or a socket's path                     envoy's REDIS_URL, of the kind REDIS_TYPE names
//	host1:port,host2:port                            (REDIS_TYPE=cluster) seed nodes
//	NAME,host1:port,host2:port                       (REDIS_TYPE=sentinel) the primary's name, then the sentinels
//	redis://[user:password@]host:port[/db]           one server (rediss:// for TLS)
//	redis+cluster://[user:password@]host:port[?addr=host:port&addr=…]
//	                                                 a Redis Cluster: seed nodes
//	redis+sentinel://[user:password@]host:port[?addr=host:port&…]&master_name=NAME[&sentinel_password=…]
//	                                                 Sentinel: the sentinels, and the primary's name; the
//	                                                 user and password are the primary's, as REDIS_AUTH,
//	                                                 sentinel_username and sentinel_password the sentinels', as REDIS_SENTINEL_AUTH
//
// (rediss+cluster:// and rediss+sentinel:// for TLS), with go-redis's
// options as query parameters (dial_timeout=3s, pool_size=20, …).
type redisSettings struct {
	url          string
	socketType   string // tcp or unix; "" guesses from the address
	kind         string // single, cluster or sentinel, for envoy's forms
	auth         string // the primary's password, or user:password, where the URL has none
	sentinelAuth string
	poolSize     int           // 0: go-redis's default
	timeout      time.Duration // dial, read and write; 0: go-redis's defaults
	tls          bool          // for envoy's forms; rediss:// says so itself
	tlsFiles     certs.ClientFiles
}

// redisFromEnv is envoy's REDIS_* variables. REDIS_URL unset leaves the
// URL empty (the in-process store), not envoy's nutcracker socket.
func redisFromEnv(e *envsettings.Settings) redisSettings {
	r := redisSettings{
		kind:         strings.ToLower(e.RedisType),
		auth:         e.RedisAuth,
		sentinelAuth: e.RedisSentinelAuth,
		tls:          e.RedisTLS,
		tlsFiles: certs.ClientFiles{
			Cert: e.RedisTLSClientCert, Key: e.RedisTLSClientKey, CA: e.RedisTLSCACert,
			SkipHostnameVerification: e.RedisTLSSkipHostnameVerification,
		},
	}
	if e.Set["REDIS_URL"] {
		r.url = e.RedisURL
	}
	if e.Set["REDIS_SOCKET_TYPE"] {
		r.socketType = strings.ToLower(e.RedisSocketType)
	}
	if e.Set["REDIS_POOL_SIZE"] {
		r.poolSize = e.RedisPoolSize
	}
	if e.Set["REDIS_TIMEOUT"] {
		r.timeout = e.RedisTimeout
	}
	return r
}

// flags adds the Redis flags, their defaults from the environment.
func (r *redisSettings) flags(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "redis", r.url, "Redis `URL` (default $REDIS_URL): host:port, redis:// or rediss://, redis+cluster://, redis+sentinel://; none keeps limits in process")
	fs.StringVar(&r.tlsFiles.Cert, "redis-tls-cert", r.tlsFiles.Cert, "client certificate `file` for Redis over TLS (REDIS_TLS_CLIENT_CERT), re-read when it changes")
	fs.StringVar(&r.tlsFiles.Key, "redis-tls-key", r.tlsFiles.Key, "its key `file` (REDIS_TLS_CLIENT_KEY)")
	fs.StringVar(&r.tlsFiles.CA, "redis-tls-ca", r.tlsFiles.CA, "CA `file` for Redis's certificate, instead of the system's (REDIS_TLS_CACERT)")
}

// describe is where Redis is, without credentials.
func (r redisSettings) describe() string {
	if strings.Contains(r.url, "://") {
		return redact(r.url)
	}
	return r.kind + " " + r.url
}

// target is a client's options, of one of three kinds.
type target struct {
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// common points at the fields the three kinds share.
type common struct {
	user, password    *string
	tls               **tls.Config
	poolSize          *int
	dial, read, write *time.Duration
	contextTimeout    *bool
}

func (t *target) common() common {
	switch {
	case t.cluster != nil:
		o := t.cluster
		return common{&o.Username, &o.Password, &o.TLSConfig, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ContextTimeoutEnabled}
	case t.failover != nil:
		o := t.failover
		return common{&o.Username, &o.Password, &o.TLSConfig, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ContextTimeoutEnabled}
	}
	o := t.single
	return common{&o.Username, &o.Password, &o.TLSConfig, &o.PoolSize, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.ContextTimeoutEnabled}
}

// target parses the URL into a client's options.
func (r redisSettings) target() (*target, error) {
	scheme, rest, ok := strings.Cut(r.url, "://")
	if !ok {
		return r.envoyTarget()
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("invalid Redis URL %s: the scheme must be redis, rediss, redis+cluster or redis+sentinel", redact(r.url))
	}
	plain := base + "://" + rest
	switch kind {
	case "":
		o, err := redis.ParseURL(plain)
		if err != nil {
			return nil, urlError(r.url, err)
		}
		return &target{single: o}, nil
	case "cluster":
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, urlError(r.url, err)
		}
		return &target{cluster: o}, nil
	case "sentinel":
		return sentinelURL(r.url, plain)
	}
	return nil, fmt.Errorf("invalid Redis URL %s: unknown kind %q (cluster or sentinel)", redact(r.url), kind)
}

// sentinelURL parses a redis+sentinel:// URL. go-redis gives the URL's
// user and password to the sentinels only, so a primary with a password
// answers NOAUTH: here they are the primary's, as envoy's REDIS_AUTH, and
// sentinel_username and sentinel_password are the sentinels', as its
// REDIS_SENTINEL_AUTH.
func sentinelURL(raw, plain string) (*target, error) {
	u, err := url.Parse(plain)
	if err != nil {
		return nil, urlError(raw, err)
	}
	q := u.Query()
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	u.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, urlError(raw, err)
	}
	if o.MasterName == "" {
		return nil, fmt.Errorf("invalid Redis URL %s: Sentinel needs master_name=NAME", redact(raw))
	}
	if o.Username == "" && o.Password == "" {
		o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	return &target{failover: o}, nil
}

// envoyTarget reads envoy's REDIS_URL forms, of the kind REDIS_TYPE names.
func (r redisSettings) envoyTarget() (*target, error) {
	parts := strings.Split(r.url, ",")
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("invalid Redis URL %q: an empty address", r.url)
		}
	}
	network := r.socketType
	if network == "" {
		network = "tcp"
		if strings.HasPrefix(r.url, "/") {
			network = "unix"
		}
	}
	checkAddrs := func(addrs []string) error {
		for _, a := range addrs {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("invalid Redis URL %s: want host:port or redis://host:port", a)
			}
		}
		return nil
	}
	switch r.kind {
	case "", "single":
		if len(parts) > 1 {
			return nil, fmt.Errorf("invalid Redis URL %q: several addresses need REDIS_TYPE=cluster or sentinel", r.url)
		}
		if network == "tcp" {
			if err := checkAddrs(parts); err != nil {
				return nil, err
			}
		}
		return &target{single: &redis.Options{Network: network, Addr: r.url}}, nil
	case "cluster":
		if err := checkAddrs(parts); err != nil {
			return nil, err
		}
		return &target{cluster: &redis.ClusterOptions{Addrs: parts}}, nil
	case "sentinel":
		if len(parts) < 2 {
			return nil, fmt.Errorf("invalid Redis URL %q: REDIS_TYPE=sentinel wants NAME,sentinel1:port,…", r.url)
		}
		if err := checkAddrs(parts[1:]); err != nil {
			return nil, err
		}
		o := &redis.FailoverOptions{MasterName: parts[0], SentinelAddrs: parts[1:]}
		o.SentinelUsername, o.SentinelPassword = splitAuth(r.sentinelAuth)
		return &target{failover: o}, nil
	}
	return nil, fmt.Errorf("REDIS_TYPE %q: single, cluster or sentinel", r.kind)
}

// splitAuth reads envoy's REDIS_AUTH: "password" or "user:password".
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// overlay applies what the URL does not say: credentials, TLS, pool and
// timeouts.
func (r redisSettings) overlay(c common, onCertError func(error)) error {
	*c.contextTimeout = true
	if r.auth != "" && *c.user == "" && *c.password == "" {
		*c.user, *c.password = splitAuth(r.auth)
	}
	if r.poolSize > 0 {
		*c.poolSize = r.poolSize
	}
	if r.timeout > 0 {
		*c.dial, *c.read, *c.write = r.timeout, r.timeout, r.timeout
	}
	files := r.tlsFiles
	if !r.tls && *c.tls == nil {
		if files.Cert != "" || files.CA != "" {
			return fmt.Errorf("TLS files for Redis at %s, which is not TLS: use rediss:// or REDIS_TLS=true", r.describe())
		}
		return nil
	}
	if *c.tls != nil {
		files.ServerName = (*c.tls).ServerName
		if (*c.tls).InsecureSkipVerify {
			files.SkipHostnameVerification = true
		}
	}
	config, err := certs.ClientConfig(files, onCertError)
	if err != nil {
		return fmt.Errorf("TLS to Redis: %w", err)
	}
	*c.tls = config
	return nil
}
