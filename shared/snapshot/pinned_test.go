package snapshot_test

// The digests of TestEncoderPinned's tree. They change only if the tar
// layout, the manifest encoding or the compressor's output changes, which
// breaks "same tree, same digests" across versions: do it on purpose.
const (
	pinnedBlob     = "sha256:79f0be95ea930f7410ad80155dba217166a1f3de6e1e04eccedef9448ddc78fb"
	pinnedManifest = "sha256:a1df6a593a855b86188015995b423a1b530d4caad1196832951bca4550e0cbb8"
)
