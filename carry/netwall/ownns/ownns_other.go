//go:build !linux

package ownns

// Enter does nothing here: postern sets up no network wall on this
// platform.
func Enter() {}
