//go:build !linux

package snapshot

import (
	"errors"
	"io"
	"io/fs"
)

// Reading a tree beneath its root (Tree.Beneath) is the runner's, which
// runs on Linux.
type beneath struct{}

func openBeneathRoot(string, int) (*beneath, error) { return nil, errors.ErrUnsupported }

func (b *beneath) Close() error { return nil }

func (b *beneath) openFile(Entry) (io.ReadCloser, error) { return nil, errors.ErrUnsupported }

func (b *beneath) readlink(string) (string, error) { return "", errors.ErrUnsupported }

func (b *beneath) lstat(string) (fs.FileInfo, error) { return nil, errors.ErrUnsupported }
