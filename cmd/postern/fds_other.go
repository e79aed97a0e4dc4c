//go:build !linux

package main

// keepInheritedFromChildren does nothing here: postern's children on this
// platform inherit what exec passes.
func keepInheritedFromChildren() {}
