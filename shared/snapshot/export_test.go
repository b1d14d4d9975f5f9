package snapshot

// UseDirFDs switches extraction's Linux descriptor path (dirfd_linux.go)
// on or off for a test and returns the undo.
func UseDirFDs(on bool) (undo func()) {
	was := useDirFDs
	useDirFDs = on
	return func() { useDirFDs = was }
}
