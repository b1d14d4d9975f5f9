// Package snapshottest makes snapshots for tests.
package snapshottest

import (
	"bytes"
	"testing"

	"github.com/forgeci/forgeci/shared/snapshot"
)

// Of writes a snapshot of the tree under dir and returns its bytes and
// digests.
func Of(t testing.TB, dir string) ([]byte, *snapshot.Result) {
	t.Helper()
	tree, err := snapshot.DirTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	res, err := snapshot.Write(&buf, tree)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), res
}
