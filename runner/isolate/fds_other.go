//go:build !linux

package isolate

func closeInheritedFDs() error { return nil }
