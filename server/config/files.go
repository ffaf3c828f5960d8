package config

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// file is a configuration file as read from disk.
type file struct {
	name string
	data []byte
}

// readFiles reads path: the file itself, or the *.yaml and *.yml files of
// a directory, in name order. Entries are followed through symlinks, as a
// ConfigMap volume's are (config.yaml -> ..data/config.yaml); names that
// start with a dot (..data itself, editors' lock and swap files) are
// skipped. It gives up after readTimeout: a mount that hangs blocks the
// looking up of a file as much as its reading.
func readFiles(path string) ([]file, error) {
	if _, busy := hung.LoadOrStore(path, true); busy {
		return nil, &Error{File: path, Msg: fmt.Sprintf("still not read, %v or more after a read began (a mount that hangs?)", readTimeout)}
	}
	type result struct {
		files []file
		err   error
	}
	done := make(chan result, 1)
	go func() {
		defer hung.Delete(path)
		files, err := readFilesNow(path)
		done <- result{files, err}
	}()
	select {
	case r := <-done:
		return r.files, r.err
	case <-time.After(readTimeout):
		return nil, &Error{File: path, Msg: fmt.Sprintf("not read within %v (a mount that hangs?)", readTimeout)}
	}
}

// readFilesNow is readFiles, without a bound in time.
func readFilesNow(path string) ([]file, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, &Error{File: path, Msg: errMsg(err)}
	}
	if !info.IsDir() {
		data, err := readFile(path, info)
		if err != nil {
			return nil, &Error{File: path, Msg: errMsg(err)}
		}
		return []file{{path, data}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, &Error{File: path, Msg: errMsg(err)}
	}
	var files []file
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(path, name)
		info, err := os.Stat(full) // through symlinks
		if err != nil {
			errs = append(errs, &Error{File: full, Msg: errMsg(err)})
			continue
		}
		if info.IsDir() {
			continue
		}
		data, err := readFile(full, info)
		if err != nil {
			errs = append(errs, &Error{File: full, Msg: errMsg(err)})
			continue
		}
		files = append(files, file{full, data})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(files) == 0 {
		return nil, &Error{File: path, Msg: "no configuration: the directory holds no *.yaml or *.yml file"}
	}
	return files, nil
}

// maxFileSize bounds a configuration file: 100,000 descriptors take
// about 9 MB.
const maxFileSize = 64 << 20

// readTimeout bounds the read of a configuration, such as one on a
// network mount that hangs.
const readTimeout = 10 * time.Second

// hung holds the paths whose read timed out and has not ended: each is
// refused until it does, so that a mount that hangs costs one goroutine,
// not one per reload.
var hung sync.Map

// readFile reads a regular file of at most maxFileSize bytes. Anything
// else (a named pipe, which would block the reader until someone writes
// to it, a device, a socket) is refused.
func readFile(path string, info os.FileInfo) ([]byte, error) {
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s): only regular files are read", fileKind(info.Mode()))
	}
	if info.Size() > maxFileSize {
		return nil, fmt.Errorf("%d bytes: larger than the %d MiB a configuration file may have", info.Size(), maxFileSize>>20)
	}
	return readRegular(path)
}

// readRegular opens path without blocking (a named pipe put there since
// it was looked at would block a plain open), checks that it is still a
// regular file, and reads up to maxFileSize bytes of it.
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s): only regular files are read", fileKind(info.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("larger than the %d MiB a configuration file may have", maxFileSize>>20)
	}
	return data, nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// errMsg is an error of the os package without the path it repeats.
func errMsg(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// fingerprint identifies the contents of a set of files, so that a reload
// of unchanged files can be told apart from a change.
func fingerprint(files []file) [32]byte {
	h := sha256.New()
	for _, f := range files {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(f.name))))
		h.Write([]byte(f.name))
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(f.data))))
		h.Write(f.data)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
