// Package certs serves TLS certificates that are re-read when their files
// change, with no restart: Kubernetes rotates a mounted Secret in place,
// swapping the ..data symlink of its volume, and cert-manager renews
// certificates long before the pods that use them restart.
//
// A Pair is checked at most once per interval, at a handshake: the files'
// resolved paths, sizes and modification times are compared, and on a
// change the pair is loaded again. A pair that does not load (half written,
// or a key that does not match) is reported and the previous one kept.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CheckInterval is how often, at most, the files are looked at.
const CheckInterval = time.Second

// stamp identifies a file's version without reading it.
type stamp struct {
	path string // through symlinks
	size int64
	mod  time.Time
}

func stampOf(path string) (stamp, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return stamp{}, err
	}
	info, err := os.Stat(real)
	if err != nil {
		return stamp{}, err
	}
	return stamp{real, info.Size(), info.ModTime()}, nil
}

// watched is a value loaded from files, loaded again when they change.
type watched[T any] struct {
	files []string
	load  func() (T, error)
	// OnError receives a reload that failed; the previous value stays.
	onError func(error)

	mu      sync.Mutex
	value   T
	stamps  []stamp
	checked time.Time
}

func newWatched[T any](files []string, load func() (T, error), onError func(error)) (*watched[T], error) {
	w := &watched[T]{files: files, load: load, onError: onError}
	stamps, err := w.stat()
	if err != nil {
		return nil, err
	}
	v, err := load()
	if err != nil {
		return nil, err
	}
	w.value, w.stamps, w.checked = v, stamps, time.Now()
	return w, nil
}

func (w *watched[T]) stat() ([]stamp, error) {
	stamps := make([]stamp, len(w.files))
	for i, f := range w.files {
		s, err := stampOf(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		stamps[i] = s
	}
	return stamps, nil
}

// get returns the current value, loading it again first if its files
// changed since the last look, at most once per CheckInterval.
func (w *watched[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checked) < CheckInterval {
		return w.value
	}
	w.checked = time.Now()
	stamps, err := w.stat()
	if err != nil {
		w.report(err)
		return w.value
	}
	if equal(stamps, w.stamps) {
		return w.value
	}
	v, err := w.load()
	if err != nil {
		w.report(err)
		return w.value
	}
	w.value, w.stamps = v, stamps
	return w.value
}

func (w *watched[T]) report(err error) {
	if w.onError != nil {
		w.onError(err)
	}
}

func equal(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].path != b[i].path || a[i].size != b[i].size || !a[i].mod.Equal(b[i].mod) {
			return false
		}
	}
	return true
}

// Pair is a certificate and its key, from two PEM files.
type Pair struct{ w *watched[*tls.Certificate] }

// LoadPair loads certFile and keyFile, and keeps them current. onError,
// when not nil, receives each failed reload (the previous pair stays).
func LoadPair(certFile, keyFile string, onError func(error)) (*Pair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a certificate needs both its file and its key's")
	}
	w, err := newWatched([]string{certFile, keyFile}, func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate %s, key %s: %w", certFile, keyFile, err)
		}
		return &c, nil
	}, onError)
	if err != nil {
		return nil, err
	}
	return &Pair{w}, nil
}

// Certificate returns the current pair.
func (p *Pair) Certificate() *tls.Certificate { return p.w.get() }

// GetCertificate is for tls.Config.GetCertificate.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.w.get(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate.
func (p *Pair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return p.w.get(), nil
}

// Pool is a set of CA certificates from one PEM file.
type Pool struct{ w *watched[*x509.CertPool] }

// LoadPool loads the CA certificates of file, and keeps them current.
func LoadPool(file string, onError func(error)) (*Pool, error) {
	w, err := newWatched([]string{file}, func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
		}
		return pool, nil
	}, onError)
	if err != nil {
		return nil, err
	}
	return &Pool{w}, nil
}

// CertPool returns the current pool.
func (p *Pool) CertPool() *x509.CertPool { return p.w.get() }
