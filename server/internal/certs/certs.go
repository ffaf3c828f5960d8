// Package certs serves TLS certificates that are re-read when their files
// change, with no restart: Kubernetes rotates a mounted Secret in place,
// swapping the ..data symlink of its volume, and cert-manager renews
// certificates long before the pods that use them restart.
//
// A Pair is checked at most once per interval, at a handshake: the files'
// resolved paths, sizes and modification times are compared, and on a
// change the pair is loaded again. A pair that does not load (half written,
// or a key that does not match), or whose certificate is expired or not
// yet valid, is reported once per change of its files and the previous
// one kept; a certificate not yet valid is tried again when it becomes
// valid. At load, such a pair is an error.
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
	// rejected is the version of the files last refused, reported once;
	// it is loaded again only when they change, or at retryAt if set (a
	// certificate that becomes valid then).
	rejected []stamp
	retryAt  time.Time
	// statErr is the last error of looking at the files, reported once.
	statErr string
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
	now := time.Now()
	w.checked = now
	stamps, err := w.stat()
	if err != nil {
		if err.Error() != w.statErr {
			w.statErr = err.Error()
			w.report(err)
		}
		return w.value
	}
	w.statErr = ""
	if equal(stamps, w.stamps) {
		return w.value
	}
	if w.rejected != nil && equal(stamps, w.rejected) && (w.retryAt.IsZero() || now.Before(w.retryAt)) {
		return w.value
	}
	v, err := w.load()
	if err != nil {
		w.rejected, w.retryAt = stamps, time.Time{}
		if ve, ok := errors.AsType[*ValidityError](err); ok && now.Before(ve.NotBefore) {
			w.retryAt = ve.NotBefore
		}
		w.report(err)
		return w.value
	}
	w.value, w.stamps, w.rejected = v, stamps, nil
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

// ValidityError is a certificate refused because the time is outside
// its validity period: it has expired, or is not valid yet.
type ValidityError struct {
	// File is the certificate's file.
	File string
	// NotBefore and NotAfter bound the certificate's validity.
	NotBefore, NotAfter time.Time
	// Now is the time it was checked at.
	Now time.Time
}

// Expired reports whether the certificate's validity ended before Now;
// false means it begins after Now.
func (e *ValidityError) Expired() bool { return e.Now.After(e.NotAfter) }

func (e *ValidityError) Error() string {
	state := "is not valid yet"
	if e.Expired() {
		state = "has expired"
	}
	return fmt.Sprintf("certificate %s %s: valid from %s to %s, and it is %s", e.File, state,
		e.NotBefore.UTC().Format(time.RFC3339), e.NotAfter.UTC().Format(time.RFC3339), e.Now.UTC().Format(time.RFC3339))
}

// LoadKeyPair reads a certificate and its key from PEM files, as
// tls.LoadX509KeyPair does, and refuses it with a *ValidityError if its
// leaf is expired or not yet valid at now: a peer would refuse it.
func LoadKeyPair(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s, key %s: %w", certFile, keyFile, err)
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certificate %s: %w", certFile, err)
		}
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, &ValidityError{File: certFile, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, Now: now}
	}
	return &c, nil
}

// Pair is a certificate and its key, from two PEM files.
type Pair struct{ w *watched[*tls.Certificate] }

// LoadPair loads certFile and keyFile, and keeps them current. A pair
// that does not load, or is expired or not yet valid (a *ValidityError),
// is an error now, and later is refused: onError, when not nil, receives
// each refusal, once per change of the files, and the previous pair stays.
func LoadPair(certFile, keyFile string, onError func(error)) (*Pair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a certificate needs both its file and its key's")
	}
	w, err := newWatched([]string{certFile, keyFile}, func() (*tls.Certificate, error) {
		return LoadKeyPair(certFile, keyFile, time.Now())
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
	return loadPool(file, false, onError)
}

// loadPool is LoadPool, the system's CAs included withSystem.
func loadPool(file string, withSystem bool, onError func(error)) (*Pool, error) {
	w, err := newWatched([]string{file}, func() (*x509.CertPool, error) {
		pem, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if withSystem {
			if sys, err := x509.SystemCertPool(); err == nil {
				pool = sys
			}
		}
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
