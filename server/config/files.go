package config

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
// skipped.
func readFiles(path string) ([]file, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, &Error{File: path, Msg: errMsg(err)}
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
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
		data, err := os.ReadFile(full)
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
