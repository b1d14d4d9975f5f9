//go:build !linux

package snapshot

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// Elsewhere extraction goes through os.Root alone (see dirfd_linux.go).

func dirFD(*os.Root) (*os.File, int, error) { return nil, -1, nil }

func createAt(int, string) (writeFile, error) { return nil, errors.ErrUnsupported }

func openReadAt(int, string) (io.ReadCloser, fs.FileMode, error) {
	return nil, 0, errors.ErrUnsupported
}
