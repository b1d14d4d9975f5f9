package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/forgeci/forgeci/shared/cas"
	"github.com/forgeci/forgeci/shared/domain"
	"github.com/forgeci/forgeci/shared/snapshot"
)

// chaosScript prints n numbered lines, sleeping between them. Every line
// names the attempt that printed it: job ID, generation and lease ID (the
// name of the attempt's directory, the workspace's parent), so that the
// checker can tell whose output ended up in which attempt's log.
const chaosScript = `#!/bin/sh
# usage: chaos.sh NAME LINES SECONDS-BETWEEN
i=1
attempt=${FORGECI_WORKSPACE%/*}
while [ "$i" -le "$2" ]; do
  echo "chaos $FORGECI_JOB_ID $FORGECI_GENERATION ${attempt##*/} $1 $i/$2"
  sleep "$3"
  i=$((i + 1))
done
`

// stampStep writes the attempt's identity into the artifact and the cache.
const stampStep = `mkdir -p dist .cache
attempt=${FORGECI_WORKSPACE%/*}
echo "$FORGECI_JOB_ID $FORGECI_GENERATION ${attempt##*/}" > dist/stamp
date > .cache/warm`

// failFirst fails about one job in four on its first attempt (decided by
// the job ID), so that failure retries happen.
const failFirst = `[ "$FORGECI_GENERATION" -gt 1 ] || [ $((0x${FORGECI_JOB_ID##*-} % 4)) -ne 0 ] || { echo "failing generation 1 on purpose"; exit 3; }`

// variants are the pipelines the harness submits, by name. Together they
// use every runner route: source, heartbeats (jobs longer than the lease),
// logs, artifacts up and down, caches, completion, retries of both kinds,
// dependants skipped after a failure.
var variants = map[string]string{
	"build-test": `jobs:
  build:
    runs-on: linux
    retry: {lease-lost: 2}
    cache: {key: chaos-KEY, restore-keys: [chaos-], paths: [.cache]}
    steps:
      - run: sh chaos.sh build 8 0.15
      - run: |
` + indent(stampStep, 10) + `
    artifacts: [{name: dist, paths: [dist/]}]
  test:
    runs-on: linux
    needs: [build]
    retry: {lease-lost: 1, failed: 1}
    download: [{job: build, name: dist}]
    steps:
      - run: sh chaos.sh test 10 0.2
      - run: echo "chaos-dep build $(cat dist/stamp)"
      - run: '` + failFirst + `'
  lint:
    runs-on: linux
    steps:
      - run: sh chaos.sh lint 5 0.1
`,
	"long": `jobs:
  long:
    runs-on: linux
    retry: {lease-lost: 1}
    steps:
      - run: sh chaos.sh long 24 0.25
  short:
    runs-on: linux
    steps:
      - run: sh chaos.sh short 3 0.1
`,
	"fails": `jobs:
  broken:
    runs-on: linux
    steps:
      - run: sh chaos.sh broken 4 0.1
      - run: exit 7
  after:
    runs-on: linux
    needs: [broken]
    steps:
      - run: sh chaos.sh after 2 0.1
`,
}

func indent(s string, n int) string {
	pad := bytes.Repeat([]byte(" "), n)
	var out []byte
	for i, line := range bytes.Split([]byte(s), []byte("\n")) {
		if i > 0 {
			out = append(out, '\n')
		}
		out = append(out, pad...)
		out = append(out, line...)
	}
	return string(out)
}

// cacheKeys is how many copies of build-test there are, each saving its
// own cache key (the first passing build of each saves it), so that cache
// saves keep happening during a run.
const cacheKeys = 24

// uploadVariants snapshots each variant (its .forgeci.yml and chaos.sh)
// into the CAS and returns the sources by variant name; build-test comes
// as build-test-00 ... with a cache key each.
func uploadVariants(ctx context.Context, blobs *cas.Store, dir, projectID string) (map[string]domain.Source, error) {
	out := map[string]domain.Source{}
	all := map[string]string{}
	for name, yml := range variants {
		if !strings.Contains(yml, "chaos-KEY") {
			all[name] = yml
			continue
		}
		for k := range cacheKeys {
			all[fmt.Sprintf("%s-%02d", name, k)] = strings.ReplaceAll(yml, "chaos-KEY", fmt.Sprintf("chaos-%02d", k))
		}
	}
	for name, yml := range all {
		src := filepath.Join(dir, "src-"+name)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, ".forgeci.yml"), []byte(yml), 0o644); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, "chaos.sh"), []byte(chaosScript), 0o755); err != nil {
			return nil, err
		}
		tree, err := snapshot.DirTree(src)
		if err != nil {
			return nil, err
		}
		var blob bytes.Buffer
		res, err := snapshot.Write(&blob, tree)
		if err != nil {
			return nil, err
		}
		// The chaos user is a global admin: its runs are trusted.
		key := cas.BlobKey(projectID, true, res.BlobDigest)
		if err := blobs.Put(ctx, key, res.BlobDigest, bytes.NewReader(blob.Bytes()), res.Size); err != nil {
			return nil, err
		}
		out[name] = domain.Source{BlobDigest: res.BlobDigest, ManifestDigest: res.ManifestDigest, Size: res.Size}
	}
	return out, nil
}
