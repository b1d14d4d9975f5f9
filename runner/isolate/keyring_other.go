//go:build !linux

package isolate

func lockSessionKeyring() error { return nil }
