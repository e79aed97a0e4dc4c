//go:build !linux

package netwall

// HooksHolder is where Linux keeps the netfilter hooks' namespace (see
// hooks_linux.go); elsewhere there is none.
var HooksHolder = ""

// HooksHeld is false: only Linux has netfilter.
func HooksHeld() bool { return false }

// ReleaseHooks has nothing to release.
func ReleaseHooks() (bool, error) { return false, nil }
