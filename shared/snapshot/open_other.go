//go:build !unix

package snapshot

import (
	"io"
	"os"
)

func openForRead(name string) (io.ReadCloser, error) { return os.Open(name) }
