//go:build linux && amd64

package preload

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the interposer
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

//go:embed libheapscope_preload.so
var library []byte

var (
	libOnce sync.Once
	libPath string
	libErr  error
)

// LibraryPath writes the embedded interposer to a private, content-addressed
// path (in the user's cache directory, in a directory only the user can
// write) once per process, and returns that path. A file already there is
// used only if its contents are exactly the embedded library.
func LibraryPath() (string, error) {
	libOnce.Do(func() { libPath, libErr = writeLibrary() })
	return libPath, libErr
}

func writeLibrary() (string, error) {
	sum := sha256.Sum256(library)
	name := "libheapscope_preload-" + hex.EncodeToString(sum[:8]) + ".so"
	var tried []error
	for _, dir := range cacheDirs() {
		p, err := writeLibraryIn(dir, name)
		if err == nil {
			return p, nil
		}
		tried = append(tried, err)
	}
	return "", fmt.Errorf("preload: cannot write the interposer: %v", tried)
}

func cacheDirs() []string {
	var dirs []string
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "heapscope"))
	}
	return append(dirs, filepath.Join(os.TempDir(), fmt.Sprintf("heapscope-%d", os.Getuid())))
}

func writeLibraryIn(dir, name string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	// The directory must be ours and closed to others: whoever can write
	// there can choose the code our targets run.
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s: not a private directory", dir)
	}
	p := filepath.Join(dir, name)
	if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, library) {
		return p, nil
	}
	tmp, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(library); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return "", err
	}
	return p, nil
}
