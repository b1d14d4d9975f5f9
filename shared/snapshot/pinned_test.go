package snapshot_test

// The digests of TestEncoderPinned's tree. They change only if the tar
// layout, the manifest encoding or the compressor's output changes, which
// breaks "same tree, same digests" across versions: do it on purpose.
const (
	pinnedBlob     = "sha256:fc8b84bde57ea3549b81445cc017c7fce67f775a5664010f2b02a4c1117195fa"
	pinnedManifest = "sha256:ffbc5fe89b89a72bfa5c61d78b4f5810b76746f692d15c4b85440f39586c49d0"
)
